"""The GPUs of a node and their identifiers, from `nvidia-smi -q -x` (the XML form of `-q`).

The root element `nvidia_smi_log` holds one `gpu` element per GPU, in the order of the GPUs'
NVML indices, which is the order `nvidia-smi topo -m` numbers them (`GPU0`, `GPU1`, ...): the
k-th `gpu` element is `GPUk`. What is read of each:

    <gpu id="00000000:19:00.0">
        <uuid>GPU-45548304-7cf6-2002-ad86-7a8d1badd8cb</uuid>
        <minor_number>0</minor_number>                  (N/A on some platforms)
        <pci><pci_bus_id>00000000:19:00.0</pci_bus_id></pci>

The UUID and the PCI bus ID (`pci/pci_bus_id`, else the `id` attribute) are returned in the
canonical forms of `topology.domain_ids`; the minor number (`/dev/nvidia<minor>`, which NVIDIA's
DRA driver uses to name its devices `gpu-<minor>`) is None when absent or not a number.

Anything else raises `TopologyError` naming the GPU and the problem: text that is not XML, a
root of another name, no `gpu` element, a missing or malformed UUID or bus ID, the same UUID or
bus ID twice, more than `MAX_GPUS` GPUs or more than `MAX_QUERY_LENGTH` characters. The XML is
read with the standard library's expat parser, which loads no external DTD or entity.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

from topology.domain_ids import canonical_pci_bus_id, canonical_uuid
from topology.domains import TopologyError
from topology.text import quote

ROOT_TAG = "nvidia_smi_log"
GPU_TAG = "gpu"
MAX_QUERY_LENGTH = 64 * 1024 * 1024
"""Longest `nvidia-smi -q -x` output read (one GPU's section is about 27 KB)."""
MAX_GPUS = 1024
"""Most `gpu` elements read."""
MAX_MINOR_DIGITS = 6


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """One GPU of `nvidia-smi -q -x`: its index (position, = `GPU<index>` of `topo -m`), UUID
    and PCI bus ID in canonical form, and its minor number if known."""

    index: int
    uuid: str
    pci_bus_id: str
    minor: int | None = None


def _fail(problem: str) -> TopologyError:
    return TopologyError(f"nvidia-smi -q -x: {problem}")


def _text(element: ElementTree.Element, path: str) -> str:
    found = element.find(path)
    return (found.text or "").strip() if found is not None else ""


def _gpu(element: ElementTree.Element, index: int) -> GpuIdentity:
    raw_uuid = _text(element, "uuid")
    uuid = canonical_uuid(raw_uuid)
    if uuid is None:
        shown = quote(raw_uuid) if raw_uuid else "missing"
        raise _fail(f"GPU {index}: uuid {shown} is not a GPU UUID")
    raw_bus = _text(element, "pci/pci_bus_id") or element.get("id", "").strip()
    bus = canonical_pci_bus_id(raw_bus)
    if bus is None:
        shown = quote(raw_bus) if raw_bus else "missing"
        raise _fail(f"GPU {index}: pci_bus_id {shown} is not a PCI bus ID")
    raw_minor = _text(element, "minor_number")
    minor = (
        int(raw_minor)
        if raw_minor.isascii() and raw_minor.isdigit() and len(raw_minor) <= MAX_MINOR_DIGITS
        else None
    )
    return GpuIdentity(index, uuid, bus, minor)


def parse_gpu_query(xml_text: str) -> tuple[GpuIdentity, ...]:
    """The GPUs of `nvidia-smi -q -x` output, by index; `TopologyError` for anything the module
    docstring refuses."""
    if len(xml_text) > MAX_QUERY_LENGTH:
        raise _fail(f"longer than {MAX_QUERY_LENGTH} characters")
    try:
        root = ElementTree.fromstring(xml_text)
    except ElementTree.ParseError as error:
        raise _fail(f"not XML ({error})") from None
    if root.tag != ROOT_TAG:
        raise _fail(f"root element is {quote(root.tag)}, not {ROOT_TAG!r}")
    elements = root.findall(GPU_TAG)
    if not elements:
        raise _fail("no <gpu> element")
    if len(elements) > MAX_GPUS:
        raise _fail(f"more than {MAX_GPUS} <gpu> elements")
    gpus = tuple(_gpu(element, index) for index, element in enumerate(elements))
    for what, values in (
        ("uuid", [gpu.uuid for gpu in gpus]),
        ("pci_bus_id", [gpu.pci_bus_id for gpu in gpus]),
    ):
        seen: dict[str, int] = {}
        for index, value in enumerate(values):
            if value in seen:
                raise _fail(f"GPUs {seen[value]} and {index} have the same {what} {value}")
            seen[value] = index
    return gpus
