"""What the allocator knows about each request before it searches, checked the way
`Allocator.Allocate` and `validateDeviceRequest` (k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/incubating/allocator_incubating.go) check it:

- every request, or every firstAvailable entry, names a DeviceClass that exists; otherwise the
  attempt fails (`AllocationError`, upstream's words: "claim <ns>/<name>, request <r>: could not
  retrieve device class <c>: deviceclass.resource.k8s.io "<c>" not found");
- ExactCount wants `count` devices; All wants every device of the node's usable pools that the
  class's and the request's selectors accept, and fails the attempt when a pool is incomplete or
  invalid ("... asks for all devices, but resource pool <driver>/<pool> is currently being
  updated" / "... is currently invalid");
- the fewest devices a claim can need (the smallest firstAvailable entry) must fit the 32
  results of an allocation ("... adding <n> devices exceeds the claim limit of 32, with <m>
  already accounted for").

`missing_device_class` is kube-scheduler's PreFilter check (`validateDeviceClass` in
k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go):
the caller reports the pod unschedulable with its words.

An All request takes only the devices whose capacities could hold its capacity requests when
nothing else uses them (upstream's static check): a device with too little capacity is not
part of "all"; one whose capacity other shares use up makes the request fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.dra.consumable import CapacityError, capacity_fits, published
from scheduler.model.allocations import MAX_RESULTS
from scheduler.model.claim_specs import RequestSpec
from scheduler.model.claims import ResourceClaim
from scheduler.model.device_classes import DeviceClass
from scheduler.model.pools import Pool, PoolDevice

DeviceID = tuple[str, str, str]
"""(driver, pool, device)."""


class AllocationError(Exception):
    """An error of the attempt, not of the node (kube-scheduler returns an Error status and the
    pod backs off): a missing DeviceClass, a request for all devices of a pool being updated,
    a claim needing more than 32 devices, a constraint that rules out a device All requires."""


@dataclass(frozen=True)
class Candidate:
    """One device of a usable pool, as the search tries it."""

    pool: Pool
    entry: PoolDevice
    id: DeviceID

    @property
    def name(self) -> str:
        """`driver/pool/device`, how upstream prints a device ID."""
        return "/".join(self.id)


@dataclass(frozen=True)
class RequestData:
    """One request, or one firstAvailable entry of it, of one claim."""

    claim_index: int
    request_index: int
    sub_index: int
    request: str
    """The request's name."""
    subrequest: str
    """The entry's name; "" for a request without firstAvailable."""
    spec: RequestSpec
    device_class: DeviceClass
    num_devices: int
    all_devices: tuple[Candidate, ...] = ()
    """With allocationMode All: every matching device, in the search's order."""

    @property
    def name(self) -> str:
        """What a result and a config name: "request" or "request/entry"."""
        return f"{self.request}/{self.subrequest}" if self.subrequest else self.request

    @property
    def all_mode(self) -> bool:
        return self.spec.allocation_mode == "All"


Selectable = Callable[[RequestData, Candidate], bool]
"""Whether a device satisfies the request's class and selectors (and its own node selection);
may raise `SelectorError`."""


def claim_label(claim: ResourceClaim) -> str:
    """How klog prints a claim: "<namespace>/<name>"."""
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name


def candidates(pools: Sequence[Pool]) -> tuple[Candidate, ...]:
    """The devices of the usable pools in upstream's order: pool, slice, device."""
    return tuple(
        Candidate(pool, entry, (pool.id.driver, pool.id.pool, entry.device.name))
        for pool in pools
        if pool.usable
        for entry in pool.devices
    )


def missing_device_class(
    claims: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass]
) -> str:
    """kube-scheduler's PreFilter words for the first request (claims, then requests, then
    firstAvailable entries in order) whose DeviceClass does not exist: "request <r>: device
    class <c> does not exist" (<r> is "request/entry" for an entry); "" when all exist.
    Pass only the claims that still need an allocation, as PreFilter checks only those."""
    for claim in claims:
        for request in claim.spec.requests:
            for reference, spec in request.alternatives:
                if spec.device_class_name not in classes:
                    return (
                        f"request {reference}: device class {spec.device_class_name} does not exist"
                    )
    return ""


def prepare(
    claims: Sequence[ResourceClaim],
    classes: Mapping[str, DeviceClass],
    pools: Sequence[Pool],
    selectable: Selectable,
) -> tuple[tuple[tuple[RequestData, ...], ...], ...]:
    """Per claim, per request, its alternatives (one for an `exactly` request). Raises
    `AllocationError` or `SelectorError` (from matching the devices of an All request)."""
    found = []
    for claim_index, claim in enumerate(claims):
        requests = []
        least_total = 0
        for request_index, request in enumerate(claim.spec.requests):
            alternatives = []
            for sub_index, sub in enumerate(request.first_available or (request.exactly,)):
                assert sub is not None  # a parsed request has exactly or firstAvailable
                data = _request_data(
                    claim,
                    RequestData(
                        claim_index,
                        request_index,
                        sub_index,
                        request.name,
                        sub.name if request.first_available else "",
                        sub,
                        DeviceClass(name=""),
                        sub.count,
                    ),
                    classes,
                    pools,
                    selectable,
                )
                alternatives.append(data)
            least = min(data.num_devices for data in alternatives)
            if least > MAX_RESULTS - least_total:
                raise AllocationError(
                    f"claim {claim_label(claim)}, request {request.name}: adding {least} devices "
                    f"exceeds the claim limit of {MAX_RESULTS}, with {least_total} already "
                    "accounted for"
                )
            least_total += least
            requests.append(tuple(alternatives))
        found.append(tuple(requests))
    return tuple(found)


def _request_data(
    claim: ResourceClaim,
    data: RequestData,
    classes: Mapping[str, DeviceClass],
    pools: Sequence[Pool],
    selectable: Selectable,
) -> RequestData:
    """`validateDeviceRequest` for one request or entry."""
    label = f"claim {claim_label(claim)}, request {data.subrequest or data.request}"
    class_name = data.spec.device_class_name
    device_class = classes.get(class_name)
    if device_class is None:
        raise AllocationError(
            f"{label}: could not retrieve device class {class_name}: "
            f'deviceclass.resource.k8s.io "{class_name}" not found'
        )
    data = replace(data, device_class=device_class)
    if not data.all_mode:
        return data
    every: list[Candidate] = []
    for pool in pools:
        if pool.incomplete:
            raise AllocationError(
                f"{label}: asks for all devices, but resource pool {pool.id} is currently being "
                "updated"
            )
        if pool.invalid:
            raise AllocationError(
                f"{label}: asks for all devices, but resource pool {pool.id} is currently invalid"
            )
        for candidate in candidates((pool,)):
            if selectable(data, candidate) and _static_fit(label, data, candidate):
                every.append(candidate)
    return replace(data, all_devices=tuple(every), num_devices=len(every))


def _static_fit(label: str, data: RequestData, candidate: Candidate) -> bool:
    """Whether the device's capacities could hold the request with nothing else using them."""
    device = candidate.entry.device
    try:
        return capacity_fits({}, data.spec.capacity_requests, published(device), {})
    except CapacityError as error:
        raise AllocationError(
            f"{label}: checking capacity for device {device.name}: {error}"
        ) from error
