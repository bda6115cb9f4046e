"""NVLink domains named by GPU identifiers: the annotation `gpu-scheduler.io/nvlink-domain-ids`.

The index annotation of `topology.domains` (`"0-3,4-7"`) names GPUs by the index `nvidia-smi`
gives them. Devices chosen through Dynamic Resource Allocation are named by their driver, so a
node can also list its domains by identifiers every source agrees on, the GPU UUID and the PCI
bus ID:

    gpu-scheduler.io/nvlink-domain-ids: "GPU-0a1b...,GPU-2c3d...;GPU-4e5f...,GPU-6a7b..."

Grammar: domains separated by `;`, the identifiers of one domain separated by `,`; whitespace
around identifiers and separators is ignored. One annotation may mix both kinds of identifier.
An identifier is

- a GPU UUID: `GPU-` and a UUID of 8-4-4-4-12 hexadecimal digits, compared case-insensitively;
  canonical form `GPU-` with lower-case digits, as `nvidia-smi -q` prints it and NVIDIA's DRA
  driver publishes it in the device attribute `uuid`;
- a PCI bus ID `domain:bus:device.function`: a domain of 1 to 8 hexadecimal digits, two digits
  of bus, two of device (at most 1f), a function 0-7, any case. `nvidia-smi` prints the domain
  with eight digits (`00000000:19:00.0`); the standard DRA attribute
  `resource.kubernetes.io/pciBusID` uses four (`0000:19:00.0`, the format checked by
  k8s.io/dynamic-resource-allocation@v0.37.2 deviceattribute/pci_linux.go). The canonical form is
  the attribute's: lower case, the domain without leading zeros beyond four digits (a domain
  above ffff keeps all its digits, `10000:01:00.0`). So `00000000:19:00.0`, `0000:19:00.0` and
  `0:19:00.0` are the same GPU.

A valid annotation has at least one domain, no empty domain, no identifier twice (after
canonicalization), at most `MAX_IDENTIFIERS` identifiers and `MAX_TEXT_LENGTH` characters.
Which GPUs the identifiers name is for the reader to check against the node's devices
(`scheduler.dra.domains` does); this module knows only the text.

`parse_domain_ids` never raises: it returns the canonical `DomainIds` or the error beside it, as
`topology.domains.domains_for_node` does, with the value echoed cut to `topology.text.MAX_ECHO`.
`format_domain_ids` writes the canonical text; `parse_domain_ids(format_domain_ids(d))` gives `d`
back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from topology.domains import TopologyError
from topology.text import clip, quote

NVLINK_DOMAIN_IDS_ANNOTATION = "gpu-scheduler.io/nvlink-domain-ids"
"""Node annotation listing the node's NVLink domains by GPU UUID or PCI bus ID."""

DOMAIN_SEPARATOR = ";"
ID_SEPARATOR = ","
UUID_PREFIX = "GPU-"
"""How a GPU UUID starts (any case in the annotation, upper case in the canonical form)."""

MAX_TEXT_LENGTH = 32 * 1024
"""Longest annotation value read; 512 UUIDs with separators fit in 22 KiB."""
MAX_IDENTIFIERS = 512
"""Most identifiers one annotation may list (a ResourceSlice holds at most 128 devices)."""
PCI_DOMAIN_DIGITS = 4
"""Hexadecimal digits of the PCI domain in the canonical form (more only when needed)."""
MAX_PCI_DEVICE = 0x1F
"""Highest PCI device number (five bits)."""

_UUID_RE = re.compile(
    r"GPU-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", re.IGNORECASE
)
_PCI_RE = re.compile(r"([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])", re.IGNORECASE)


def canonical_uuid(text: str) -> str | None:
    """`text` as a canonical GPU UUID (`GPU-` and lower-case digits), None if it is not one."""
    match = _UUID_RE.fullmatch(text.strip())
    return None if match is None else UUID_PREFIX + match.group(1).lower()


def canonical_pci_bus_id(text: str) -> str | None:
    """`text` as a canonical PCI bus ID (`0000:19:00.0`), None if it is not one."""
    match = _PCI_RE.fullmatch(text.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    if int(device, 16) > MAX_PCI_DEVICE:
        return None
    domain_number = f"{int(domain, 16):0{PCI_DOMAIN_DIGITS}x}"
    return f"{domain_number}:{bus.lower()}:{device.lower()}.{function}"


def canonical_id(text: str) -> str | None:
    """`text` as a canonical GPU UUID or PCI bus ID, None if it is neither."""
    return canonical_uuid(text) or canonical_pci_bus_id(text)


def is_uuid(identifier: str) -> bool:
    """Whether a canonical identifier is a GPU UUID (else it is a PCI bus ID)."""
    return identifier.startswith(UUID_PREFIX)


@dataclass(frozen=True, slots=True)
class DomainIds:
    """NVLink domains as canonical GPU identifiers, in the annotation's order.

    Invariants (checked on construction, `TopologyError` otherwise): at least one domain, every
    domain non-empty, every identifier canonical (`canonical_id(x) == x`) and in one domain only.
    Domain indices are positions in `domains`.
    """

    domains: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if not self.domains:
            raise TopologyError("no NVLink domain listed")
        seen: set[str] = set()
        for domain in self.domains:
            if not domain:
                raise TopologyError(f"empty NVLink domain in {quote(self.domains)}")
            for identifier in domain:
                if canonical_id(identifier) != identifier:
                    raise TopologyError(
                        f"{quote(identifier)} is not a canonical GPU UUID or PCI bus ID"
                    )
                if identifier in seen:
                    raise TopologyError(f"{identifier} is in two NVLink domains")
                seen.add(identifier)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Identifiers per domain, in domain order."""
        return tuple(len(domain) for domain in self.domains)

    def domain_by_id(self) -> Mapping[str, int]:
        """{canonical identifier: domain index}."""
        return {
            identifier: index for index, domain in enumerate(self.domains) for identifier in domain
        }


@dataclass(frozen=True, slots=True)
class DomainIdsResult:
    """What `parse_domain_ids` read: `ids` when the text is valid, else `error` (the message,
    naming the annotation, the value cut to a bounded length, and the problem)."""

    ids: DomainIds | None
    error: str | None = None


def _fail(value: str, problem: str) -> TopologyError:
    return TopologyError(f'{NVLINK_DOMAIN_IDS_ANNOTATION} "{clip(value)}": {problem}')


def _parse(text: str) -> DomainIds:
    if len(text) > MAX_TEXT_LENGTH:
        raise _fail(text, f"longer than {MAX_TEXT_LENGTH} characters")
    if not text.strip():
        raise _fail(text, "no domains listed")
    domains: list[tuple[str, ...]] = []
    owner: dict[str, int] = {}
    count = 0
    for position, group in enumerate(text.split(DOMAIN_SEPARATOR)):
        if not group.strip():
            raise _fail(text, f"domain {position + 1} is empty")
        members: list[str] = []
        for token in group.split(ID_SEPARATOR):
            count += 1
            if count > MAX_IDENTIFIERS:
                raise _fail(text, f"more than {MAX_IDENTIFIERS} identifiers")
            if not token.strip():
                raise _fail(text, f"empty identifier in domain {position + 1}")
            identifier = canonical_id(token)
            if identifier is None:
                raise _fail(
                    text,
                    f"{quote(token.strip())} is neither a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
                    "xxxxxxxxxxxx) nor a PCI bus ID (0000:19:00.0)",
                )
            if identifier in owner:
                first = owner[identifier] + 1
                where = (
                    f"twice in domain {first}"
                    if first == position + 1
                    else f"in domains {first} and {position + 1}"
                )
                raise _fail(text, f"{identifier} is listed {where}")
            owner[identifier] = position
            members.append(identifier)
        domains.append(tuple(members))
    return DomainIds(tuple(domains))


def parse_domain_ids(text: str) -> DomainIdsResult:
    """The canonical `DomainIds` of annotation text, or the error beside `ids=None`. Never
    raises, whatever the text (a non-string is an error too)."""
    if not isinstance(text, str):
        return DomainIdsResult(None, f"{NVLINK_DOMAIN_IDS_ANNOTATION}: not a string")
    try:
        return DomainIdsResult(_parse(text))
    except TopologyError as error:
        return DomainIdsResult(None, str(error))


def format_domain_ids(domains: Iterable[Iterable[str]]) -> str:
    """Annotation text for `domains` (identifiers in any accepted spelling), canonical:
    `[["GPU-AB...", "gpu-cd..."], ["GPU-ef..."]]` -> `"GPU-ab...,GPU-cd...;GPU-ef..."`.
    Raises `TopologyError` for an identifier that is neither kind, an empty domain, or an
    identifier listed twice."""
    canonical: list[tuple[str, ...]] = []
    for domain in domains:
        members: list[str] = []
        for identifier in domain:
            found = canonical_id(identifier)
            if found is None:
                raise TopologyError(f"{quote(identifier)} is neither a GPU UUID nor a PCI bus ID")
            members.append(found)
        canonical.append(tuple(members))
    ids = DomainIds(tuple(canonical))
    return DOMAIN_SEPARATOR.join(ID_SEPARATOR.join(domain) for domain in ids.domains)
