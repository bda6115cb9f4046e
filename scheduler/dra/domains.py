"""Which NVLink domain each DRA device of one node lies in: the map the allocator orders its
candidates by and the NVLink score reads.

`device_domains(annotations, pools, domain_attribute, driver)` maps the whole GPUs of `driver`
that the node sees (`Pool.devices` of the driver's pools; a device is a whole GPU unless its
attribute `<driver>/type` says otherwise, NVIDIA's driver publishing `gpu`, `mig` or `vfio`) to a
domain index, by the first rule that applies:

(a) `domain_attribute` (a fully qualified attribute name such as a Fabric Manager partition or
    clique attribute) is set and at least one GPU has it: GPUs with equal values share a domain,
    GPUs without it are left out (unknown). Domains are numbered by their first GPU in the
    device order of rule (d).
(b) the node annotation `gpu-scheduler.io/nvlink-domain-ids` (`topology.domain_ids`) is set:
    each identifier names the GPU whose `<driver>/uuid` (NVIDIA's `gpu.nvidia.com/uuid`) or
    `resource.kubernetes.io/pciBusID` attribute has that value, compared in canonical form.
    Domains are numbered in the annotation's order.
(c) the node annotation `gpu-scheduler.io/nvlink-domains` (`topology.domains`) is set: device
    `gpu-N` is GPU index N. This relies on the driver's naming: NVIDIA's driver names a whole
    GPU `gpu-<minor>` after its `/dev/nvidia<minor>` number, which is usually, not always, the
    index `nvidia-smi` shows (`gpu-scheduler topology discover` warns when they differ). The
    annotation is read for as many GPUs as the driver has whole-GPU devices.
(d) otherwise the default layout of `topology.domains.default_domains` for the count of GPUs,
    the GPUs ordered by PCI bus ID when every one has one, else by device name in natural order
    (`gpu-2` before `gpu-10`), then pool.

An annotation (or attribute) that does not fit the devices is not used: its problem goes into
`problem` and the next rule is tried. Misfits: the text does not parse; an identifier names no
GPU, or two; a GPU is named by no identifier, or by identifiers of two domains; a GPU is not named
`gpu-N` or N is outside the annotation; two GPUs share a name across pools; no GPU has the
attribute.

A partition of a GPU (a device with a `<driver>/parentUUID` attribute, NVIDIA's MIG devices) lies
in the domain of the GPU with that UUID, when that GPU is mapped (`DeviceDomains.gpu_of` names
that GPU).

Pure: plain records in, a frozen record out, no I/O. Problems are bounded (`MAX_PROBLEM`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from scheduler.model.devices import AttributeValue, Device
from scheduler.model.pools import Pool
from topology.domain_ids import NVLINK_DOMAIN_IDS_ANNOTATION, canonical_id, parse_domain_ids
from topology.domains import NVLINK_DOMAINS_ANNOTATION, default_domains, domains_for_node
from topology.text import clip

DEFAULT_DRIVER = "gpu.nvidia.com"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
"""The standard attribute of a device's PCI bus ID (k8s.io/dynamic-resource-allocation@v0.37.2
deviceattribute/attribute.go)."""
UUID_ATTRIBUTE = "uuid"
"""The driver's attribute holding a GPU's UUID (qualified with the driver's name)."""
PARENT_UUID_ATTRIBUTE = "parentUUID"
"""The driver's attribute holding a partition's parent GPU UUID."""
TYPE_ATTRIBUTE = "type"
"""The driver's attribute holding a device's type; absent or `WHOLE_GPU_TYPE`: a whole GPU."""
WHOLE_GPU_TYPE = "gpu"
MAX_PROBLEM = 600
"""Characters of `DeviceDomains.problem` at most (a few clipped echoes)."""

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): a device as allocation results name it."""
Source = Literal["attribute", "ids", "index", "default"]

_INDEX_NAME_RE = re.compile(r"gpu-([0-9]{1,6})")
_DIGITS_RE = re.compile(r"([0-9]+)")


@dataclass(frozen=True)
class DeviceDomains:
    """The domain of each mapped device of one node, and where the map came from.

    `domain_of[key]` is an index into `domain_size`; a device absent from it is in no known
    domain. `domain_size[d]` counts the whole GPUs of domain d (partitions do not add).
    `problem` is "" or why an annotation or the attribute was not used. `gpu_of[key]` is the
    whole GPU a mapped partition belongs to."""

    domain_of: Mapping[DeviceKey, int]
    domain_size: tuple[int, ...]
    source: Source
    problem: str = ""
    gpu_of: Mapping[DeviceKey, DeviceKey] = field(default_factory=dict)


@dataclass(frozen=True)
class _Gpu:
    key: DeviceKey
    device: Device


class _Misfit(Exception):
    """A rule's input does not fit the devices; the message says why."""


def device_domains(
    annotations: Mapping[str, str],
    pools: Sequence[Pool],
    domain_attribute: str = "",
    driver: str = DEFAULT_DRIVER,
) -> DeviceDomains:
    """The device -> NVLink domain map of one node (see the module docstring for the rules)."""
    gpus, partitions = _devices(pools, driver)
    rules: list[tuple[Source, Callable[[], dict[DeviceKey, int]]]] = []
    if domain_attribute:
        rules.append(("attribute", lambda: _by_attribute(gpus, domain_attribute)))
    ids_text = annotations.get(NVLINK_DOMAIN_IDS_ANNOTATION)
    if ids_text is not None and ids_text.strip():
        rules.append(("ids", lambda: _by_ids(gpus, ids_text, driver)))
    index_text = annotations.get(NVLINK_DOMAINS_ANNOTATION)
    if index_text is not None and index_text.strip():
        rules.append(("index", lambda: _by_index(gpus, index_text)))
    problems: list[str] = []
    for source, rule in rules:
        try:
            mapped = rule()
        except _Misfit as misfit:
            problems.append(str(misfit))
            continue
        return _result(mapped, gpus, partitions, driver, source, problems)
    return _result(_by_default(gpus), gpus, partitions, driver, "default", problems)


def _devices(pools: Sequence[Pool], driver: str) -> tuple[list[_Gpu], list[_Gpu]]:
    """(whole GPUs, other devices) of `driver` the node sees, in pool order."""
    gpus: list[_Gpu] = []
    others: list[_Gpu] = []
    type_key = f"{driver}/{TYPE_ATTRIBUTE}"
    for pool in pools:
        if pool.id.driver != driver:
            continue
        for entry in pool.devices:
            device = entry.device
            kind = device.attributes.get(type_key)
            found = _Gpu((driver, pool.id.pool, device.name), device)
            (gpus if kind is None or kind == WHOLE_GPU_TYPE else others).append(found)
    return gpus, others


def _result(
    mapped: dict[DeviceKey, int],
    gpus: list[_Gpu],
    partitions: list[_Gpu],
    driver: str,
    source: Source,
    problems: list[str],
) -> DeviceDomains:
    count = max(mapped.values(), default=-1) + 1
    sizes = [0] * count
    for domain in mapped.values():
        sizes[domain] += 1
    uuid_key = f"{driver}/{UUID_ATTRIBUTE}"
    parent_key = f"{driver}/{PARENT_UUID_ATTRIBUTE}"
    gpu_by_uuid: dict[str, DeviceKey] = {}
    for gpu in gpus:
        uuid = _canonical(gpu.device.attributes.get(uuid_key))
        if uuid is not None and gpu.key in mapped:
            gpu_by_uuid[uuid] = gpu.key
    result = dict(mapped)
    gpu_of: dict[DeviceKey, DeviceKey] = {}
    for partition in partitions:
        parent = _canonical(partition.device.attributes.get(parent_key))
        if parent is not None and parent in gpu_by_uuid:
            gpu_of[partition.key] = gpu_by_uuid[parent]
            result[partition.key] = mapped[gpu_of[partition.key]]
    problem = clip("; ".join(problems), MAX_PROBLEM)
    return DeviceDomains(result, tuple(sizes), source, problem, gpu_of)


def _canonical(value: AttributeValue | None) -> str | None:
    return canonical_id(value) if isinstance(value, str) else None


def _name(gpu: _Gpu) -> str:
    return f"{gpu.key[1]}/{gpu.key[2]}"


def _ordered(gpus: list[_Gpu]) -> list[_Gpu]:
    """Rule (d)'s order: by PCI bus ID when every GPU has one, else natural name, then pool."""
    buses = [_canonical(gpu.device.attributes.get(PCI_BUS_ID_ATTRIBUTE)) for gpu in gpus]
    if gpus and all(bus is not None for bus in buses):
        return [gpu for _, gpu in sorted(zip(buses, gpus, strict=True), key=lambda p: p[0] or "")]

    def natural(gpu: _Gpu) -> tuple[tuple[tuple[int, str], ...], str]:
        # split() alternates text (even positions) and digit runs (odd): numbers compare by
        # length without leading zeros, then digits, so gpu-2 < gpu-10
        parts = _DIGITS_RE.split(gpu.key[2])
        key = tuple(
            (0, part) if i % 2 == 0 else (len(part.lstrip("0")), part.lstrip("0"))
            for i, part in enumerate(parts)
        )
        return key, gpu.key[1]

    return sorted(gpus, key=natural)


def _by_default(gpus: list[_Gpu]) -> dict[DeviceKey, int]:
    ids = default_domains(len(gpus)).gpu_domain_ids()
    return {gpu.key: ids[index] for index, gpu in enumerate(_ordered(gpus))}


def _by_attribute(gpus: list[_Gpu], attribute: str) -> dict[DeviceKey, int]:
    domain_by_value: dict[tuple[str, str], int] = {}
    mapped: dict[DeviceKey, int] = {}
    for gpu in _ordered(gpus):
        value = gpu.device.attributes.get(attribute)
        if value is None:
            continue
        typed = (type(value).__name__, str(value))  # True and 1 are different values
        mapped[gpu.key] = domain_by_value.setdefault(typed, len(domain_by_value))
    if not mapped:
        raise _Misfit(f"no device has the attribute {clip(attribute)}")
    return mapped


def _by_ids(gpus: list[_Gpu], text: str, driver: str) -> dict[DeviceKey, int]:
    parsed = parse_domain_ids(text)
    if parsed.ids is None:
        raise _Misfit(parsed.error or f"{NVLINK_DOMAIN_IDS_ANNOTATION}: unreadable")
    wanted = parsed.ids.domain_by_id()
    uuid_key = f"{driver}/{UUID_ATTRIBUTE}"
    named: dict[str, _Gpu] = {}
    domains_of: dict[DeviceKey, set[int]] = {}
    for gpu in gpus:
        domains = domains_of.setdefault(gpu.key, set())
        for key in (uuid_key, PCI_BUS_ID_ATTRIBUTE):
            identifier = _canonical(gpu.device.attributes.get(key))
            if identifier is None or identifier not in wanted:
                continue
            if identifier in named and named[identifier].key != gpu.key:
                raise _Misfit(
                    f"{NVLINK_DOMAIN_IDS_ANNOTATION}: {identifier} names two devices, "
                    f"{_name(named[identifier])} and {_name(gpu)}"
                )
            named[identifier] = gpu
            domains.add(wanted[identifier])
    unknown = [identifier for identifier in wanted if identifier not in named]
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise _Misfit(
            f"{NVLINK_DOMAIN_IDS_ANNOTATION}: no device has {unknown[0]}{more} "
            f"(matched against {uuid_key} and {PCI_BUS_ID_ATTRIBUTE})"
        )
    mapped: dict[DeviceKey, int] = {}
    for gpu in gpus:
        domains = domains_of[gpu.key]
        if len(domains) != 1:
            problem = "is named in two domains" if domains else "is in no domain"
            raise _Misfit(f"{NVLINK_DOMAIN_IDS_ANNOTATION}: device {_name(gpu)} {problem}")
        mapped[gpu.key] = domains.pop()
    return mapped


def _by_index(gpus: list[_Gpu], text: str) -> dict[DeviceKey, int]:
    found = domains_for_node(text, len(gpus))
    if found.error is not None:
        raise _Misfit(found.error)
    ids = found.topology.gpu_domain_ids()
    by_index: dict[int, _Gpu] = {}
    mapped: dict[DeviceKey, int] = {}
    for gpu in gpus:
        match = _INDEX_NAME_RE.fullmatch(gpu.key[2])
        if match is None or int(match.group(1)) >= len(ids):
            raise _Misfit(
                f"{NVLINK_DOMAINS_ANNOTATION}: device {clip(_name(gpu))} is not gpu-N with N "
                f"below {len(ids)}, the GPU count"
            )
        index = int(match.group(1))
        if index in by_index:
            raise _Misfit(
                f"{NVLINK_DOMAINS_ANNOTATION}: devices {_name(by_index[index])} and "
                f"{_name(gpu)} are both GPU {index}"
            )
        by_index[index] = gpu
        mapped[gpu.key] = ids[index]
    return mapped
