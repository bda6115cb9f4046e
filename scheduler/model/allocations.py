"""A ResourceClaim's status as records: the allocation (which devices, for which request, where
they are available) and the consumers the claim is reserved for.

`parse_allocation` and `parse_reserved_for` read `status.allocation` and `status.reservedFor`
the way `validateResourceClaimStatusUpdate` and `validateAllocationResult` (k8s.io/kubernetes
@v1.37.2 pkg/apis/resource/validation/validation.go) check them: at most 32 results
(`AllocationResultsMaxSize`) each naming a request of the claim ("request" or
"request/subrequest"), a driver, a pool and a device; class and claim configs (at most 64);
at most 256 consumers (`ResourceClaimReservedForMaxSize`) with distinct UIDs. Shapes are those
of k8s.io/api@v0.37.2 resource/v1/types.go (`AllocationResult`, `DeviceRequestAllocationResult`,
`ResourceClaimConsumerReference`). They never raise; a bad entry is reported and left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from scheduler.model.device_taints import DeviceToleration, tolerations_at
from scheduler.model.dra_fields import (
    CONFIG_MAX,
    OpaqueConfig,
    bool_at,
    configs_at,
    dns_label_problem,
    driver_name_problem,
    echo,
    key_path,
    list_at,
    map_at,
    pool_name_problem,
    qualified_name_problem,
    quantity_at,
    report,
    text_at,
)
from scheduler.model.fields import FieldError, object_at, parse_timestamp
from scheduler.model.node_selection import NodeSelector, parse_node_selector

MAX_RESULTS = 32  # AllocationResultsMaxSize
MAX_RESERVED_FOR = 256  # ResourceClaimReservedForMaxSize
MAX_CONSUMED_CAPACITIES = 32  # a device's attributes and capacities together
_UID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class DeviceResult:
    """One allocated device (`DeviceRequestAllocationResult`)."""

    request: str
    """The claim's request, or "request/subrequest" when a firstAvailable entry was chosen."""
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    """Which share of a device that allows multiple allocations; "" for a whole device."""
    consumed_capacity: Mapping[str, Decimal] = field(default_factory=dict)
    """By capacity name as the device publishes it."""
    tolerations: tuple[DeviceToleration, ...] = ()

    @property
    def device_id(self) -> tuple[str, str, str]:
        """(driver, pool, device): the device, whichever share."""
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True)
class Allocation:
    """`status.allocation`."""

    results: tuple[DeviceResult, ...]
    config: tuple[OpaqueConfig, ...] = ()
    """Class configs (source FromClass) first, then the claim's (FromClaim)."""
    node_selector: NodeSelector | None = None
    """Where the devices are available; None: on every node."""
    allocated_at: datetime | None = None


@dataclass(frozen=True)
class ConsumerRef:
    """One `status.reservedFor` entry: a pod (api_group "", resource "pods") or another
    consumer, in the claim's namespace."""

    api_group: str
    resource: str
    name: str
    uid: str

    @property
    def is_pod(self) -> bool:
        return self.api_group == "" and self.resource == "pods"


def request_ref_problem(ref: str, refs: frozenset[str]) -> str:
    """`validateRequestNameRef`: `ref` names a request of the claim ("request", or
    "request/subrequest" for a firstAvailable entry); `refs` are the claim's names."""
    parts = ref.split("/")
    if len(parts) > 2 or any(dns_label_problem(part) for part in parts) or ref not in refs:
        return "must be the name of a request of the claim, or request/subrequest"
    return ""


def parse_allocation(
    raw: object, where: str, refs: frozenset[str], errors: list[FieldError]
) -> Allocation | None:
    """`status.allocation` at `where` (None when absent); results must name one of `refs`."""
    if raw is None:
        return None
    allocation = object_at(raw, where, errors)
    devices = object_at(allocation.get("devices"), f"{where}.devices", errors)
    results = []
    at_results = f"{where}.devices.results"
    for index, item in enumerate(list_at(devices.get("results"), at_results, errors, MAX_RESULTS)):
        result = _result(item, f"{at_results}[{index}]", refs, errors)
        if result is not None:
            results.append(result)
    config = configs_at(devices.get("config"), f"{where}.devices.config", errors, 2 * CONFIG_MAX)
    for index, entry in enumerate(config):
        if not entry.source:
            report(errors, f"{where}.devices.config[{index}].source", "is required")
        for ref in entry.requests:
            if request_ref_problem(ref, refs):
                report(
                    errors,
                    f"{where}.devices.config[{index}].requests",
                    f"{request_ref_problem(ref, refs)}, got {echo(ref)}",
                )
    stamp = allocation.get("allocationTimestamp")
    allocated_at = parse_timestamp(stamp)
    if stamp is not None and allocated_at is None:
        report(errors, f"{where}.allocationTimestamp", f"must be a timestamp, got {echo(stamp)}")
    return Allocation(
        results=tuple(results),
        config=config,
        node_selector=parse_node_selector(
            allocation.get("nodeSelector"), f"{where}.nodeSelector", errors
        ),
        allocated_at=allocated_at,
    )


def _result(
    raw: object, where: str, refs: frozenset[str], errors: list[FieldError]
) -> DeviceResult | None:
    before = len(errors)
    item = object_at(raw, where, errors)
    request = text_at(item.get("request"), f"{where}.request", errors, required=True)
    if request and request_ref_problem(request, refs):
        report(
            errors,
            f"{where}.request",
            f"{request_ref_problem(request, refs)}, got {echo(request)}",
        )
    driver = text_at(
        item.get("driver"), f"{where}.driver", errors, required=True, problem=driver_name_problem
    )
    pool = text_at(
        item.get("pool"), f"{where}.pool", errors, required=True, problem=pool_name_problem
    )
    device = text_at(
        item.get("device"), f"{where}.device", errors, required=True, problem=dns_label_problem
    )
    share_id = text_at(item.get("shareID"), f"{where}.shareID", errors)
    if share_id and not _UID_RE.fullmatch(share_id):
        report(errors, f"{where}.shareID", f"must be a lower-case UUID, got {echo(share_id)}")
    consumed = {}
    at_consumed = f"{where}.consumedCapacity"
    for key, value_raw in map_at(
        item.get("consumedCapacity"), at_consumed, errors, MAX_CONSUMED_CAPACITIES
    ):
        at = key_path(at_consumed, key)
        value = quantity_at(value_raw, at, errors)
        why = qualified_name_problem(key)
        if why:
            report(errors, at, why)
        elif value is not None:
            consumed[key] = value
    result = DeviceResult(
        request=request,
        driver=driver,
        pool=pool,
        device=device,
        admin_access=bool_at(item.get("adminAccess"), f"{where}.adminAccess", errors),
        share_id=share_id,
        consumed_capacity=consumed,
        tolerations=tolerations_at(item.get("tolerations"), f"{where}.tolerations", errors),
    )
    return result if len(errors) == before else None


def parse_reserved_for(
    raw: object, where: str, errors: list[FieldError]
) -> tuple[ConsumerRef, ...]:
    """`status.reservedFor` at `where`: resource, name and uid required, uids distinct."""
    found: list[ConsumerRef] = []
    seen: set[str] = set()
    for index, item in enumerate(list_at(raw, where, errors, MAX_RESERVED_FOR)):
        at = f"{where}[{index}]"
        before = len(errors)
        entry = object_at(item, at, errors)
        ref = ConsumerRef(
            api_group=text_at(entry.get("apiGroup"), f"{at}.apiGroup", errors),
            resource=text_at(entry.get("resource"), f"{at}.resource", errors, required=True),
            name=text_at(entry.get("name"), f"{at}.name", errors, required=True),
            uid=text_at(entry.get("uid"), f"{at}.uid", errors, required=True),
        )
        if ref.uid in seen:
            report(errors, f"{at}.uid", f"duplicate consumer {echo(ref.uid)}")
        if len(errors) == before:
            seen.add(ref.uid)
            found.append(ref)
    return tuple(found)
