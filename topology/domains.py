"""NVLink domains of a node: the annotation, its defaults, and the `NodeTopology` model.

An NVLink domain is a set of GPUs that talk to each other over NVLink without leaving the set.
A node lists its domains in the annotation `gpu-scheduler.io/nvlink-domains`, written by the
operator or by `topology.discover` from `nvidia-smi topo -m`:

    gpu-scheduler.io/nvlink-domains: "0-3,4-7"

Grammar: groups separated by commas; each group is one domain, written as a single GPU index
(`5`) or an inclusive range (`0-3`). Whitespace around numbers is ignored. A domain is therefore
always a contiguous run of GPU indices. The annotation is valid only if every index lies in
`0..gpu_count-1`, no GPU appears twice, and every GPU belongs to exactly one domain.

Defaults when the annotation is absent (or blank):

    =========================  ======================  ===========================
    GPUs on the node           default domains         example
    =========================  ======================  ===========================
    0                          none                    ``""``
    1 or 2                     one domain of all       ``"0"``, ``"0-1"``
    4                          two pairs               ``"0-1,2-3"``
    even n >= 8                two halves of n/2       ``"0-3,4-7"``, ``"0-7,8-15"``
    any other n (3, 5, 6, 7)   one domain of all n     ``"0-5"``
    =========================  ======================  ===========================

The 1/2/4/8 rows follow the common board layouts (PCIe pairs bridged by NVLink; HGX boards of two
quads). For unusual counts one domain of all GPUs is the neutral choice: it neither invents a
boundary nor penalises any placement. Operators with other layouts should annotate the node.

Fallback: `domains_for_node` never raises on a bad annotation. It uses the default layout and
returns the parse error beside it, so the caller can log it and emit an event on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from topology.text import clip, index_list

NVLINK_DOMAINS_ANNOTATION = "gpu-scheduler.io/nvlink-domains"
"""Node annotation that lists the node's NVLink domains, e.g. ``"0-3,4-7"``."""

GROUP_SEPARATOR = ","
RANGE_SEPARATOR = "-"
MAX_INDEX_DIGITS = 6
"""Longest GPU index accepted in text; longer numbers are rejected before `int()` sees them."""

PAIR_SIZE = 2
"""GPUs per domain in the default layout of a 4-GPU node."""
PAIRED_GPU_COUNT = 4
"""GPU count whose default layout is pairs."""
HALVES_MIN_GPU_COUNT = 8
"""Smallest even GPU count whose default layout is two halves."""
SINGLE_DOMAIN_MAX_GPU_COUNT = 2
"""Up to this many GPUs, the default is one domain of all GPUs."""

_GROUP_RE = re.compile(
    rf"^\s*([0-9]{{1,{MAX_INDEX_DIGITS}}})\s*(?:-\s*([0-9]{{1,{MAX_INDEX_DIGITS}}})\s*)?$"
)


class TopologyError(ValueError):
    """Topology text (annotation, `nvidia-smi topo -m` output, MIG resource name) is invalid.

    The message names the input (annotation key or resource key), the offending value, and what
    is wrong with it.
    """


class DomainSource(Enum):
    """Where a node's domains came from."""

    ANNOTATION = "annotation"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class NodeTopology:
    """The NVLink domains of one node.

    Invariants (checked on construction, `TopologyError` otherwise): `gpu_count >= 0`; every
    domain is a non-empty, strictly increasing tuple of GPU indices in `0..gpu_count-1`; the
    domains are disjoint, cover every GPU, and are ordered by their first GPU. Domain indices used
    throughout the package are positions in `domains`.
    """

    gpu_count: int
    domains: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.gpu_count < 0:
            raise TopologyError(f"gpu_count must be >= 0, got {self.gpu_count}")
        seen: set[int] = set()
        previous_first = -1
        for domain in self.domains:
            if not domain:
                raise TopologyError(f"empty NVLink domain in {self.domains}")
            if list(domain) != sorted(set(domain)):
                raise TopologyError(f"domain {domain} is not strictly increasing")
            if domain[0] <= previous_first:
                raise TopologyError(f"domains {self.domains} are not ordered by first GPU")
            previous_first = domain[0]
            for gpu in domain:
                if not 0 <= gpu < self.gpu_count:
                    raise TopologyError(
                        f"GPU {gpu} is out of range for a node with {self.gpu_count} GPUs"
                    )
                if gpu in seen:
                    raise TopologyError(f"GPU {gpu} is in two domains of {self.domains}")
                seen.add(gpu)
        if len(seen) != self.gpu_count:
            missing = sorted(set(range(self.gpu_count)) - seen)
            raise TopologyError(f"GPUs {missing} are in no domain of {self.domains}")

    @property
    def domain_count(self) -> int:
        """Number of domains."""
        return len(self.domains)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """GPUs per domain, in domain order."""
        return tuple(len(domain) for domain in self.domains)

    def domain_of(self, gpu: int) -> int:
        """Index of the domain holding `gpu`; `TopologyError` if the node has no such GPU."""
        for index, domain in enumerate(self.domains):
            if gpu in domain:
                return index
        raise TopologyError(f"GPU {gpu} is out of range for a node with {self.gpu_count} GPUs")

    def gpu_domain_ids(self) -> tuple[int, ...]:
        """Domain index of every GPU, indexed by GPU: `result[gpu] == domain_of(gpu)`."""
        ids = [0] * self.gpu_count
        for index, domain in enumerate(self.domains):
            for gpu in domain:
                ids[gpu] = index
        return tuple(ids)


@dataclass(frozen=True, slots=True)
class DomainsResult:
    """Domains chosen for a node, where they came from, and the annotation error if any.

    `error` is None when the annotation was absent or valid; otherwise it holds the
    `TopologyError` message and `source` is `DomainSource.DEFAULT`.
    """

    topology: NodeTopology
    source: DomainSource
    error: str | None = None


def _fail(value: str, problem: str) -> TopologyError:
    """The error for annotation `value`; the value is echoed cut to `topology.text.MAX_ECHO`."""
    return TopologyError(f'{NVLINK_DOMAINS_ANNOTATION} "{clip(value)}": {problem}')


def parse_domains(annotation: str, gpu_count: int) -> NodeTopology:
    """Parse the NVLink-domains annotation of a node with `gpu_count` GPUs.

    Returns the canonical `NodeTopology` (domains ordered by first GPU). Raises `TopologyError`
    naming the annotation key, the value and the problem: a malformed group, a descending range,
    an index out of range, a GPU in two domains, or GPUs left out of every domain.
    """
    if gpu_count < 0:
        raise TopologyError(f"gpu_count must be >= 0, got {gpu_count}")
    if not annotation.strip():
        if gpu_count == 0:
            return NodeTopology(0, ())
        raise _fail(annotation, f"no domains listed for a node with {gpu_count} GPUs")
    owner: dict[int, int] = {}
    domains: list[tuple[int, ...]] = []
    for position, token in enumerate(annotation.split(GROUP_SEPARATOR)):
        match = _GROUP_RE.match(token)
        if match is None:
            problem = "empty group" if not token.strip() else f'group "{clip(token.strip())}"'
            raise _fail(annotation, f"{problem} is not an index or a range like 0-3")
        first = int(match.group(1))
        last = first if match.group(2) is None else int(match.group(2))
        if last < first:
            raise _fail(annotation, f"range {first}-{last} is descending")
        for gpu in (first, last):
            if gpu >= gpu_count:
                valid = f", 0..{gpu_count - 1}" if gpu_count else ""
                raise _fail(
                    annotation, f"GPU {gpu} is out of range (node has {gpu_count} GPUs{valid})"
                )
        for gpu in range(first, last + 1):
            if gpu in owner:
                raise _fail(annotation, f"GPU {gpu} is in two domains")
            owner[gpu] = position
        domains.append(tuple(range(first, last + 1)))
    missing = [gpu for gpu in range(gpu_count) if gpu not in owner]
    if missing:
        listed = index_list(missing)
        subject = f"GPU {listed} is" if len(missing) == 1 else f"GPUs {listed} are"
        raise _fail(annotation, f"{subject} in no domain (node has {gpu_count} GPUs)")
    return NodeTopology(gpu_count, tuple(sorted(domains)))


def default_domains(gpu_count: int) -> NodeTopology:
    """The default layout for `gpu_count` GPUs (see the module table)."""
    if gpu_count < 0:
        raise TopologyError(f"gpu_count must be >= 0, got {gpu_count}")
    if gpu_count == 0:
        return NodeTopology(0, ())
    if gpu_count == PAIRED_GPU_COUNT:
        size = PAIR_SIZE
    elif gpu_count >= HALVES_MIN_GPU_COUNT and gpu_count % 2 == 0:
        size = gpu_count // 2
    else:
        size = gpu_count
    domains = tuple(tuple(range(start, start + size)) for start in range(0, gpu_count, size))
    return NodeTopology(gpu_count, domains)


def domains_for_node(annotation: str | None, gpu_count: int) -> DomainsResult:
    """Domains of a node from its annotation, falling back to the default layout.

    An absent or blank annotation gives the default with no error. A malformed one gives the
    default plus the `TopologyError` message in `error`; this function does not raise for bad
    annotation text (it raises `TopologyError` only for a negative `gpu_count`).
    """
    if annotation is None or not annotation.strip():
        return DomainsResult(default_domains(gpu_count), DomainSource.DEFAULT)
    try:
        return DomainsResult(parse_domains(annotation, gpu_count), DomainSource.ANNOTATION)
    except TopologyError as error:
        return DomainsResult(default_domains(gpu_count), DomainSource.DEFAULT, str(error))


def format_domains(domains: tuple[tuple[int, ...], ...]) -> str:
    """Annotation text for `domains`: `((0, 1, 2, 3), (4, 5, 6, 7))` -> `"0-3,4-7"`.

    Each domain must be a non-empty run of consecutive GPU indices, since the grammar writes one
    group per domain; `TopologyError` otherwise. For any valid `NodeTopology` `t`,
    `parse_domains(format_domains(t.domains), t.gpu_count) == t`.
    """
    groups: list[str] = []
    for domain in domains:
        if not domain:
            raise TopologyError("cannot format an empty NVLink domain")
        if list(domain) != list(range(domain[0], domain[0] + len(domain))):
            gpus = ",".join(str(gpu) for gpu in domain)
            raise TopologyError(
                f"NVLink domain {{{gpus}}} is not a run of consecutive GPU indices; "
                f"{NVLINK_DOMAINS_ANNOTATION} cannot express it"
            )
        first, last = domain[0], domain[-1]
        groups.append(str(first) if first == last else f"{first}{RANGE_SEPARATOR}{last}")
    return GROUP_SEPARATOR.join(groups)
