"""NVLink domains from the text of `nvidia-smi topo -m`.

The command prints a matrix of link types between devices, then a legend:

    <TAB>GPU0<TAB>GPU1<TAB>NIC0<TAB>CPU Affinity<TAB>NUMA Affinity<TAB>GPU NUMA ID
    GPU0<TAB> X <TAB>NV18<TAB>SYS<TAB>0-15<TAB>0<TAB><TAB>N/A
    GPU1<TAB>NV18<TAB> X <TAB>SYS<TAB>0-15<TAB>0<TAB><TAB>N/A
    NIC0<TAB>SYS<TAB>SYS<TAB> X
    Legend: ...

Two GPUs whose cell is `NV<n>` (a bonded set of n NVLinks, e.g. NV1, NV4, NV12, NV18) are joined;
the NVLink domains are the connected components of that graph, so GPUs joined through an NVSwitch
(every pair NV<n>) form one domain. PCIe and CPU paths (PIX, PXB, PHB, NODE, SYS, PSB), `X`
(self) and `N/A` join nothing.

Parsing rules:
- ANSI escape sequences (the header is underlined with `ESC[4m` ... `ESC[0m`) are removed.
- The first non-blank line is the header. Its device columns are the leading cells without
  whitespace (GPU0, NIC0, mlx5_0 ...); the first cell with whitespace ("CPU Affinity",
  "NUMA Affinity", "GPU NUMA ID") ends them. Only `GPU<i>` columns matter; the header must name
  GPU0..GPU{n-1}, each once.
- Cells are separated by tabs or by runs of two or more spaces (copies that lost their tabs).
- Matrix rows follow the header until a blank line or the `Legend` line. Rows of non-GPU devices
  are ignored; every GPU has exactly one row, its diagonal cell is `X`, its GPU cells are known
  link types, and links are symmetric.

Anything else raises `TopologyError` with the line and the problem.

By identifier: `discover_domain_ids` adds the output of `nvidia-smi -q -x` (read by
`topology.smi_query`), whose k-th GPU is `GPUk` of the matrix, and writes the same domains as
the `gpu-scheduler.io/nvlink-domain-ids` annotation of `topology.domain_ids`, by GPU UUID or by
PCI bus ID. Both outputs must list the same number of GPUs. Unlike the index annotation, it can
express a domain whose GPU indices are not consecutive.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from topology.domain_ids import DomainIds, format_domain_ids
from topology.domains import NodeTopology, TopologyError, format_domains
from topology.smi_query import GpuIdentity, parse_gpu_query
from topology.text import clip, quote

IdKind = Literal["uuid", "pci"]
"""Which identifier names the GPUs of the by-ID annotation: the UUID or the PCI bus ID."""
ID_KINDS: tuple[IdKind, ...] = ("uuid", "pci")

SELF_LINK = "X"
"""Diagonal cell: a device's link to itself."""
NON_NVLINK_LINKS = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX", "PSB", "N/A"})
"""Link types that do not put two GPUs into one NVLink domain."""
LEGEND_PREFIX = "Legend"
"""The line that ends the matrix."""
MAX_GPU_INDEX_DIGITS = 4
"""Longest GPU index accepted in a `GPU<i>` label."""

_ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CELL_SEPARATOR_RE = re.compile(r"[ \t]*\t[ \t]*| {2,}")
_GPU_LABEL_RE = re.compile(rf"^GPU([0-9]{{1,{MAX_GPU_INDEX_DIGITS}}})$")
_NVLINK_RE = re.compile(r"^NV[0-9]+$")
_WHITESPACE_RE = re.compile(r"\s")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SEPARATOR_RE.split(line.strip())]


def _fail(problem: str) -> TopologyError:
    return TopologyError(f"nvidia-smi topo -m: {problem}")


def _header_columns(line: str, line_number: int) -> tuple[list[str], dict[int, int]]:
    """Device column names and {GPU index: column position} of the header line."""
    devices: list[str] = []
    for cell in _cells(line):
        if not cell or _WHITESPACE_RE.search(cell):
            break
        devices.append(cell)
    gpu_columns: dict[int, int] = {}
    for position, name in enumerate(devices):
        match = _GPU_LABEL_RE.match(name)
        if match is None:
            continue
        gpu = int(match.group(1))
        if gpu in gpu_columns:
            raise _fail(f"line {line_number}: header names GPU{gpu} twice")
        gpu_columns[gpu] = position
    if not gpu_columns:
        raise _fail(f"line {line_number}: header {quote(line.strip())} has no GPU<i> columns")
    expected = set(range(len(gpu_columns)))
    if set(gpu_columns) != expected:
        names = clip(", ".join(f"GPU{gpu}" for gpu in sorted(gpu_columns)))
        raise _fail(f"line {line_number}: header GPU columns {names} are not GPU0..GPU{{n-1}}")
    if len(set(devices)) != len(devices):
        raise _fail(f"line {line_number}: header repeats a device column")
    return devices, gpu_columns


def _matrix_rows(
    lines: list[str], start: int, devices: list[str]
) -> dict[int, tuple[int, list[str]]]:
    """{GPU index: (line number, link cells)} for the GPU rows after the header."""
    rows: dict[int, tuple[int, list[str]]] = {}
    known_devices = set(devices)
    for line_index in range(start, len(lines)):
        line = lines[line_index]
        line_number = line_index + 1
        stripped = line.strip()
        if not stripped or stripped.startswith(LEGEND_PREFIX):
            break
        cells = _cells(line)
        label = cells[0]
        if label not in known_devices:
            raise _fail(f"line {line_number}: row {quote(label)} is not a device of the header")
        match = _GPU_LABEL_RE.match(label)
        if match is None:
            continue
        gpu = int(match.group(1))
        if gpu in rows:
            raise _fail(f"line {line_number}: second row for GPU{gpu}")
        links = cells[1 : 1 + len(devices)]
        if len(links) < len(devices):
            raise _fail(
                f"line {line_number}: row GPU{gpu} has {len(links)} link cells, "
                f"header has {len(devices)} device columns"
            )
        rows[gpu] = (line_number, links)
    return rows


def _nvlink_pairs(
    rows: dict[int, tuple[int, list[str]]], gpu_columns: dict[int, int]
) -> list[tuple[int, int]]:
    """Validated NVLink edges (i < j) between GPUs."""
    gpu_count = len(gpu_columns)
    for gpu in range(gpu_count):
        if gpu not in rows:
            raise _fail(f"no matrix row for GPU{gpu}")
    pairs: list[tuple[int, int]] = []
    for gpu, (line_number, links) in rows.items():
        for peer in range(gpu_count):
            cell = links[gpu_columns[peer]]
            if peer == gpu:
                if cell != SELF_LINK:
                    raise _fail(f"line {line_number}: GPU{gpu} to itself is {quote(cell)}, not 'X'")
                continue
            is_nvlink = _NVLINK_RE.match(cell) is not None
            if not is_nvlink and cell not in NON_NVLINK_LINKS:
                raise _fail(
                    f"line {line_number}: unknown link {quote(cell)} from GPU{gpu} to GPU{peer}"
                )
            peer_line, peer_links = rows[peer]
            reverse = peer_links[gpu_columns[gpu]]
            if is_nvlink != (_NVLINK_RE.match(reverse) is not None):
                raise _fail(
                    f"lines {line_number} and {peer_line}: asymmetric link, GPU{gpu} to "
                    f"GPU{peer} is {quote(cell)} but GPU{peer} to GPU{gpu} is {quote(reverse)}"
                )
            if is_nvlink and gpu < peer:
                pairs.append((gpu, peer))
    return pairs


def _components(gpu_count: int, pairs: list[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """Connected components of the NVLink graph, each sorted, ordered by first GPU."""
    parent = list(range(gpu_count))

    def root(gpu: int) -> int:
        while parent[gpu] != gpu:
            parent[gpu] = parent[parent[gpu]]
            gpu = parent[gpu]
        return gpu

    for left, right in pairs:
        a, b = root(left), root(right)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for gpu in range(gpu_count):
        groups.setdefault(root(gpu), []).append(gpu)
    return tuple(tuple(members) for _, members in sorted(groups.items()))


def parse_topology(topo_text: str) -> NodeTopology:
    """The `NodeTopology` described by `nvidia-smi topo -m` output.

    Raises `TopologyError` (and nothing else) for any text that is not a well-formed matrix
    under the module's parsing rules.
    """
    lines = _ANSI_ESCAPE_RE.sub("", topo_text).splitlines()
    header_index = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_index is None:
        raise _fail("no header line (input is empty)")
    header = lines[header_index]
    if header.strip().startswith(LEGEND_PREFIX):
        raise _fail(f"line {header_index + 1}: legend before any matrix")
    devices, gpu_columns = _header_columns(header, header_index + 1)
    rows = _matrix_rows(lines, header_index + 1, devices)
    pairs = _nvlink_pairs(rows, gpu_columns)
    gpu_count = len(gpu_columns)
    return NodeTopology(gpu_count, _components(gpu_count, pairs))


def discover_domains(topo_text: str) -> str:
    """The `gpu-scheduler.io/nvlink-domains` annotation value for `nvidia-smi topo -m` output.

    E.g. eight GPUs in two NVLink-connected quads -> `"0-3,4-7"`; one GPU -> `"0"`. Raises
    `TopologyError` for malformed text, and for a domain that is not a run of consecutive GPU
    indices (the annotation grammar cannot express it).
    """
    return format_domains(parse_topology(topo_text).domains)


def domain_ids_of(
    topology: NodeTopology, gpus: Sequence[GpuIdentity], by: IdKind = "uuid"
) -> DomainIds:
    """The domains of `topology` with GPU `i` named by `gpus[i]`'s UUID (`by="uuid"`) or PCI bus
    ID (`by="pci"`). `TopologyError` when the GPU counts differ."""
    if len(gpus) != topology.gpu_count:
        raise TopologyError(
            f"nvidia-smi topo -m lists {topology.gpu_count} GPUs but nvidia-smi -q -x lists "
            f"{len(gpus)}; give both outputs of the same node"
        )

    def name(gpu: GpuIdentity) -> str:
        return gpu.pci_bus_id if by == "pci" else gpu.uuid

    return DomainIds(tuple(tuple(name(gpus[gpu]) for gpu in domain) for domain in topology.domains))


def discover_domain_ids(topo_text: str, query_xml: str, by: IdKind = "uuid") -> str:
    """The `gpu-scheduler.io/nvlink-domain-ids` annotation value for the outputs of
    `nvidia-smi topo -m` and `nvidia-smi -q -x` of one node, e.g. `"GPU-4554...,GPU-8a1c..."`.
    Raises `TopologyError` for malformed text or GPU counts that differ."""
    topology = parse_topology(topo_text)
    return format_domain_ids(domain_ids_of(topology, parse_gpu_query(query_xml), by).domains)


def minors_off_index(gpus: Sequence[GpuIdentity]) -> tuple[GpuIdentity, ...]:
    """The GPUs whose known minor number differs from their index. NVIDIA's DRA driver names a
    GPU `gpu-<minor>`, so on such a node the index annotation does not name DRA devices."""
    return tuple(gpu for gpu in gpus if gpu.minor is not None and gpu.minor != gpu.index)
