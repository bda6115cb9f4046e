"""Builders shared by the allocator tests: slices, pools, claims and classes through the model
parsers, and a selector matcher double that maps expression strings to Python predicates over
`Device` (the CEL evaluator is tested on its own). No tests here."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from scheduler.dra.allocator import Allocator, NodeAllocation
from scheduler.dra.consumable import DeviceUse
from scheduler.dra.selectors import SelectorError
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.model.device_classes import DeviceClass, parse_device_class
from scheduler.model.devices import Device, ResourceSlice, parse_resource_slice
from scheduler.model.pools import Pool, gather_pools
from tests.dra_objects import (
    DRIVER,
    GPU_CLASS_SELECTOR,
    claim_spec,
    device_class,
    gpu_device,
    resource_claim,
    resource_slice,
)

NODE = "node-a"
LABELS = {"zone": "z1"}
GOOD = "device.attributes['gpu.nvidia.com'].good"
ODD = "odd index"
HIGH = "index >= 6"
BROKEN = "broken"


def index_of(device: Device) -> int:
    return int(device.name.rsplit("-", 1)[1])


PREDICATES: dict[str, Callable[[Device], bool]] = {
    GPU_CLASS_SELECTOR: lambda device: device.attributes.get(f"{DRIVER}/type") == "gpu",
    GOOD: lambda device: device.attributes.get(f"{DRIVER}/good") is True,
    ODD: lambda device: index_of(device) % 2 == 1,
    HIGH: lambda device: index_of(device) >= 6,
}


class MatcherDouble:
    """`SelectorMatcher` over `PREDICATES`; an unknown expression raises `SelectorError`.
    Records every call's memo key."""

    def __init__(self, predicates: Mapping[str, Callable[[Device], bool]] = PREDICATES) -> None:
        self.predicates = predicates
        self.keys: list[Hashable] = []

    def matches(self, expression: str, driver: str, device: Device, memo_key: Hashable) -> bool:
        self.keys.append(memo_key)
        predicate = self.predicates.get(expression)
        if predicate is None:
            raise SelectorError(f"no such key: {expression}")
        return predicate(device)


def gpus(*indices: int, node: str = NODE, **fields: Any) -> list[dict[str, Any]]:
    return [gpu_device(index, node=node, **fields) for index in indices]


def node_slice(
    name: str = "s", devices: Sequence[dict[str, Any]] | None = None, **kwargs: Any
) -> ResourceSlice:
    found = parse_resource_slice(resource_slice(name, devices=devices, **kwargs))
    assert not found.errors, found.errors
    return found


def pools_of(*slices: ResourceSlice, node: str = NODE) -> tuple[Pool, ...]:
    return gather_pools(slices, node, LABELS)


def make_class(name: str = DRIVER, **kwargs: Any) -> DeviceClass:
    found = parse_device_class(device_class(name, **kwargs))
    assert not found.errors, found.errors
    return found


CLASSES = {DRIVER: make_class()}


def make_claim(
    name: str, *requests: dict[str, Any], namespace: str = "default", **spec: Any
) -> ResourceClaim:
    found = parse_resource_claim(resource_claim(name, namespace, claim_spec(*requests, **spec)))
    assert not found.errors, found.errors
    return found


def allocate(
    claims: Sequence[ResourceClaim],
    pools: Sequence[Pool],
    *,
    in_use: frozenset[tuple[str, str, str]] = frozenset(),
    classes: Mapping[str, DeviceClass] | None = None,
    domains: Mapping[tuple[str, str, str], int] | None = None,
    slices: Sequence[ResourceSlice] = (),
    max_steps: int = 200_000,
    matcher: MatcherDouble | None = None,
    shared: DeviceUse | None = None,
) -> NodeAllocation:
    allocator = Allocator(
        CLASSES if classes is None else classes,
        in_use,
        matcher or MatcherDouble(),
        max_steps,
        shared=shared,
    )
    return allocator.allocate(NODE, LABELS, pools, claims, domains, slices)


def device_names(result: NodeAllocation, claim: int = 0) -> list[str]:
    assert result.allocations is not None, result.reason
    return [entry.device for entry in result.allocations[claim].results]


def gpu_id(index: int, pool: str = NODE) -> tuple[str, str, str]:
    return (DRIVER, pool, f"gpu-{index}")
