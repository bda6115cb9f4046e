"""Which pod holds which GPU through Dynamic Resource Allocation: a pure function of API objects.

dcgm-exporter attributes a GPU to a pod by asking the kubelet's pod-resources API which devices
each container was given; for a DRA pod the kubelet answers with the devices of the pod's
allocated ResourceClaims, and dcgm-exporter matches them to the GPUs it reads from NVML by UUID.
Here the same answer is derived from the API objects:

1. The GPUs of a node are the devices of driver ``gpu.nvidia.com`` in the ResourceSlices
   published for it (``spec.nodeName``); a node with N of them has GPUs 0..N-1, GPU i having the
   fake exporter's UUID ``gpu_uuid(node, i)`` (as ``hack.localcluster.dra`` publishes them).
2. A device is that node's GPU i when its ``uuid`` attribute (bare or ``gpu.nvidia.com/uuid``)
   is GPU i's UUID (dcgm-exporter's match); a device without a ``uuid`` attribute is GPU i by its
   ``index`` (or ``minor``) int attribute, else by its name ``gpu-<i>``.
3. A bound, unfinished pod's claims are the names its ``spec.resourceClaims`` resolve to
   (``resourceClaimName``, or for a template the entry of ``status.resourceClaimStatuses``, as
   ``resourceclaim.Name`` of k8s.io/dynamic-resource-allocation@v0.37.2 does) plus
   ``status.extendedResourceClaimStatus.resourceClaimName`` (the claim made for its extended
   resources). A claim counts for the pod only when the pod's uid is in the claim's
   ``status.reservedFor``, as the kubelet prepares only claims reserved for the pod.
4. Every allocated device of such a claim (admin-access results aside: they watch a device,
   they do not hold it) of driver ``gpu.nvidia.com`` is held by the pod; the ``container`` is the
   first container whose ``resources.claims`` names the pod's claim entry (for the extended
   claim: the container of the result's request in ``requestMappings``), else the first
   container.

Nothing here raises on odd objects: a claim not found, a claim not reserved for the pod, a
device on no slice, on another node or not resolvable to an index are each reported in
``problems`` and left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hack.fake_dcgm.identity import gpu_uuid

GPU_DRIVER = "gpu.nvidia.com"
MAX_GPUS = 1024
_DEVICE_NAME = re.compile(r"gpu-([0-9]{1,4})")

Json = Mapping[str, Any]
DeviceId = tuple[str, str, str]
"""(driver, pool, device)."""


@dataclass(frozen=True)
class DraGpuHolding:
    """One GPU of a node held by one pod through a claim."""

    node: str
    index: int
    pod: Json
    container: str


@dataclass(frozen=True)
class DraHoldings:
    """Result of :func:`dra_holdings`."""

    gpu_counts: Mapping[str, int]  # node -> GPUs published for it through DRA
    held: tuple[DraGpuHolding, ...]
    problems: tuple[str, ...]
    dra_pods: frozenset[str] = field(default_factory=frozenset)  # uids of pods holding any


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _items(obj: Any) -> list[Json]:
    return [item for item in obj if isinstance(item, Mapping)] if isinstance(obj, list) else []


def _text(obj: Any) -> str:
    return obj if isinstance(obj, str) else ""


def _attribute(device: Json, name: str, kind: str) -> Any:
    """Attribute `name` of the device, written bare or qualified by the driver's domain."""
    attributes = _dig(device, "attributes")
    value = _dig(attributes, name, kind)
    return value if value is not None else _dig(attributes, f"{GPU_DRIVER}/{name}", kind)


def _int_attribute(device: Json, name: str) -> int | None:
    value = _attribute(device, name, "int")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _device_index(node: str, device: Json, count: int) -> int | None:
    """Rule 2: the node's GPU index of a published device, None when none matches."""
    uuid = _attribute(device, "uuid", "string")
    if isinstance(uuid, str):
        return next((i for i in range(count) if gpu_uuid(node, i) == uuid), None)
    index = _int_attribute(device, "index")
    if index is None:
        index = _int_attribute(device, "minor")
    if index is None:
        match = _DEVICE_NAME.fullmatch(_text(device.get("name")))
        index = int(match.group(1)) if match else None
    return index if index is not None and 0 <= index < count else None


def _published(
    slices: Iterable[Json], problems: list[str]
) -> tuple[dict[str, int], dict[DeviceId, tuple[str, int]]]:
    """(node -> GPU count, device -> (node, index)) from the GPU driver's node-local slices."""
    by_node: dict[str, list[tuple[str, Json]]] = {}
    for resource_slice in slices:
        spec = _dig(resource_slice, "spec")
        node = _text(_dig(spec, "nodeName"))
        if _dig(spec, "driver") != GPU_DRIVER or not node:
            continue
        pool = _text(_dig(spec, "pool", "name"))
        for device in _items(_dig(spec, "devices")):
            by_node.setdefault(node, []).append((pool, device))
    counts: dict[str, int] = {}
    devices: dict[DeviceId, tuple[str, int]] = {}
    for node, published in sorted(by_node.items()):
        count = min(len(published), MAX_GPUS)
        counts[node] = count
        for pool, device in published:
            name = _text(device.get("name"))
            index = _device_index(node, device, count)
            if index is None:
                problems.append(
                    f"node {node}: device {GPU_DRIVER}/{pool}/{name} matches none of its "
                    f"{count} GPUs by uuid or index; it is left out"
                )
                continue
            devices[(GPU_DRIVER, pool, name)] = (node, index)
    return counts, devices


def gpu_nodes(slices: Iterable[Json]) -> frozenset[str]:
    """The nodes with at least one GPU published in ``slices`` (rule 1)."""
    return frozenset(
        node
        for s in slices
        if _dig(s, "spec", "driver") == GPU_DRIVER
        and (node := _text(_dig(s, "spec", "nodeName")))
        and _items(_dig(s, "spec", "devices"))
    )


def claim_names(pod: Json) -> list[tuple[str, str]]:
    """Rule 3: (pod claim entry name, ResourceClaim name) of the pod; the extended-resource
    claim has the entry name ""; entries whose claim is not created yet are left out."""
    status = _dig(pod, "status")
    recorded = {
        _text(entry.get("name")): _text(entry.get("resourceClaimName"))
        for entry in _items(_dig(status, "resourceClaimStatuses"))
    }
    found: list[tuple[str, str]] = []
    for entry in _items(_dig(pod, "spec", "resourceClaims")):
        entry_name = _text(entry.get("name"))
        claim = _text(entry.get("resourceClaimName"))
        if not claim and entry.get("resourceClaimTemplateName") is not None:
            claim = recorded.get(entry_name, "")
        if claim:
            found.append((entry_name, claim))
    extended = _text(_dig(status, "extendedResourceClaimStatus", "resourceClaimName"))
    if extended:
        found.append(("", extended))
    return found


def _container(pod: Json, entry: str, request: str) -> str:
    """Rule 4: the container of a held device."""
    containers = _items(_dig(pod, "spec", "containers"))
    if not entry:
        mappings = _items(_dig(pod, "status", "extendedResourceClaimStatus", "requestMappings"))
        for mapping in mappings:
            if _text(mapping.get("requestName")) == request.split("/")[0]:
                return _text(mapping.get("containerName"))
    for container in containers:
        for ref in _items(_dig(container, "resources", "claims")):
            if _text(ref.get("name")) == entry:
                return _text(container.get("name"))
    return _text(containers[0].get("name")) if containers else ""


def _pod_label(pod: Json) -> str:
    return f"{_dig(pod, 'metadata', 'namespace')}/{_dig(pod, 'metadata', 'name')}"


def dra_holdings(
    pods: Iterable[Json], claims: Iterable[Json], slices: Iterable[Json]
) -> DraHoldings:
    """The GPUs bound, unfinished ``pods`` hold through their claims (module docstring)."""
    problems: list[str] = []
    counts, devices = _published(slices, problems)
    by_key = {
        (_text(_dig(c, "metadata", "namespace")), _text(_dig(c, "metadata", "name"))): c
        for c in claims
    }
    held: list[DraGpuHolding] = []
    holders: set[str] = set()
    for pod in pods:
        node = _text(_dig(pod, "spec", "nodeName"))
        if not node or _dig(pod, "status", "phase") in ("Succeeded", "Failed"):
            continue
        namespace = _text(_dig(pod, "metadata", "namespace"))
        uid = _text(_dig(pod, "metadata", "uid"))
        for entry, name in claim_names(pod):
            claim = by_key.get((namespace, name))
            where = f"pod {_pod_label(pod)}: ResourceClaim {name}"
            if claim is None:
                problems.append(f"{where} not found; it holds none of its devices")
                continue
            reserved = {_text(r.get("uid")) for r in _items(_dig(claim, "status", "reservedFor"))}
            if uid not in reserved:
                problems.append(f"{where} is not reserved for it; it holds none of its devices")
                continue
            results = _items(_dig(claim, "status", "allocation", "devices", "results"))
            for result in results:
                driver = _text(result.get("driver"))
                if driver != GPU_DRIVER or result.get("adminAccess") is True:
                    continue
                device = (driver, _text(result.get("pool")), _text(result.get("device")))
                place = devices.get(device)
                if place is None or place[0] != node:
                    on = "no slice" if place is None else f"node {place[0]}"
                    problems.append(
                        f"{where}: device {'/'.join(device)} is on {on}, not on node {node}; "
                        "it is left out"
                    )
                    continue
                container = _container(pod, entry, _text(result.get("request")))
                held.append(DraGpuHolding(node, place[1], pod, container))
                holders.add(uid)
    return DraHoldings(counts, tuple(held), tuple(problems), frozenset(holders))
