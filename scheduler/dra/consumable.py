"""Consumable capacity (DRAConsumableCapacity, beta and on in Kubernetes 1.37, with
DRAFractionalCapacityRange on too): how much of a device's capacities a request consumes, and
whether a device still has room for it, as k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/incubating/consumable_capacity.go has it.

- `consumed_amount(requested, capacity)`: a capacity the request does not name consumes the
  policy's `default`, else the whole `value`; a named one without a policy consumes what is
  asked; with `validRange` it is raised to `min`, then up to the next `step` from `min`; with
  `validValues` to the first value at least as large (or stays as asked, and then violates the
  policy). Ranges are computed in milli-units when `min`, `max` and `step` all are exact
  milli-values (upstream's fractional path), else in whole units, each value rounded up
  (`Quantity.Value()`); a request that cannot be represented so raises `CapacityError`.
- `violates_policy(amount, policy)`: the default is always valid; otherwise above `max`, off
  the `step` grid from `min`, or not one of `validValues`.
- `capacity_fits(current, requests, capacities, allocating)` (`CmpRequestOverCapacity`): the
  device must publish every capacity requested; each consumed amount must respect its policy
  and, added to what allocated shares (`current`) and this attempt's shares (`allocating`)
  consume, stay within the capacity's value. A negative amount raises `CapacityError`, as an
  unrepresentable request does: errors of the attempt, not of the device.
- `consumption(requests, capacities)` (`GetConsumedCapacityFromRequest`): what a share records
  as its `consumedCapacity`, one entry per capacity the device publishes.

`DeviceUse` is what the allocator reads of the cluster: devices taken whole (results without a
`shareID`), and per device that allows multiple allocations the capacity its shares consume
(`AggregatedCapacity`) and whether it has any share (`AllocatedSharedDeviceIDs`).
`device_use(allocations)` builds it from allocations as kube-scheduler's allocated-device
tracker does (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
allocateddevices.go `foreachAllocatedDevice`): results with admin access count for nothing, a
result with a `shareID` is a share, any other takes its device.

Capacities are named as the device publishes them (`DeviceCapacity.name`, maybe unqualified):
requests and `consumedCapacity` use those names. `new_share_id()` is a random lower-case
RFC 4122 UUID, what upstream's `GenerateShareID` makes and the API server requires.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal

from scheduler.model.allocations import Allocation
from scheduler.model.device_capacity import CapacityRange, DeviceCapacity, RequestPolicy
from scheduler.model.devices import Device

DeviceID = tuple[str, str, str]
"""(driver, pool, device)."""
Amounts = Mapping[str, Decimal]
"""Capacity name as published -> quantity."""

MAX_INT64 = 2**63 - 1
MILLI = Decimal(1000)
NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"
NEGATIVE = "capacity value is negative"


class CapacityError(Exception):
    """A capacity request that cannot be represented, or a negative consumption: upstream
    aborts the attempt with it."""


@dataclass(frozen=True)
class DeviceUse:
    """What allocated and in-flight claims hold (see the module docstring)."""

    taken: frozenset[DeviceID] = frozenset()
    """Devices allocated whole (no `shareID`)."""
    consumed: Mapping[DeviceID, Amounts] = field(default_factory=dict)
    """Per shared device, the sum of its shares' `consumedCapacity`."""
    shared: frozenset[DeviceID] = frozenset()
    """Devices with at least one share (with or without consumed capacity)."""

    def sharing(self, device: DeviceID) -> bool:
        """Whether some share of `device` is allocated or in flight."""
        return device in self.shared or device in self.consumed

    def allocated(self, device: DeviceID) -> bool:
        """Whether `device` is allocated whole or shared (`IsDeviceAllocated`: its counters
        count)."""
        return device in self.taken or self.sharing(device)


def device_use(allocations: Iterable[Allocation]) -> DeviceUse:
    """`DeviceUse` of `allocations` (see the module docstring)."""
    taken: set[DeviceID] = set()
    consumed: dict[DeviceID, dict[str, Decimal]] = {}
    shared: set[DeviceID] = set()
    for allocation in allocations:
        for result in allocation.results:
            if result.admin_access:
                continue
            if not result.share_id:
                taken.add(result.device_id)
                continue
            shared.add(result.device_id)
            if result.consumed_capacity:
                amounts = consumed.setdefault(result.device_id, {})
                for name, value in result.consumed_capacity.items():
                    amounts[name] = amounts.get(name, Decimal(0)) + value
    return DeviceUse(frozenset(taken), consumed, frozenset(shared))


def new_share_id() -> str:
    return str(uuid.uuid4())


def published(device: Device) -> dict[str, DeviceCapacity]:
    """The device's capacities by the name it publishes them under."""
    return {capacity.name: capacity for capacity in device.capacity.values()}


def consumed_amount(requested: Decimal | None, capacity: DeviceCapacity) -> Decimal:
    """`calculateConsumedCapacity`; raises `CapacityError`."""
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.valid_range is not None:
        return _round_up_range(requested, policy.valid_range)
    for value in policy.valid_values:
        if requested <= value:
            return value
    return requested


def violates_policy(amount: Decimal, policy: RequestPolicy | None) -> bool:
    """`violatesPolicy`."""
    if policy is None or (policy.default is not None and amount == policy.default):
        return False
    if policy.valid_range is not None:
        bounds = policy.valid_range
        if bounds.maximum is not None and amount > bounds.maximum:
            return True
        if bounds.step is None:
            return False
        if _use_milli(bounds):
            milli = _milli(amount)
            if milli is None:
                return True
            return (milli - _ceil(bounds.minimum * MILLI)) % _ceil(bounds.step * MILLI) != 0
        return _go_rem(_ceil(amount) - _ceil(bounds.minimum), _ceil(bounds.step)) != 0
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumption(requests: Amounts, capacities: Mapping[str, DeviceCapacity]) -> dict[str, Decimal]:
    """`GetConsumedCapacityFromRequest`: what a share of the device consumes."""
    return {name: consumed_amount(requests.get(name), cap) for name, cap in capacities.items()}


def capacity_fits(
    current: Amounts,
    requests: Amounts,
    capacities: Mapping[str, DeviceCapacity],
    allocating: Amounts,
) -> bool:
    """`CmpRequestOverCapacity` (see the module docstring); raises `CapacityError`."""
    if any(name not in capacities for name in requests):
        return False
    consumed: dict[str, Decimal] = {}
    for name, capacity in capacities.items():
        try:
            amount = consumed_amount(requests.get(name), capacity)
        except CapacityError as error:
            raise CapacityError(f'capacity "{name}": {error}') from error
        if amount < 0:
            raise CapacityError(f'capacity "{name}": {NEGATIVE}')
        consumed[name] = amount
    for name, capacity in capacities.items():
        amount = consumed[name]
        if violates_policy(amount, capacity.request_policy):
            return False
        total = current.get(name, Decimal(0)) + amount + allocating.get(name, Decimal(0))
        if total > capacity.value:
            return False
    return True


def room_left(
    current: Amounts, consumed: Amounts, capacities: Mapping[str, DeviceCapacity]
) -> Decimal:
    """The share of the device's capacities left free once `consumed` is added to `current`,
    summed over its capacities (0: full); how the packing order tells a tight fit."""
    left = Decimal(0)
    for name, capacity in capacities.items():
        if capacity.value > 0:
            used = current.get(name, Decimal(0)) + consumed.get(name, Decimal(0))
            left += (capacity.value - used) / capacity.value
    return left


def add_amounts(into: dict[str, Decimal], amounts: Amounts, sign: int) -> None:
    """Add (`sign` 1) or take away (-1) `amounts`; an entry back at zero stays."""
    for name, value in amounts.items():
        into[name] = into.get(name, Decimal(0)) + sign * value


# -- rounding ----------------------------------------------------------------------------------


def _round_up_range(requested: Decimal, bounds: CapacityRange) -> Decimal:
    """`roundUpRange`."""
    if requested < bounds.minimum:
        return bounds.minimum
    if bounds.step is None:
        return requested
    if _use_milli(bounds):
        milli = _milli(requested)
        if milli is None:
            raise CapacityError(
                f"{NOT_REPRESENTABLE}: request {_text(requested)} is not a representable milli "
                "value"
            )
        step, minimum = _ceil(bounds.step * MILLI), _ceil(bounds.minimum * MILLI)
        steps = _ceil_div(milli - minimum, step)
        if steps > (MAX_INT64 - minimum) // step:
            raise CapacityError(
                f"{NOT_REPRESENTABLE}: rounding request {_text(requested)} up to the next step "
                "passes the milli-value range"
            )
        return Decimal(minimum + step * steps) / MILLI
    if requested > MAX_INT64:
        raise CapacityError(f"{NOT_REPRESENTABLE}: request {_text(requested)} exceeds MaxInt64")
    step, minimum = _ceil(bounds.step), _ceil(bounds.minimum)
    steps = _ceil_div(_ceil(requested) - minimum, step)
    if minimum >= 0 and steps > (MAX_INT64 - minimum) // step:
        raise CapacityError(
            f"{NOT_REPRESENTABLE}: rounding request {_text(requested)} up to the next step "
            "passes MaxInt64"
        )
    return Decimal(minimum + step * steps)


def _use_milli(bounds: CapacityRange) -> bool:
    """`useMilli`: every bound an exact milli-value within int64, the step at least 1m."""
    for value in (bounds.minimum, bounds.maximum, bounds.step):
        if value is not None and _milli(value) is None:
            return False
    return bounds.step is None or bounds.step * MILLI >= 1


def _milli(value: Decimal) -> int | None:
    """`safeMilliValue`: the value in milli-units when exact (and within int64)."""
    scaled = value * MILLI
    if scaled != scaled.to_integral_value() or abs(scaled) > MAX_INT64:
        return None
    return int(scaled)


def _ceil(value: Decimal) -> int:
    """`Quantity.Value()` / `MilliValue()` of a scaled value: rounded up."""
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _ceil_div(added: int, step: int) -> int:
    """Go's `added / step`, plus one when there is a remainder."""
    steps = _go_div(added, step)
    return steps + 1 if _go_rem(added, step) != 0 else steps


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def _go_rem(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def _text(value: Decimal) -> str:
    return format(value.normalize(), "f")
