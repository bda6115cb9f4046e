"""The `dra` section: settings of Dynamic Resource Allocation (the devices the scheduler chooses
for ResourceClaims). A new setting is one more field with its reader; validation between
settings of the section goes in `DraSettings.__post_init__`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scheduler.config.errors import Invalid
from scheduler.config.readers import show
from scheduler.config.tree import check_settings, reads

DOMAIN_MAX_LENGTH = 63
"""Longest domain of an attribute name (`DeviceMaxDomainLength` of k8s.io/api@v0.37.2
resource/v1/types.go)."""
ID_MAX_LENGTH = 32
"""Longest identifier of an attribute name (`DeviceMaxIDLength`, same file)."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fully_qualified_attribute(value: object) -> str:
    """The empty string (unset), or a device attribute's fully qualified name
    `domain/identifier`, as the API server checks a constraint's `matchAttribute`
    (`validateFullyQualifiedName` of k8s.io/kubernetes@v1.37.2
    pkg/apis/resource/validation/validation.go): a DNS subdomain of at most 63 characters (any
    case), one "/", a C identifier of at most 32 characters."""
    if value == "":
        return ""
    if isinstance(value, str):
        domain, slash, ident = value.partition("/")
        if (
            slash
            and 0 < len(domain) <= DOMAIN_MAX_LENGTH
            and _DNS_SUBDOMAIN_RE.fullmatch(domain.lower())
            and len(ident) <= ID_MAX_LENGTH
            and _C_IDENTIFIER_RE.fullmatch(ident)
        ):
            return value
    raise Invalid(
        "must be empty or a fully qualified device attribute name, a DNS subdomain and a C "
        f"identifier joined by '/' (e.g. gpu.nvidia.com/partition8), got {show(value)}"
    )


DRIVER_MAX_LENGTH = 63
"""Longest driver name (`DriverNameMaxLength` of k8s.io/api@v0.37.2 resource/v1/types.go)."""
DEFAULT_GPU_DRIVERS = ("gpu.nvidia.com",)


def driver_names(value: object) -> tuple[str, ...]:
    """A list of DRA driver names, each a DNS subdomain of at most 63 characters, lower case, as
    the API server checks a slice's `spec.driver` (`validateDriverName` of k8s.io/kubernetes
    @v1.37.2 pkg/apis/resource/validation/validation.go); duplicates dropped, order kept."""
    if isinstance(value, (list, tuple)):
        names: list[str] = []
        for item in value:
            if not (
                isinstance(item, str)
                and 0 < len(item) <= DRIVER_MAX_LENGTH
                and _DNS_SUBDOMAIN_RE.fullmatch(item)
            ):
                raise Invalid(
                    "each driver must be a DNS subdomain (lower-case letters, digits, '-' and "
                    f"'.') of at most {DRIVER_MAX_LENGTH} characters, e.g. gpu.nvidia.com, got "
                    f"{show(item)}"
                )
            if item not in names:
                names.append(item)
        return tuple(names)
    raise Invalid(f"must be a list of DRA driver names, got {show(value)}")


@dataclass(frozen=True, slots=True)
class DraSettings:
    """Dynamic Resource Allocation."""

    nvlink_domain_attribute: str = field(default="", metadata=reads(fully_qualified_attribute))
    """A device attribute whose equal values mark the devices of one NVLink domain (e.g. a
    Fabric Manager partition or clique attribute); "" reads the domains from the node's
    annotations or the default layout instead (see docs/topology.md)."""
    gpu_drivers: tuple[str, ...] = field(default=DEFAULT_GPU_DRIVERS, metadata=reads(driver_names))
    """DRA drivers whose allocated devices are GPUs: a pod holds one GPU per device (admin
    access aside) of these drivers in its claims reserved for it, for idle reclaim, preemption
    and GPU time accounting (see docs/reclaim.md#dra-gpus); [] counts no DRA device."""

    def __post_init__(self) -> None:
        check_settings(self)
