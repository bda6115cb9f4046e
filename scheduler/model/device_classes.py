"""DeviceClasses and DeviceTaintRules (resource.k8s.io/v1, cluster-scoped), parsed into frozen
records, and the taints a set of rules adds to a ResourceSlice's devices.

- `parse_device_class`: the selectors' CEL expressions (as text; compiling them is the
  allocator's job), `extendedResourceName` (the extended resource a pod may request instead of
  a claim) and the opaque configuration the class adds to every allocation through it
  (`validateDeviceClassSpec` of k8s.io/kubernetes@v1.37.2 pkg/apis/resource/validation/
  validation.go: at most 32 selectors and 32 configs).
- `parse_device_taint_rule`: the selector (driver, pool, device; every one that is set must
  match; no selector matches no device) and the one taint.
- `with_taint_rules`: a slice with the taints of the rules that select its devices appended to
  theirs, as `Tracker.applyPatches` (k8s.io/dynamic-resource-allocation@v0.37.2
  resourceslice/tracker/tracker.go) does before kube-scheduler's allocator sees the slice.

Parsers never raise; bad fields become `FieldError`s naming their path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.model.device_taints import DeviceTaint, taint_at
from scheduler.model.devices import ResourceSlice
from scheduler.model.dra_fields import (
    OpaqueConfig,
    Problem,
    bounded_errors,
    configs_at,
    dns_label_problem,
    driver_name_problem,
    label_name_problem,
    meta_at,
    pool_name_problem,
    report,
    selectors_at,
    text_at,
)
from scheduler.model.fields import FieldError, object_at


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions every device allocated through the class must satisfy."""
    extended_resource_name: str = ""
    """"" when the class serves no extended resource."""
    config: tuple[OpaqueConfig, ...] = ()
    uid: str = ""
    resource_version: str = ""
    errors: tuple[FieldError, ...] = ()
    created: str = ""
    """metadata.creationTimestamp (RFC 3339): of two classes serving one extended resource, the
    newer one serves it (`scheduler.state.dra.DraStore.class_for_resource`)."""


def extended_resource_problem(name: str) -> str:
    """`IsExtendedResourceName` (k8s.io/kubernetes@v1.37.2 pkg/apis/core/v1/helper): a domain
    outside kubernetes.io, "/", and a name that is a valid quota resource (`requests.<name>`)."""
    if "/" not in name or name.startswith("requests."):
        return "must be an extended resource name (domain/name)"
    if name.startswith("kubernetes.io/") or ".kubernetes.io/" in name:
        return "must not be in the kubernetes.io domain"
    if label_name_problem(f"requests.{name}"):
        return "must be an extended resource name (domain/name)"
    return ""


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """A DeviceClass from its JSON. Never raises."""
    errors: list[FieldError] = []
    meta = meta_at(obj, errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    return DeviceClass(
        name=meta.name,
        selectors=selectors_at(spec.get("selectors"), "spec.selectors", errors),
        extended_resource_name=text_at(
            spec.get("extendedResourceName"),
            "spec.extendedResourceName",
            errors,
            problem=extended_resource_problem,
        ),
        config=configs_at(spec.get("config"), "spec.config", errors),
        uid=meta.uid,
        resource_version=meta.resource_version,
        errors=bounded_errors(errors),
        created=meta.created,
    )


@dataclass(frozen=True)
class DeviceTaintSelector:
    """Which devices a rule taints: each field that is set must equal the device's."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def matches(self, driver: str, pool: str, device: str) -> bool:
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


@dataclass(frozen=True)
class DeviceTaintRule:
    name: str
    selector: DeviceTaintSelector | None
    """None: the rule selects no device; an empty selector selects every device."""
    taint: DeviceTaint | None
    """None when it could not be parsed (the rule then taints nothing; see `errors`)."""
    resource_version: str = ""
    errors: tuple[FieldError, ...] = ()

    def taint_for(self, driver: str, pool: str, device: str) -> DeviceTaint | None:
        """The taint this rule puts on the device, if it selects it."""
        if self.selector is None or self.taint is None:
            return None
        return self.taint if self.selector.matches(driver, pool, device) else None


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    """A DeviceTaintRule from its JSON (`validateDeviceTaintRuleSpec`). Never raises."""
    errors: list[FieldError] = []
    meta = meta_at(obj, errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    selector = None
    raw_selector = spec.get("deviceSelector")
    if raw_selector is not None:
        where = "spec.deviceSelector"
        fields = object_at(raw_selector, where, errors)
        selector = DeviceTaintSelector(
            driver=_optional(fields, "driver", where, driver_name_problem, errors),
            pool=_optional(fields, "pool", where, pool_name_problem, errors),
            device=_optional(fields, "device", where, dns_label_problem, errors),
        )
    if spec.get("taint") is None:
        report(errors, "spec.taint", "is required")
        taint = None
    else:
        taint = taint_at(spec.get("taint"), "spec.taint", errors)
    return DeviceTaintRule(
        name=meta.name,
        selector=selector,
        taint=taint,
        resource_version=meta.resource_version,
        errors=bounded_errors(errors),
    )


def _optional(
    fields: Mapping[str, Any],
    key: str,
    where: str,
    problem: Problem,
    errors: list[FieldError],
) -> str | None:
    """A selector field: None when unset; a bad value selects nothing ("" matches no name)."""
    if fields.get(key) is None:
        return None
    return text_at(fields[key], f"{where}.{key}", errors, required=True, problem=problem)


def with_taint_rules(
    resource_slice: ResourceSlice, rules: Iterable[DeviceTaintRule]
) -> ResourceSlice:
    """`resource_slice` with each rule's taint appended to the taints of the devices it selects
    (rules in the order given); the slice itself when no rule selects a device."""
    rules = list(rules)
    devices = []
    changed = False
    for device in resource_slice.devices:
        added = tuple(
            taint
            for rule in rules
            if (
                taint := rule.taint_for(
                    resource_slice.driver, resource_slice.pool.name, device.name
                )
            )
            is not None
        )
        changed = changed or bool(added)
        devices.append(replace(device, taints=device.taints + added) if added else device)
    return replace(resource_slice, devices=tuple(devices)) if changed else resource_slice
