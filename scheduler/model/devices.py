"""ResourceSlices (resource.k8s.io/v1) and their devices, parsed into frozen records.

`parse_resource_slice` takes the JSON an informer delivers and returns a `ResourceSlice`: the
driver, the pool (name, generation, resourceSliceCount), where its devices are available
(`nodeName`, `nodeSelector`, `allNodes`, or per device with `perDeviceNodeSelection`), the
devices and the slice's `sharedCounters`. A device keeps its attributes typed (bool, int, str or
`Version`) and its capacities as exact `Decimal` quantities, both keyed by their fully qualified
name (an unqualified name belongs to the driver's domain, as `parseQualifiedName` in
k8s.io/dynamic-resource-allocation@v0.37.2 cel/compile.go puts it in the CEL maps; when a device
publishes both spellings the qualified one wins, as `lookupAttribute` in
structured/internal/incubating/allocator_incubating.go looks it up first).

Capacities and counters are read by `scheduler.model.device_capacity`, taints by
`scheduler.model.device_taints`. Parsing never raises: a bad field is a `FieldError` naming its
path (`spec.devices[2].attributes[uuid].string`), and the bad part is left out (an attribute, a
capacity, a taint, a counter, a device without a valid name). The API's limits
(k8s.io/api@v0.37.2 resource/v1/types.go) bound what is read; list-type attributes
(DRAListTypeAttributes) and compatibility groups (DRADeviceCompatibilityGroups) are alpha and off
in Kubernetes 1.37: the first is reported and left out, the second ignored (the API server drops
it). `scheduler.model.pools` treats a slice
with errors as making its pool invalid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.device_capacity import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    CounterSet,
    DeviceCapacity,
    parse_capacities,
    parse_consumptions,
    parse_counter_sets,
)
from scheduler.model.device_taints import DeviceTaint, taint_at
from scheduler.model.dra_fields import (
    bool_at,
    bounded_errors,
    dns_label_problem,
    dns_subdomain_problem,
    driver_name_problem,
    echo,
    int_at,
    key_path,
    list_at,
    map_at,
    meta_at,
    pool_name_problem,
    qualified_name_at,
    report,
    text_at,
)
from scheduler.model.fields import FieldError, object_at
from scheduler.model.node_selection import NodeSelection, parse_node_selector
from scheduler.model.semver import VERSION_MAX_LENGTH, Version, parse_version

# Limits of k8s.io/api@v0.37.2 resource/v1/types.go.
MAX_DEVICES = 128  # ResourceSliceMaxDevices
MAX_DEVICES_WITH_ADVANCED_FEATURES = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures
MAX_TAINTS = 16  # DeviceTaintsMaxLength
MAX_BINDING_CONDITIONS = 4  # BindingConditionsMaxSize, BindingFailureConditionsMaxSize
STRING_MAX_LENGTH = 64  # DeviceAttributeMaxValueLength
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

AttributeValue = bool | int | str | Version
"""A device attribute's value: exactly one of the API's bool, int, string and version."""

_LIST_ATTRIBUTES = ("bools", "ints", "strings", "versions")


@dataclass(frozen=True)
class Device:
    """One device of a slice (`Device` of the API); its name is unique in the pool."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    """Keyed by fully qualified name (`gpu.nvidia.com/productName`)."""
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    """Keyed by fully qualified name (`gpu.nvidia.com/memory`)."""
    allow_multiple_allocations: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterSet, ...] = ()
    node_selection: NodeSelection | None = None
    """Its own node selection, only in a slice with `perDeviceNodeSelection`."""
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolRef:
    """spec.pool: the slice's pool and how many slices it has at this generation."""

    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True)
class ResourceSlice:
    """One ResourceSlice. `errors` non-empty: its pool is not allocated from."""

    name: str
    driver: str
    pool: PoolRef
    node_selection: NodeSelection = field(default_factory=NodeSelection)
    """nodeName, nodeSelector or allNodes; unset with `per_device_node_selection`."""
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    uid: str = ""
    resource_version: str = ""
    errors: tuple[FieldError, ...] = ()


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    """A ResourceSlice from its JSON (`validateResourceSliceSpec` of k8s.io/kubernetes@v1.37.2
    pkg/apis/resource/validation/validation.go checks what is checked here). Never raises."""
    errors: list[FieldError] = []
    meta = meta_at(obj, errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    driver = text_at(
        spec.get("driver"), "spec.driver", errors, required=True, problem=driver_name_problem
    )
    pool = _pool(spec.get("pool"), errors)
    selection = _node_selection(spec, "spec", errors)
    per_device = bool_at(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection", errors)
    chosen = [
        name
        for name, present in (
            ("nodeName", bool(selection.node_name)),
            ("nodeSelector", selection.node_selector is not None),
            ("allNodes", selection.all_nodes),
            ("perDeviceNodeSelection", per_device),
        )
        if present
    ]
    if len(chosen) != 1:
        report(
            errors,
            "spec",
            "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required"
            + (f", got {', '.join(chosen)}" if chosen else ""),
        )
    if selection.node_selector is not None and len(selection.node_selector.terms) != 1:
        report(errors, "spec.nodeSelector.nodeSelectorTerms", "must have exactly one term")
    devices = _devices(spec.get("devices"), driver or "", per_device, errors)
    shared = parse_counter_sets(spec.get("sharedCounters"), errors)
    if devices and shared:
        report(errors, "spec", "only one of sharedCounters and devices may be set")
    return ResourceSlice(
        name=meta.name,
        driver=driver,
        pool=pool,
        node_selection=selection,
        per_device_node_selection=per_device,
        devices=devices,
        shared_counters=shared,
        uid=meta.uid,
        resource_version=meta.resource_version,
        errors=bounded_errors(errors),
    )


def _pool(raw: object, errors: list[FieldError]) -> PoolRef:
    pool = object_at(raw, "spec.pool", errors)
    name = text_at(
        pool.get("name"), "spec.pool.name", errors, required=True, problem=pool_name_problem
    )
    generation = int_at(pool.get("generation"), "spec.pool.generation", errors, minimum=0)
    count = int_at(
        pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", errors, minimum=1
    )
    if count is None and "resourceSliceCount" not in pool:
        report(errors, "spec.pool.resourceSliceCount", "is required")
    return PoolRef(name, generation or 0, count or 0)


def _node_selection(spec: Mapping[str, Any], where: str, errors: list[FieldError]) -> NodeSelection:
    """nodeName, nodeSelector and allNodes of a slice's spec or of a device."""
    node_name_raw = spec.get("nodeName")
    if node_name_raw == "":
        report(errors, f"{where}.nodeName", "must be unset or not empty")
    all_nodes_raw = spec.get("allNodes")
    if all_nodes_raw is False:
        report(errors, f"{where}.allNodes", "must be unset or true")
    return NodeSelection(
        node_name=text_at(
            node_name_raw, f"{where}.nodeName", errors, problem=dns_subdomain_problem
        ),
        node_selector=parse_node_selector(
            spec.get("nodeSelector"), f"{where}.nodeSelector", errors
        ),
        all_nodes=bool_at(all_nodes_raw, f"{where}.allNodes", errors),
    )


def _devices(
    raw: object, driver: str, per_device: bool, errors: list[FieldError]
) -> tuple[Device, ...]:
    found: list[Device] = []
    seen: set[str] = set()
    for index, item in enumerate(list_at(raw, "spec.devices", errors, MAX_DEVICES)):
        device = parse_device(item, driver, per_device, f"spec.devices[{index}]", errors)
        if device is None:
            continue
        if device.name in seen:
            report(errors, f"spec.devices[{index}].name", f"duplicate device {echo(device.name)}")
            continue
        seen.add(device.name)
        found.append(device)
    advanced = any(device.taints or device.consumes_counters for device in found)
    if advanced and len(found) > MAX_DEVICES_WITH_ADVANCED_FEATURES:
        report(
            errors,
            "spec.devices",
            f"must have at most {MAX_DEVICES_WITH_ADVANCED_FEATURES} entries when a device has "
            f"taints or consumes counters, got {len(found)}",
        )
    return tuple(found)


def parse_device(
    raw: object, driver: str, per_device: bool, where: str, errors: list[FieldError]
) -> Device | None:
    """One entry of spec.devices (`validateDevice`); None when its name is missing or bad."""
    item = object_at(raw, where, errors)
    name = text_at(
        item.get("name"), f"{where}.name", errors, required=True, problem=dns_label_problem
    )
    attributes = _attributes(item.get("attributes"), driver, f"{where}.attributes", errors)
    multiple = bool_at(
        item.get("allowMultipleAllocations"), f"{where}.allowMultipleAllocations", errors
    )
    capacity = parse_capacities(item.get("capacity"), driver, multiple, f"{where}.capacity", errors)
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        report(
            errors,
            where,
            f"must have at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities, "
            f"got {len(attributes) + len(capacity)}",
        )
    taints = tuple(
        taint
        for index, entry in enumerate(
            list_at(item.get("taints"), f"{where}.taints", errors, MAX_TAINTS)
        )
        if (taint := taint_at(entry, f"{where}.taints[{index}]", errors)) is not None
    )
    consumes = parse_consumptions(item.get("consumesCounters"), f"{where}.consumesCounters", errors)
    selection = _node_selection(item, where, errors)
    if (
        per_device
        and sum(
            (bool(selection.node_name), selection.node_selector is not None, selection.all_nodes)
        )
        != 1
    ):
        report(
            errors,
            where,
            "exactly one of nodeName, nodeSelector, allNodes is required with "
            "perDeviceNodeSelection",
        )
    elif not per_device and selection.is_set:
        report(errors, where, "nodeName, nodeSelector and allNodes need perDeviceNodeSelection")
    if not name:
        return None
    return Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=multiple,
        taints=taints,
        consumes_counters=consumes,
        node_selection=selection if per_device else None,
        binds_to_node=bool_at(item.get("bindsToNode"), f"{where}.bindsToNode", errors),
        binding_conditions=_conditions(item, "bindingConditions", where, errors),
        binding_failure_conditions=_conditions(item, "bindingFailureConditions", where, errors),
    )


def _attributes(
    raw: object, driver: str, where: str, errors: list[FieldError]
) -> dict[str, AttributeValue]:
    found: dict[str, AttributeValue] = {}
    qualified_spelling: set[str] = set()
    for key, value_raw in map_at(raw, where, errors, MAX_ATTRIBUTES_AND_CAPACITIES):
        at = key_path(where, key)
        name = qualified_name_at(key, driver, at, errors)
        value = attribute_value(value_raw, at, errors)
        if not name or value is None or (name in qualified_spelling and "/" not in key):
            continue
        found[name] = value
        if "/" in key:
            qualified_spelling.add(name)
    return found


def attribute_value(raw: object, where: str, errors: list[FieldError]) -> AttributeValue | None:
    """A DeviceAttribute (`validateDeviceAttribute`): exactly one of bool, int (int64), string
    (at most 64 characters) and version (`scheduler.model.semver`); None when it is not."""
    item = object_at(raw, where, errors)
    present = [
        kind for kind in ("bool", "int", "string", "version", *_LIST_ATTRIBUTES) if kind in item
    ]
    if len(present) != 1:
        report(errors, where, f"exactly one value must be set, got {len(present)}")
        return None
    kind = present[0]
    value = item[kind]
    at = f"{where}.{kind}"
    if kind in _LIST_ATTRIBUTES:
        report(errors, at, "list attributes need DRAListTypeAttributes (alpha, off); left out")
        return None
    if kind == "bool":
        return value if isinstance(value, bool) else _refused(at, "a boolean", value, errors)
    if kind == "int":
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and INT64_MIN <= value <= INT64_MAX
        ):
            return value
        return _refused(at, "an int64", value, errors)
    if not isinstance(value, str):
        return _refused(at, "a string", value, errors)
    if kind == "string":
        if len(value) > STRING_MAX_LENGTH:
            return _refused(at, f"at most {STRING_MAX_LENGTH} characters", value, errors)
        return value
    version = parse_version(value)
    if version is None:
        return _refused(
            at, f"a semver 2.0.0 version of at most {VERSION_MAX_LENGTH} characters", value, errors
        )
    return version


def _refused(
    where: str, wanted: str, value: object, errors: list[FieldError]
) -> AttributeValue | None:
    report(errors, where, f"must be {wanted}, got {echo(value)}")
    return None


def _conditions(
    item: Mapping[str, Any], key: str, where: str, errors: list[FieldError]
) -> tuple[str, ...]:
    at = f"{where}.{key}"
    return tuple(
        text
        for index, raw in enumerate(list_at(item.get(key), at, errors, MAX_BINDING_CONDITIONS))
        if (text := text_at(raw, f"{at}[{index}]", errors, required=True))
    )
