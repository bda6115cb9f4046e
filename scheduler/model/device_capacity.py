"""Device capacities and counters (resource.k8s.io/v1): a device's `capacity` (a quantity and,
for a device that allows multiple allocations, its `requestPolicy`), a slice's `sharedCounters`
and a device's `consumesCounters` (DRAPartitionableDevices, beta and on in Kubernetes 1.37).

Quantities are exact `Decimal`s (`scheduler.model.quantity`). The readers check what
`validateDevice`, `validateRequestPolicy`, `validateCounterSet` and
`validateDeviceCounterConsumption` (k8s.io/kubernetes@v1.37.2 pkg/apis/resource/validation/
validation.go) check, within the limits of k8s.io/api@v0.37.2 resource/v1/types.go; they never
raise, and a bad entry is reported and left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from scheduler.model.dra_fields import (
    dns_label_problem,
    echo,
    key_path,
    list_at,
    map_at,
    qualified_name_at,
    quantity_at,
    report,
    text_at,
)
from scheduler.model.fields import FieldError, object_at

# Limits of k8s.io/api@v0.37.2 resource/v1/types.go.
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
MAX_COUNTERS_PER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
MAX_CONSUMPTIONS_PER_DEVICE = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
MAX_COUNTERS_PER_CONSUMPTION = 32  # ResourceSliceMaxCountersPerDeviceCounterConsumption
MAX_VALID_VALUES = 10  # CapacityRequestPolicy.ValidValues: "Must not contain more than 10"


@dataclass(frozen=True)
class CapacityRange:
    """requestPolicy.validRange: requests below `minimum` are raised to it, then to the next
    step; above `maximum` they do not fit."""

    minimum: Decimal
    maximum: Decimal | None = None
    step: Decimal | None = None


@dataclass(frozen=True)
class RequestPolicy:
    """How a shared device's capacity is consumed (DRAConsumableCapacity); at most one of
    `valid_values` (ascending) and `valid_range` is set, and then `default` is too."""

    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    valid_range: CapacityRange | None = None


@dataclass(frozen=True)
class DeviceCapacity:
    value: Decimal
    name: str
    """The name as published (maybe unqualified): what a claim's `capacity.requests` and a
    result's `consumedCapacity` use (`CmpRequestOverCapacity` in structured/internal/incubating/
    consumable_capacity.go looks requests up by it)."""
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True)
class CounterSet:
    """A named set of counters a slice shares among devices (`sharedCounters`), or what one
    device consumes from such a set (`consumesCounters`, `name` the set's)."""

    name: str
    counters: Mapping[str, Decimal]


def parse_capacities(
    raw: object, driver: str, multiple: bool, where: str, errors: list[FieldError]
) -> dict[str, DeviceCapacity]:
    found: dict[str, DeviceCapacity] = {}
    for key, value_raw in map_at(raw, where, errors, MAX_ATTRIBUTES_AND_CAPACITIES):
        at = key_path(where, key)
        name = qualified_name_at(key, driver, at, errors)
        entry = object_at(value_raw, at, errors)
        value = quantity_at(entry.get("value"), f"{at}.value", errors)
        if value is None and entry.get("value") is None:
            report(errors, f"{at}.value", "is required")
        policy = request_policy_at(entry.get("requestPolicy"), f"{at}.requestPolicy", errors)
        if policy is not None and not multiple:
            report(errors, f"{at}.requestPolicy", "needs allowMultipleAllocations")
        if name and value is not None and (name not in found or "/" in key):
            found[name] = DeviceCapacity(value, key, policy)
    return found


def request_policy_at(raw: object, where: str, errors: list[FieldError]) -> RequestPolicy | None:
    if raw is None:
        return None
    policy = object_at(raw, where, errors)
    default = quantity_at(policy.get("default"), f"{where}.default", errors)
    values = tuple(
        quantity
        for index, item in enumerate(
            list_at(policy.get("validValues"), f"{where}.validValues", errors, MAX_VALID_VALUES)
        )
        if (quantity := quantity_at(item, f"{where}.validValues[{index}]", errors)) is not None
    )
    if list(values) != sorted(values):
        report(errors, f"{where}.validValues", "must be sorted in ascending order")
    valid_range = None
    if policy.get("validRange") is not None:
        bounds = object_at(policy.get("validRange"), f"{where}.validRange", errors)
        minimum = quantity_at(bounds.get("min"), f"{where}.validRange.min", errors)
        if minimum is None:
            report(errors, f"{where}.validRange.min", "is required")
        else:
            valid_range = CapacityRange(
                minimum,
                quantity_at(bounds.get("max"), f"{where}.validRange.max", errors),
                quantity_at(bounds.get("step"), f"{where}.validRange.step", errors),
            )
    if values and valid_range is not None:
        report(errors, where, "only one of validValues and validRange may be set")
    if (values or valid_range is not None) and default is None:
        report(errors, f"{where}.default", "is required with validValues or validRange")
    if values and default is not None and default not in values:
        report(errors, f"{where}.default", "must be one of validValues")
    return RequestPolicy(default, values, valid_range)


def _counters(raw: object, where: str, limit: int, errors: list[FieldError]) -> dict[str, Decimal]:
    """A `counters` map: DNS-label names to `{value: quantity}`; at least one."""
    found: dict[str, Decimal] = {}
    entries = map_at(raw, where, errors, limit)
    if not entries:
        report(errors, where, "is required")
    for key, entry in entries:
        at = key_path(where, key)
        if dns_label_problem(key):
            report(errors, at, f"{dns_label_problem(key)}, got {echo(key)}")
            continue
        value = quantity_at(object_at(entry, at, errors).get("value"), f"{at}.value", errors)
        if value is not None:
            found[key] = value
    return found


def parse_counter_sets(raw: object, errors: list[FieldError]) -> tuple[CounterSet, ...]:
    found: list[CounterSet] = []
    for index, item in enumerate(list_at(raw, "spec.sharedCounters", errors, MAX_COUNTER_SETS)):
        at = f"spec.sharedCounters[{index}]"
        entry = object_at(item, at, errors)
        name = text_at(
            entry.get("name"), f"{at}.name", errors, required=True, problem=dns_label_problem
        )
        counters = _counters(entry.get("counters"), f"{at}.counters", MAX_COUNTERS_PER_SET, errors)
        if name and any(known.name == name for known in found):
            report(errors, f"{at}.name", f"duplicate counter set {echo(name)}")
        elif name:
            found.append(CounterSet(name, counters))
    return tuple(found)


def parse_consumptions(raw: object, where: str, errors: list[FieldError]) -> tuple[CounterSet, ...]:
    found: list[CounterSet] = []
    for index, item in enumerate(list_at(raw, where, errors, MAX_CONSUMPTIONS_PER_DEVICE)):
        at = f"{where}[{index}]"
        entry = object_at(item, at, errors)
        name = text_at(
            entry.get("counterSet"),
            f"{at}.counterSet",
            errors,
            required=True,
            problem=dns_label_problem,
        )
        counters = _counters(
            entry.get("counters"), f"{at}.counters", MAX_COUNTERS_PER_CONSUMPTION, errors
        )
        if name and any(known.name == name for known in found):
            report(errors, f"{at}.counterSet", f"duplicate counter set {echo(name)}")
        elif name:
            found.append(CounterSet(name, counters))
    return tuple(found)
