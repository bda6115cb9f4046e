"""What a ResourceClaim asks for (its `spec`, also a ResourceClaimTemplate's `spec.spec`):
device requests, each `exactly` one request or `firstAvailable` alternatives tried in order,
constraints across the devices of several requests, and opaque driver configuration.

`parse_claim_spec` checks what `validateDeviceClaim` (k8s.io/kubernetes@v1.37.2 pkg/apis/
resource/validation/validation.go) checks, within the limits of k8s.io/api@v0.37.2 resource/v1/
types.go: at most 32 requests, constraints and configs, 8 firstAvailable alternatives, 32
selectors and 16 tolerations per request, request references that name a request of the claim.
The API server defaults `allocationMode` to ExactCount and `count` to 1, and the parser does the
same for JSON that lacks them. `derivedAttributes` (DRADerivedAttributes) is alpha and off in
Kubernetes 1.37 and is not read. It never raises: a request, constraint or config with a bad
field is reported and left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler.model.allocations import request_ref_problem
from scheduler.model.device_taints import DeviceToleration, tolerations_at
from scheduler.model.dra_fields import (
    CONFIG_MAX,
    REQUEST_REFS_MAX,
    OpaqueConfig,
    bool_at,
    configs_at,
    dns_label_problem,
    dns_subdomain_problem,
    echo,
    fully_qualified_name_at,
    int_at,
    key_path,
    list_at,
    map_at,
    qualified_name_problem,
    quantity_at,
    report,
    selectors_at,
    text_at,
)
from scheduler.model.fields import FieldError, object_at, text_of

MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
MAX_FIRST_AVAILABLE = 8  # FirstAvailableDeviceRequestMaxSize
MAX_CAPACITY_REQUESTS = 32  # a device has at most 32 attributes and capacities
ALLOCATION_MODES = ("ExactCount", "All")


@dataclass(frozen=True)
class RequestSpec:
    """What one request asks for: an `exactly` request or one `firstAvailable` alternative
    (those have no admin access)."""

    name: str
    """The request's name, or the alternative's (its reference is "request/alternative")."""
    device_class_name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions, all to be satisfied (with the class's)."""
    allocation_mode: str = "ExactCount"
    count: int = 1
    """Devices wanted with ExactCount; 0 with All (every matching device of the node)."""
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, Decimal] = field(default_factory=dict)
    """capacity.requests: per capacity name as devices publish it, what each device must
    provide (and a shared device gives up)."""


@dataclass(frozen=True)
class DeviceRequest:
    """One entry of spec.devices.requests: `exactly` set, or `first_available` non-empty."""

    name: str
    exactly: RequestSpec | None = None
    first_available: tuple[RequestSpec, ...] = ()

    @property
    def alternatives(self) -> tuple[tuple[str, RequestSpec], ...]:
        """(reference, spec) in the order they are tried: the request itself, or each
        firstAvailable entry as "request/entry" (what an allocation result names)."""
        if self.exactly is not None:
            return ((self.name, self.exactly),)
        return tuple((f"{self.name}/{sub.name}", sub) for sub in self.first_available)


@dataclass(frozen=True)
class DeviceConstraint:
    """matchAttribute (equal values) or distinctAttribute (distinct values) over the devices
    of `requests` (all requests of the claim when empty; a request name also covers its
    firstAvailable entries)."""

    requests: tuple[str, ...] = ()
    match_attribute: str = ""
    distinct_attribute: str = ""


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[OpaqueConfig, ...] = ()

    @property
    def request_refs(self) -> frozenset[str]:
        """Every name a constraint, config or result may use ("request", "request/entry")."""
        refs = {request.name for request in self.requests}
        refs.update(
            f"{request.name}/{sub.name}"
            for request in self.requests
            for sub in request.first_available
        )
        return frozenset(refs)


def parse_claim_spec(raw: object, where: str, errors: list[FieldError]) -> ClaimSpec:
    """A claim spec (`ResourceClaimSpec`) at `where`."""
    spec = object_at(raw, where, errors)
    devices = object_at(spec.get("devices"), f"{where}.devices", errors)
    at = f"{where}.devices"
    requests: list[DeviceRequest] = []
    for index, item in enumerate(
        list_at(devices.get("requests"), f"{at}.requests", errors, MAX_REQUESTS)
    ):
        request = _request(item, f"{at}.requests[{index}]", errors)
        if request is not None and any(known.name == request.name for known in requests):
            report(
                errors, f"{at}.requests[{index}].name", f"duplicate request {echo(request.name)}"
            )
        elif request is not None:
            requests.append(request)
    refs = gather_request_names(raw)
    constraints = tuple(
        constraint
        for index, item in enumerate(
            list_at(devices.get("constraints"), f"{at}.constraints", errors, MAX_CONSTRAINTS)
        )
        if (constraint := _constraint(item, f"{at}.constraints[{index}]", refs, errors)) is not None
    )
    config = configs_at(devices.get("config"), f"{at}.config", errors, CONFIG_MAX)
    for index, entry in enumerate(config):
        _check_refs(entry.requests, f"{at}.config[{index}].requests", refs, errors)
    return ClaimSpec(tuple(requests), constraints, config)


def gather_request_names(raw: object) -> frozenset[str]:
    """The names a constraint, config or allocation result of the claim spec `raw` may use:
    every request's name and "request/entry" for its firstAvailable entries, read from the
    JSON as `gatherRequestNames` does (a request with other errors still counts, so a reference
    to it is not reported twice)."""
    devices = raw.get("devices") if isinstance(raw, Mapping) else None
    items = devices.get("requests") if isinstance(devices, Mapping) else None
    names: set[str] = set()
    for item in items[:MAX_REQUESTS] if isinstance(items, list) else ():
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            continue
        names.add(name)
        subs = item.get("firstAvailable")
        for sub in subs[:MAX_FIRST_AVAILABLE] if isinstance(subs, list) else ():
            sub_name = sub.get("name") if isinstance(sub, Mapping) else None
            if isinstance(sub_name, str):
                names.add(f"{name}/{sub_name}")
    return frozenset(names)


def _check_refs(
    names: tuple[str, ...], where: str, refs: frozenset[str], errors: list[FieldError]
) -> None:
    for index, name in enumerate(names):
        why = request_ref_problem(name, refs)
        if why:
            report(errors, f"{where}[{index}]", f"{why}, got {echo(name)}")
    if len(set(names)) != len(names):
        report(errors, where, "must not repeat a request")


def _request(raw: object, where: str, errors: list[FieldError]) -> DeviceRequest | None:
    """`validateDeviceRequest`: a DNS-label name and exactly one of exactly, firstAvailable."""
    before = len(errors)
    item = object_at(raw, where, errors)
    name = text_at(
        item.get("name"), f"{where}.name", errors, required=True, problem=dns_label_problem
    )
    exactly_raw = item.get("exactly")
    alternatives_raw = list_at(
        item.get("firstAvailable"), f"{where}.firstAvailable", errors, MAX_FIRST_AVAILABLE
    )
    if (exactly_raw is None) == (not alternatives_raw):
        report(errors, where, "exactly one of exactly and firstAvailable is required")
        return None
    if exactly_raw is not None:
        at = f"{where}.exactly"
        exactly = _request_spec(object_at(exactly_raw, at, errors), at, name, errors, admin=True)
        return DeviceRequest(name, exactly=exactly) if len(errors) == before else None
    subs: list[RequestSpec] = []
    for index, sub_raw in enumerate(alternatives_raw):
        at = f"{where}.firstAvailable[{index}]"
        entry = object_at(sub_raw, at, errors)
        sub_name = text_at(
            entry.get("name"), f"{at}.name", errors, required=True, problem=dns_label_problem
        )
        sub = _request_spec(entry, at, sub_name, errors, admin=False)
        if any(known.name == sub_name for known in subs):
            report(errors, f"{at}.name", f"duplicate subrequest {echo(sub_name)}")
        subs.append(sub)
    return DeviceRequest(name, first_available=tuple(subs)) if len(errors) == before else None


def _request_spec(
    item: Mapping[str, Any], where: str, name: str, errors: list[FieldError], *, admin: bool
) -> RequestSpec:
    """`ExactDeviceRequest` (`admin`: with adminAccess) or `DeviceSubRequest`."""
    mode = text_at(item.get("allocationMode"), f"{where}.allocationMode", errors) or "ExactCount"
    count = int_at(item.get("count"), f"{where}.count", errors, minimum=0)
    if mode not in ALLOCATION_MODES:
        report(errors, f"{where}.allocationMode", f"must be ExactCount or All, got {echo(mode)}")
    elif mode == "All" and count:
        report(errors, f"{where}.count", "must not be set with allocationMode All")
    elif mode == "ExactCount" and count == 0:
        report(errors, f"{where}.count", "must be greater than zero")
    capacity = object_at(item.get("capacity"), f"{where}.capacity", errors)
    requests: dict[str, Decimal] = {}
    at = f"{where}.capacity.requests"
    for key, value_raw in map_at(capacity.get("requests"), at, errors, MAX_CAPACITY_REQUESTS):
        value = quantity_at(value_raw, key_path(at, key), errors)
        why = qualified_name_problem(key)
        if why:
            report(errors, key_path(at, key), why)
        elif value is not None:
            requests[key] = value
    return RequestSpec(
        name=name,
        device_class_name=text_at(
            item.get("deviceClassName"),
            f"{where}.deviceClassName",
            errors,
            required=True,
            problem=dns_subdomain_problem,
        ),
        selectors=selectors_at(item.get("selectors"), f"{where}.selectors", errors),
        allocation_mode=mode,
        count=0 if mode == "All" else (count or 1),
        admin_access=bool_at(item.get("adminAccess"), f"{where}.adminAccess", errors)
        if admin
        else False,
        tolerations=tolerations_at(item.get("tolerations"), f"{where}.tolerations", errors),
        capacity_requests=requests,
    )


def _constraint(
    raw: object, where: str, refs: frozenset[str], errors: list[FieldError]
) -> DeviceConstraint | None:
    """`validateDeviceConstraint`: exactly one of matchAttribute and distinctAttribute."""
    before = len(errors)
    item = object_at(raw, where, errors)
    requests = tuple(
        text_of(name)
        for name in list_at(item.get("requests"), f"{where}.requests", errors, REQUEST_REFS_MAX)
    )
    _check_refs(requests, f"{where}.requests", refs, errors)
    match_raw, distinct_raw = item.get("matchAttribute"), item.get("distinctAttribute")
    if (match_raw is None) == (distinct_raw is None):
        report(errors, where, "exactly one of matchAttribute and distinctAttribute is required")
        return None
    match = (
        fully_qualified_name_at(match_raw, f"{where}.matchAttribute", errors)
        if match_raw is not None
        else ""
    )
    distinct = (
        fully_qualified_name_at(distinct_raw, f"{where}.distinctAttribute", errors)
        if distinct_raw is not None
        else ""
    )
    if len(errors) != before:
        return None
    return DeviceConstraint(requests, match, distinct)
