"""What `explain` shows of Dynamic Resource Allocation: the DRA objects of a cluster (or dump)
put into the cache's `DraStore`, and per node the devices DynamicResources would allocate for
each of the pod's claims, or why it cannot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.framework.interface import CycleState
from scheduler.plugins.dynamic_resources import CANNOT_ALLOCATE, NAME, PodClaimState
from scheduler.state.cache import ClusterCache
from scheduler.state.dra_handlers import (
    DeviceClassHandler,
    DeviceTaintRuleHandler,
    ResourceClaimHandler,
    ResourceSliceHandler,
)

DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "DeviceTaintRule")
"""The kinds `explain` reads besides Nodes and Pods (resource.k8s.io/v1)."""


def add_dra_objects(cache: ClusterCache, objects: Iterable[Mapping[str, Any]]) -> None:
    """Put every DeviceClass, ResourceSlice, ResourceClaim and DeviceTaintRule of `objects` into
    `cache.dra`."""
    handlers = {
        "DeviceClass": DeviceClassHandler(cache.dra),
        "ResourceSlice": ResourceSliceHandler(cache.dra),
        "ResourceClaim": ResourceClaimHandler(cache.dra),
        "DeviceTaintRule": DeviceTaintRuleHandler(cache.dra),
    }
    for obj in objects:
        handler = handlers.get(str(obj.get("kind") or ""))
        if handler is not None:
            handler.on_add(obj)


def claim_devices(state: CycleState, row: int) -> dict[str, list[str]]:
    """Claim name -> the devices ("driver/pool/device") DynamicResources allocates on node
    `row` for each claim it would allocate (the claim for the pod's extended resources under its
    in-memory name, `<pod>-extended-resources-`); {} for a pod without claims to allocate."""
    claim_state = state.data.get(NAME)
    if not isinstance(claim_state, PodClaimState):
        return {}
    claims = claim_state.claims_on(row)
    allocations = claim_state.allocations_for(row) if claims else None
    if allocations is None:
        return {}
    return {
        claim.name: [f"{r.driver}/{r.pool}/{r.device}" for r in allocation.results]
        for claim, allocation in zip(claims, allocations, strict=True)
    }


def claim_reasons(state: CycleState, row: int, reasons: list[str]) -> list[str]:
    """`reasons` with DynamicResources' "cannot allocate all claims" made specific where the
    allocator said more for node `row`."""
    claim_state = state.data.get(NAME)
    if not isinstance(claim_state, PodClaimState):
        return reasons
    detail = claim_state.reasons.get(row, "")
    if not detail or detail == CANNOT_ALLOCATE:
        return reasons
    return [f"{r} ({detail})" if r == CANNOT_ALLOCATE else r for r in reasons]
