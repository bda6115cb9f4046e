"""Shares of devices that allow multiple allocations during one allocation attempt, and the
packing order of such devices.

`Shares` is the search's view of consumable capacity (DRAConsumableCapacity): what the
cluster's allocated and in-flight shares consume (`DeviceUse`) plus what this attempt's shares
add, as `allocatingCapacity` in k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/
incubating/allocator_incubating.go; `fits` is `CmpRequestOverCapacity` over both, `in_use` is
`deviceCapacityInUse` (a device with any share, whose shared counters are then charged
already).

`packed(...)` is gpu-scheduler's choice among solutions, not upstream's (whose order is plain):
a request tries first the devices that already have a share and still have room for it, the
tightest fit first (least capacity left once it is added: best fit), so fractional requests
fill partly used GPUs before they break into an untouched one, and untouched GPUs stay whole
for requests that need them whole. The NVLink phases that follow
(`scheduler.dra.allocator_order`) count only untouched devices as free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal

from scheduler.dra.allocator_requests import Candidate, DeviceID, RequestData
from scheduler.dra.consumable import (
    CapacityError,
    DeviceUse,
    add_amounts,
    capacity_fits,
    consumption,
    published,
    room_left,
)
from scheduler.model.device_capacity import DeviceCapacity
from scheduler.model.devices import Device


class Shares:
    """Consumable capacity for one attempt (see the module docstring)."""

    def __init__(self, use: DeviceUse) -> None:
        self._use = use
        self._allocating: dict[DeviceID, dict[str, Decimal]] = {}
        self._count: dict[DeviceID, int] = {}
        self._published: dict[int, tuple[Device, dict[str, DeviceCapacity]]] = {}

    def in_use(self, device: DeviceID) -> bool:
        """Whether the device has a share, in the cluster or taken in this attempt."""
        return self._use.sharing(device) or self._count.get(device, 0) > 0

    def fits(self, data: RequestData, candidate: Candidate) -> bool:
        """Whether the device's capacities have room for the request now; raises
        `CapacityError`. A device that allows a single allocation, asked for no capacity,
        always has room (it consumes its whole capacities, once)."""
        device = candidate.entry.device
        requests = data.spec.capacity_requests
        if not requests and not device.allow_multiple_allocations:
            return True
        return capacity_fits(
            self._use.consumed.get(candidate.id, {}),
            requests,
            self._capacities(device),
            self._allocating.get(candidate.id, {}),
        )

    def take(self, data: RequestData, candidate: Candidate) -> dict[str, Decimal]:
        """Record a share of the device for the request; returns its consumed capacity."""
        capacities = self._capacities(candidate.entry.device)
        consumed = consumption(data.spec.capacity_requests, capacities)
        add_amounts(self._allocating.setdefault(candidate.id, {}), consumed, 1)
        self._count[candidate.id] = self._count.get(candidate.id, 0) + 1
        return consumed

    def give_back(self, candidate: Candidate, consumed: dict[str, Decimal]) -> None:
        """Undo `take`."""
        add_amounts(self._allocating[candidate.id], consumed, -1)
        self._count[candidate.id] -= 1

    def room_after(self, data: RequestData, candidate: Candidate) -> Decimal:
        """The capacity the device would have left with the request's share added."""
        capacities = self._capacities(candidate.entry.device)
        current = dict(self._use.consumed.get(candidate.id, {}))
        add_amounts(current, self._allocating.get(candidate.id, {}), 1)
        return room_left(current, consumption(data.spec.capacity_requests, capacities), capacities)

    def _capacities(self, device: Device) -> dict[str, DeviceCapacity]:
        kept = self._published.get(id(device))
        if kept is None or kept[0] is not device:
            kept = (device, published(device))
            self._published[id(device)] = kept
        return kept[1]


def packed(
    candidates: Sequence[Candidate],
    usable: Callable[[Candidate], bool],
    shares: Shares,
    data: RequestData,
) -> tuple[Candidate, ...]:
    """The devices that allow multiple allocations, already have a share, could serve the
    request now (`usable`) and have room for it, the least room left afterwards first (the
    search's order on a tie)."""
    found = [
        (shares.room_after(data, candidate), position, candidate)
        for position, candidate in enumerate(candidates)
        if candidate.entry.device.allow_multiple_allocations
        and shares.in_use(candidate.id)
        and usable(candidate)
        and _fits(shares, data, candidate)
    ]
    found.sort(key=lambda item: (item[0], item[1]))
    return tuple(candidate for _, _, candidate in found)


def _fits(shares: Shares, data: RequestData, candidate: Candidate) -> bool:
    """`Shares.fits`, a request that cannot be represented counting as not fitting here (the
    search reports it when it reaches the device in its own order)."""
    try:
        return shares.fits(data, candidate)
    except CapacityError:
        return False
