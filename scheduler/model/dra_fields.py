"""Field readers shared by the Dynamic Resource Allocation records (resource.k8s.io/v1): names in
the formats the API validates, bounded lists and maps, quantities, CEL selectors, opaque driver
configuration, the object metadata the records keep, and the cap on an object's errors.

Every reader takes the raw JSON value, the field path it sits at and the object's error list; it
never raises, reports a bad value as a `FieldError` naming that path (echoing the value through
`topology.text.quote`, so a message stays short whatever the input) and returns a documented
fallback. Lists and maps are cut at the API's limits (k8s.io/api@v0.37.2 resource/v1/types.go),
so an object costs at most what the API server would store; the formats are those of
k8s.io/kubernetes@v1.37.2 pkg/apis/resource/validation/validation.go.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from scheduler.model.fields import FieldError, list_of, object_at, text_of
from scheduler.model.quantity import QuantityError, parse_quantity
from topology.text import clip, quote

# Limits of k8s.io/api@v0.37.2 resource/v1/types.go.
DRIVER_NAME_MAX_LENGTH = 63  # DriverNameMaxLength
POOL_NAME_MAX_LENGTH = 253  # PoolNameMaxLength
DEVICE_MAX_DOMAIN_LENGTH = 63  # DeviceMaxDomainLength
DEVICE_MAX_ID_LENGTH = 32  # DeviceMaxIDLength
SELECTORS_MAX = 32  # DeviceSelectorsMaxSize
CONFIG_MAX = 32  # DeviceConfigMaxSize (an allocation result holds class and claim configs: 2x)
CEL_EXPRESSION_MAX_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength
OPAQUE_PARAMETERS_MAX_LENGTH = 10 * 1024  # OpaqueParametersMaxLength
REQUEST_REFS_MAX = 32  # DeviceRequestsMaxSize, also for the request lists of configs

MAX_ERRORS = 32
"""Errors an object keeps (`bounded_errors`); the first ones name the problem."""

ECHO_LIMIT = 48
"""Characters of an offending value or map key a message echoes. repr() may spell one
character as ten (a non-printable one), so even then a message with its path stays far below
the 1 KiB an Event holds."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

Problem = Callable[[str], str]
"""A format check: what is wrong with a string ("" when nothing is)."""


def dns_label_problem(text: str) -> str:
    """`ValidateDNS1123Label`: device, request and counter names."""
    if len(text) > 63:
        return "must be at most 63 characters"
    return "" if _DNS_LABEL_RE.fullmatch(text) else "must be a DNS label"


def dns_subdomain_problem(text: str) -> str:
    """`ValidateDNS1123Subdomain`: DeviceClass names."""
    if len(text) > 253:
        return "must be at most 253 characters"
    return "" if _DNS_SUBDOMAIN_RE.fullmatch(text) else "must be a DNS subdomain"


def driver_name_problem(text: str) -> str:
    """`ValidateCSIDriverName`: at most 63 characters, a DNS subdomain in lower case."""
    if len(text) > DRIVER_NAME_MAX_LENGTH:
        return f"must be at most {DRIVER_NAME_MAX_LENGTH} characters"
    return "" if _DNS_SUBDOMAIN_RE.fullmatch(text.lower()) else "must be a DNS subdomain"


def pool_name_problem(text: str) -> str:
    """`validatePoolName`: at most 253 characters, DNS subdomains separated by slashes."""
    if len(text) > POOL_NAME_MAX_LENGTH:
        return f"must be at most {POOL_NAME_MAX_LENGTH} characters"
    if all(_DNS_SUBDOMAIN_RE.fullmatch(part) for part in text.split("/")):
        return ""
    return "must be DNS subdomains separated by slashes"


def label_name_problem(text: str) -> str:
    """`ValidateLabelName`: an optional DNS-subdomain prefix and "/", then a name of at most 63
    characters. Taint keys and toleration keys."""
    prefix, _, name = text.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix)):
        return "must have a DNS subdomain as its prefix"
    if len(name) > 63 or not _LABEL_NAME_RE.fullmatch(name):
        return "must be a label name (at most 63 alphanumerics, '-', '_' or '.')"
    return ""


def label_value_problem(text: str) -> str:
    """`IsValidLabelValue`: taint and toleration values."""
    if len(text) > 63 or not _LABEL_VALUE_RE.fullmatch(text):
        return "must be a label value (at most 63 alphanumerics, '-', '_' or '.')"
    return ""


def echo(value: object) -> str:
    """`value` quoted for a message, cut to `ECHO_LIMIT` characters (`topology.text.quote`)."""
    return quote(value, ECHO_LIMIT)


def report(errors: list[FieldError], where: str, message: str) -> None:
    errors.append(FieldError(where, message))


def text_at(
    raw: object,
    where: str,
    errors: list[FieldError],
    *,
    required: bool = False,
    problem: Problem | None = None,
) -> str:
    """The string at `where`; "" when absent (an error if `required`), not a string, empty
    while required, or refused by `problem`."""
    if raw is None or raw == "":
        if required:
            report(errors, where, "is required")
        return ""
    if not isinstance(raw, str):
        report(errors, where, f"must be a string, got {echo(raw)}")
        return ""
    why = problem(raw) if problem is not None else ""
    if why:
        report(errors, where, f"{why}, got {echo(raw)}")
        return ""
    return raw


def bool_at(raw: object, where: str, errors: list[FieldError]) -> bool:
    """The boolean at `where`; False when absent or not a boolean (an error)."""
    if raw is None:
        return False
    if not isinstance(raw, bool):
        report(errors, where, f"must be a boolean, got {echo(raw)}")
        return False
    return raw


def int_at(
    raw: object, where: str, errors: list[FieldError], *, minimum: int, maximum: int = 2**63 - 1
) -> int | None:
    """The integer at `where` within [`minimum`, `maximum`]; None when absent or not one (an
    error)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not minimum <= raw <= maximum:
        report(errors, where, f"must be an integer from {minimum} to {maximum}, got {echo(raw)}")
        return None
    return raw


def quantity_at(raw: object, where: str, errors: list[FieldError]) -> Decimal | None:
    """The resource quantity at `where` (scheduler.model.quantity); None when absent or not
    one (an error)."""
    if raw is None:
        return None
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        report(errors, where, f"must be a quantity, got {echo(raw)}")
        return None
    try:
        return parse_quantity(raw)
    except QuantityError as error:
        why = ": out of range" if "out of range" in str(error) else ""
        report(errors, where, f"invalid quantity {echo(raw)}{why}")
        return None


def list_at(raw: object, where: str, errors: list[FieldError], limit: int) -> list[Any]:
    """The list at `where`, cut to its first `limit` entries (an error when longer); [] when
    absent or not a list (an error)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        report(errors, where, f"must be a list, got {type(raw).__name__}")
        return []
    if len(raw) > limit:
        report(errors, where, f"must have at most {limit} entries, got {len(raw)}")
    return raw[:limit]


def map_at(raw: object, where: str, errors: list[FieldError], limit: int) -> list[tuple[str, Any]]:
    """The (key, value) pairs of the object at `where`, cut to `limit` (an error when more);
    [] when absent or not an object (an error)."""
    mapping = object_at(raw, where, errors)
    if len(mapping) > limit:
        report(errors, where, f"must have at most {limit} entries, got {len(mapping)}")
    return [(text_of(key), value) for key, value in itertools.islice(mapping.items(), limit)]


def key_path(where: str, key: str) -> str:
    """The path of a map entry, its key cut to a readable length."""
    return f"{where}[{clip(key, ECHO_LIMIT)}]"


def qualified_name_problem(name: str) -> str:
    """`validateQualifiedName`: a C identifier of at most 32 characters, optionally after a
    domain of at most 63 characters (a DNS subdomain) and "/"; "" when `name` is one."""
    domain, slash, ident = name.rpartition("/")
    if "/" in domain:
        return "must have at most one '/'"
    if slash and (
        not domain or len(domain) > DEVICE_MAX_DOMAIN_LENGTH or driver_name_problem(domain)
    ):
        return "must have a DNS subdomain of at most 63 characters as its domain"
    if len(ident) > DEVICE_MAX_ID_LENGTH or not _C_IDENTIFIER_RE.fullmatch(ident):
        return f"must end in a C identifier of at most {DEVICE_MAX_ID_LENGTH} characters"
    return ""


def qualified_name_at(name: str, driver: str, where: str, errors: list[FieldError]) -> str:
    """The attribute or capacity `name` of a device of `driver`, fully qualified: an unqualified
    name belongs to the driver's domain, as `parseQualifiedName` has it when it builds the CEL
    maps (k8s.io/dynamic-resource-allocation@v0.37.2 cel/compile.go). "" (an error) when
    `qualified_name_problem` refuses it."""
    why = qualified_name_problem(name)
    if why:
        report(errors, where, why)
        return ""
    return name if "/" in name else f"{driver}/{name}"


def fully_qualified_name_at(raw: object, where: str, errors: list[FieldError]) -> str:
    """A `FullyQualifiedName` (a constraint's attribute): domain, "/" and identifier."""
    name = text_at(raw, where, errors, required=True)
    if name and "/" not in name:
        report(errors, where, f"must be a domain and a name separated by '/', got {echo(name)}")
        return ""
    return qualified_name_at(name, "", where, errors) if name else ""


def selectors_at(raw: object, where: str, errors: list[FieldError]) -> tuple[str, ...]:
    """The CEL expressions of a `selectors` list (at most 32; each `{cel: {expression}}` of at
    most 10 KiB). Kept as text: compiling them is the allocator's job."""
    found = []
    for index, item in enumerate(list_at(raw, where, errors, SELECTORS_MAX)):
        at = f"{where}[{index}]"
        cel_raw = object_at(item, at, errors).get("cel")
        if cel_raw is None:
            report(errors, f"{at}.cel", "is required")
            continue
        cel = object_at(cel_raw, f"{at}.cel", errors)
        expression = text_at(cel.get("expression"), f"{at}.cel.expression", errors, required=True)
        if len(expression) > CEL_EXPRESSION_MAX_LENGTH:
            report(
                errors,
                f"{at}.cel.expression",
                f"must be at most {CEL_EXPRESSION_MAX_LENGTH} characters, got {len(expression)}",
            )
        elif expression:
            found.append(expression)
    return tuple(found)


@dataclass(frozen=True)
class OpaqueConfig:
    """One opaque configuration entry: the driver it is for and its parameters, kept as JSON text
    (sorted keys) for the driver; the allocator only copies it into the allocation result."""

    driver: str
    parameters: str
    requests: tuple[str, ...] = ()
    """The requests it applies to ("request" or "request/subrequest"); () for all."""
    source: str = ""
    """In an allocation result: FromClass or FromClaim; "" elsewhere."""


def configs_at(
    raw: object, where: str, errors: list[FieldError], limit: int = CONFIG_MAX
) -> tuple[OpaqueConfig, ...]:
    """A `config` list of DeviceClass, claim or allocation result: entries `{opaque: {driver,
    parameters}}` with optional `requests` and `source`, which are read as they come (a class's
    entries have neither)."""
    found = []
    for index, item in enumerate(list_at(raw, where, errors, limit)):
        at = f"{where}[{index}]"
        entry = object_at(item, at, errors)
        opaque = object_at(entry.get("opaque"), f"{at}.opaque", errors)
        if not opaque:
            report(errors, f"{at}.opaque", "is required")
            continue
        driver = text_at(
            opaque.get("driver"),
            f"{at}.opaque.driver",
            errors,
            required=True,
            problem=driver_name_problem,
        )
        parameters = _parameters_text(opaque.get("parameters"), f"{at}.opaque.parameters", errors)
        requests = tuple(
            text_at(ref, f"{at}.requests[{i}]", errors, required=True)
            for i, ref in enumerate(
                list_at(entry.get("requests"), f"{at}.requests", errors, REQUEST_REFS_MAX)
            )
        )
        source = text_at(entry.get("source"), f"{at}.source", errors)
        if source not in ("", "FromClass", "FromClaim"):
            report(errors, f"{at}.source", f"must be FromClass or FromClaim, got {echo(source)}")
        if driver and parameters is not None:
            found.append(OpaqueConfig(driver, parameters, requests, source))
    return tuple(found)


def _parameters_text(raw: object, where: str, errors: list[FieldError]) -> str | None:
    if raw is None:
        report(errors, where, "is required")
        return None
    try:
        text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        report(errors, where, "must be JSON")
        return None
    if len(text) > OPAQUE_PARAMETERS_MAX_LENGTH:
        report(
            errors,
            where,
            f"must be at most {OPAQUE_PARAMETERS_MAX_LENGTH} bytes of JSON, got {len(text)}",
        )
        return None
    return text


@dataclass(frozen=True)
class OwnerRef:
    """The controller owner reference of an object (a generated claim's pod)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class ObjectMeta:
    """What the DRA records keep of metadata."""

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    deleting: bool = False
    """metadata.deletionTimestamp is set."""
    finalizers: tuple[str, ...] = ()
    controller: OwnerRef | None = None
    created: str = ""
    """metadata.creationTimestamp as the API server writes it (RFC 3339, seconds, UTC: the
    text orders as the time does)."""


MAX_FINALIZERS = 32
"""Finalizers read (the API sets no limit; a claim carries one or two)."""


def meta_at(obj: Mapping[str, Any], errors: list[FieldError]) -> ObjectMeta:
    """The `ObjectMeta` of an object's JSON; a missing name is an error."""
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    name = text_at(metadata.get("name"), "metadata.name", errors, required=True)
    finalizers = tuple(
        text_of(item)
        for item in list_at(
            metadata.get("finalizers"), "metadata.finalizers", errors, MAX_FINALIZERS
        )
    )
    controller = None
    for item in list_of(metadata.get("ownerReferences")):
        if isinstance(item, Mapping) and item.get("controller") is True:
            controller = OwnerRef(
                text_of(item.get("apiVersion") or ""),
                text_of(item.get("kind") or ""),
                text_of(item.get("name") or ""),
                text_of(item.get("uid") or ""),
            )
            break
    return ObjectMeta(
        name=name,
        namespace=text_of(metadata.get("namespace") or ""),
        uid=text_of(metadata.get("uid") or ""),
        resource_version=text_of(metadata.get("resourceVersion") or ""),
        deleting=metadata.get("deletionTimestamp") is not None,
        finalizers=finalizers,
        controller=controller,
        created=text_of(metadata.get("creationTimestamp") or ""),
    )


def bounded_errors(errors: Sequence[FieldError]) -> tuple[FieldError, ...]:
    """At most `MAX_ERRORS` of `errors`: the first ones, then one saying how many were left."""
    if len(errors) <= MAX_ERRORS:
        return tuple(errors)
    kept = tuple(errors[: MAX_ERRORS - 1])
    return (*kept, FieldError("(more)", f"{len(errors) - len(kept)} more errors"))
