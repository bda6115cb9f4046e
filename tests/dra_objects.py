"""JSON builders for Dynamic Resource Allocation objects (resource.k8s.io/v1) shaped as the API
server serves them (defaults filled in: allocationMode, count, toleration operator), shared by
the unit tests (plain data) and the integration tests (created on the API server).

The devices are modelled on NVIDIA's GPU DRA driver (driver `gpu.nvidia.com`, full GPUs
`gpu-<minor>`, the attributes and capacity of `GpuInfo.Attributes` and `fullGpuCapacity` in
kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin), built by the local cluster's
`hack.localcluster.dra` (which the fake DRA nodes publish too) from the recorded H200 and H100
values: product "NVIDIA H200", architecture Hopper, 143771 MiB of memory, driver 580.159.04
(published normalized, as the driver's semver parsing does: 580.159.4), compute capability 9.0.
Here UUIDs and PCI addresses are made up per index (every two GPUs share a PCIe root, no NUMA
node); `hack.localcluster.dra.node_resource_slice` is the whole slice of a fake node.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from hack.localcluster.dra import API_VERSION as API_VERSION
from hack.localcluster.dra import BOARD_BUSES, H100_GPU, H200_GPU, gpu_attributes, gpu_capacity
from hack.localcluster.dra import DRIVER as DRIVER
from hack.localcluster.dra import GPU_CLASS_SELECTOR as GPU_CLASS_SELECTOR
from hack.localcluster.dra import GpuModel as GpuModel

Json = dict[str, Any]

H200 = H200_GPU
H100 = H100_GPU
PCI_BUSES = BOARD_BUSES
"""Bus numbers of the eight GPUs (made up, in the style of an HGX board)."""


def gpu_uuid(index: int, node: str = "node-a") -> str:
    """A made-up, stable GPU UUID for GPU `index` of `node`."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()[:12]
    return f"GPU-{index:08x}-0000-4000-8000-{digest}"


def gpu_device(
    index: int,
    *,
    gpu: GpuModel = H200,
    node: str = "node-a",
    taints: Sequence[Json] = (),
    attributes: Mapping[str, Json] | None = None,
    capacity: Mapping[str, Json] | None = None,
    **fields: Any,
) -> Json:
    """Full GPU `gpu-<index>` as the NVIDIA driver publishes it; `attributes` and `capacity`
    are added to (or replace) the driver's, `fields` are further Device fields."""
    bus = PCI_BUSES[index % len(PCI_BUSES)]
    device: Json = {
        "name": f"gpu-{index}",
        "attributes": {
            **gpu_attributes(gpu, gpu_uuid(index, node), None),
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{bus}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 2:02x}"},
            **(attributes or {}),
        },
        "capacity": {**gpu_capacity(gpu), **(capacity or {})},
        **fields,
    }
    if taints:
        device["taints"] = list(taints)
    return device


def resource_slice(
    name: str,
    *,
    node: str | None = "node-a",
    devices: Sequence[Json] | None = None,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    **spec: Any,
) -> Json:
    """A ResourceSlice of `driver`: by default the eight GPUs of `node`, in the pool named after
    it, published with nodeName; with `node` None the node selection comes from `spec`
    (nodeSelector, allNodes, perDeviceNodeSelection, sharedCounters)."""
    body: Json = {
        "driver": driver,
        "pool": {
            "name": pool if pool is not None else (node or "pool"),
            "generation": generation,
            "resourceSliceCount": slice_count,
        },
    }
    if node is not None:
        body["nodeName"] = node
    if devices is None:
        devices = [gpu_device(i, node=node or "pool") for i in range(8)]
    if devices:
        body["devices"] = list(devices)
    body.update(spec)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def node_selector(*expressions: Json, fields: Sequence[Json] = ()) -> Json:
    """A v1 NodeSelector of one term."""
    term: Json = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeSelectorTerms": [term]}


def requirement(key: str, operator: str, *values: str) -> Json:
    found: Json = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def selectors(*expressions: str) -> list[Json]:
    return [{"cel": {"expression": expression}} for expression in expressions]


def opaque(parameters: Json | None = None, *, driver: str = DRIVER, **entry: Any) -> Json:
    """A config entry: `{opaque: {driver, parameters}}` plus `requests`/`source` from `entry`.
    The parameters default to the NVIDIA driver's GpuConfig with time-slicing."""
    params = parameters or {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    return {**entry, "opaque": {"driver": driver, "parameters": params}}


def device_class(
    name: str = DRIVER,
    *,
    expressions: Sequence[str] = (GPU_CLASS_SELECTOR,),
    extended_resource_name: str | None = None,
    config: Sequence[Json] = (),
) -> Json:
    spec: Json = {"selectors": selectors(*expressions)}
    if extended_resource_name is not None:
        spec["extendedResourceName"] = extended_resource_name
    if config:
        spec["config"] = list(config)
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def toleration(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Json:
    found: Json = {"operator": operator}
    for field, text in (("key", key), ("value", value), ("effect", effect)):
        if text:
            found[field] = text
    return found


def exact(
    device_class_name: str = DRIVER,
    *,
    count: int | None = 1,
    mode: str = "ExactCount",
    expressions: Sequence[str] = (),
    **fields: Any,
) -> Json:
    """An ExactDeviceRequest (or a firstAvailable entry, given a `name` in `fields`)."""
    found: Json = {"deviceClassName": device_class_name, "allocationMode": mode}
    if mode == "ExactCount" and count is not None:
        found["count"] = count
    if expressions:
        found["selectors"] = selectors(*expressions)
    found.update(fields)
    return found


def request(name: str, exactly: Json | None = None, *alternatives: Json) -> Json:
    """A DeviceRequest: `exactly`, or (with `exactly` None) the firstAvailable `alternatives`."""
    if exactly is not None:
        return {"name": name, "exactly": exactly}
    return {"name": name, "firstAvailable": list(alternatives)}


def claim_spec(
    *requests: Json, constraints: Sequence[Json] = (), config: Sequence[Json] = ()
) -> Json:
    devices: Json = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    if config:
        devices["config"] = list(config)
    return {"devices": devices}


def gpu_claim_spec(count: int = 2) -> Json:
    """`count` H200 GPUs under one PCIe root, time-sliced: what most tests claim."""
    return claim_spec(
        request(
            "gpus",
            exact(
                count=count,
                expressions=(f"device.attributes['{DRIVER}'].productName == 'NVIDIA H200'",),
            ),
        ),
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        config=[opaque(requests=["gpus"])],
    )


def resource_claim(
    name: str,
    namespace: str = "default",
    spec: Json | None = None,
    *,
    status: Json | None = None,
    metadata: Json | None = None,
) -> Json:
    body: Json = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, **(metadata or {})},
        "spec": copy.deepcopy(spec) if spec is not None else gpu_claim_spec(),
    }
    if status is not None:
        body["status"] = status
    return body


def claim_template(name: str, namespace: str = "default", spec: Json | None = None) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": copy.deepcopy(spec) if spec is not None else gpu_claim_spec()},
    }


def result(request_name: str, device: str, pool: str = "node-a", **fields: Any) -> Json:
    """One allocation result (DeviceRequestAllocationResult) of `DRIVER`."""
    return {"request": request_name, "driver": DRIVER, "pool": pool, "device": device, **fields}


def allocated(
    *results: Json, node: str | None = "node-a", reserved_for: Sequence[Json] = (), **extra: Any
) -> Json:
    """A claim status: an allocation of `results`, node-local to `node` (as the allocator
    writes it for node-local devices), with the claim's config copied FromClaim."""
    allocation: Json = {
        "devices": {
            "results": list(results),
            "config": [opaque(requests=["gpus"], source="FromClaim")],
        },
        **extra,
    }
    if node is not None:
        allocation["nodeSelector"] = node_selector(
            fields=[requirement("metadata.name", "In", node)]
        )
    status: Json = {"allocation": allocation}
    if reserved_for:
        status["reservedFor"] = list(reserved_for)
    return status


def pod_ref(name: str, uid: str) -> Json:
    """A reservedFor entry for a pod."""
    return {"resource": "pods", "name": name, "uid": uid}


def taint(key: str, effect: str = "NoSchedule", value: str = "", **extra: Any) -> Json:
    found: Json = {"key": key, "effect": effect, **extra}
    if value:
        found["value"] = value
    return found


def taint_rule(name: str, taint_json: Json | None, **selector: str) -> Json:
    """A DeviceTaintRule; `selector` None-free fields driver, pool, device (no keyword at all:
    the empty selector, which selects every device)."""
    spec: Json = {"deviceSelector": dict(selector)}
    if taint_json is not None:
        spec["taint"] = taint_json
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod_with_claims(
    name: str,
    claims: Sequence[Json],
    statuses: Sequence[Json] = (),
    namespace: str = "default",
) -> Json:
    """A pod whose spec.resourceClaims are `claims`, with status.resourceClaimStatuses."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": list(claims),
        },
        "status": {"phase": "Pending", "resourceClaimStatuses": list(statuses)},
    }


def claim_pod(
    name: str,
    claims: Mapping[str, str],
    *,
    scheduler_name: str = "gpu-scheduler",
    templates: bool = True,
) -> Json:
    """A pod to create on the API server whose one container uses every claim of `claims`
    (pod claim name -> ResourceClaimTemplate name, or with `templates` False ResourceClaim
    name), scheduled by `scheduler_name`."""
    source = "resourceClaimTemplateName" if templates else "resourceClaimName"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": claim, source: target} for claim, target in claims.items()],
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda-job:1",
                    "resources": {"claims": [{"name": claim} for claim in claims]},
                }
            ],
        },
    }


def changed(obj: Json, path: Sequence[str | int], value: Any) -> Json:
    """A deep copy of `obj` with the value at `path` replaced by `value` (`DELETE` removes
    it); missing objects on the way are created."""
    found = copy.deepcopy(obj)
    here: Any = found
    for step in path[:-1]:
        if isinstance(here, dict) and step not in here:
            here[step] = {}
        here = here[step]
    if value is DELETE:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return found


DELETE = object()
"""`changed`'s marker for removing a field."""
