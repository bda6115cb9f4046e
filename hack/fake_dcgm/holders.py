"""Which pod holds which GPU (or MIG instance) on each fake node: a pure function of API objects.

Inputs are plain dicts shaped like Kubernetes JSON (camelCase keys). :func:`assign` never raises
on odd objects; everything it could not honour is returned in ``Assignment.problems`` for the
caller to log.

Whole GPUs, per node:

1. A pod annotated ``gpu-scheduler.io/gpus: "0,1"`` holds exactly those indices. Two pods may
   name the same index: both hold it (time-sliced sharing). The annotation is ignored, with a
   problem reported, when an index is not an integer, is not a whole GPU of the node, is listed
   twice, or the count differs from the pod's ``nvidia.com/gpu`` request; the pod then falls to
   rule 2.
2. Other pods take the lowest indices no holder uses yet, in order of creationTimestamp, then
   namespace and name. The count is the sum over containers of the ``nvidia.com/gpu`` limit (or
   the request when no limit is set). A pod that does not fit holds nothing (problem reported).

Only bound pods (``spec.nodeName``) that have not finished (phase not Succeeded / Failed) hold
anything. The ``container`` of a holder is the first container asking for the resource.

DRA (:mod:`hack.fake_dcgm.dra_holders`): a kwok node without ``nvidia.com/gpu`` capacity whose
ResourceSlices publish N devices of driver ``gpu.nvidia.com`` has whole GPUs 0..N-1; there the
rules above do not apply (an ``nvidia.com/gpu`` request is an extended resource served through
the pod's claim), and a pod holds exactly the GPUs of the allocated devices of its claims
reserved for it. A node with ``nvidia.com/gpu`` capacity keeps the rules above, and the DRA
GPUs its pods hold are added to the indices they name.

Time-slicing and MPS (the device plugin's replicas): a node labelled
``nvidia.com/gpu.sharing-strategy`` ``time-slicing`` or ``mps`` with ``nvidia.com/gpu.replicas``
N >= 2 advertises N replicas of each GPU as ``nvidia.com/gpu`` (or ``nvidia.com/gpu.shared``);
its whole GPUs are the physical ones, ``nvidia.com/gpu.count`` of them (else the capacity / N).
A pod asking for R replicas holds R distinct GPUs: those its annotation names (rule 1, each GPU
holding at most N pods), else the GPUs with the fewest holders, lowest index first (the
plugin's default ``distributed`` policy). Every holder of a shared GPU gets the GPU's series
(``--kubernetes-virtual-gpus``: one copy per pod, all with the GPU's value); on a node annotated
``fake-dcgm.gpu-scheduler.io/per-process: "true"`` the utilization of a GPU held by several pods
is attributed per process instead (:mod:`hack.fake_dcgm.render`). The ``-SHARED``
suffix GPU feature discovery appends to the product label is not part of the model name.

MIG: capacity ``nvidia.com/mig-<profile>: N`` puts N instances of that profile on one physical
GPU whose index is the node annotation ``fake-dcgm.gpu-scheduler.io/mig-gpu`` (default: the
``nvidia.com/gpu`` capacity, i.e. one GPU after the whole ones). Whole GPUs take the lowest
indices other than the MIG GPU. Instances get GPU_I_ID 1, 2, ... consecutively over the
profiles in name order; pods asking for ``nvidia.com/mig-<profile>`` get the lowest free
instances of that profile in creation order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hack.fake_dcgm.dra_holders import DraHoldings, dra_holdings
from hack.fake_dcgm.faults import GpuFaults, node_faults
from hack.fake_dcgm.usage import FB_USED_ANNOTATION, USAGE_ANNOTATION

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
GPUS_ANNOTATION = "gpu-scheduler.io/gpus"
MIG_GPU_ANNOTATION = "fake-dcgm.gpu-scheduler.io/mig-gpu"
PROFILING_ANNOTATION = "fake-dcgm.gpu-scheduler.io/profiling"
PER_PROCESS_ANNOTATION = "fake-dcgm.gpu-scheduler.io/per-process"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
SHARED_SUFFIX = "-SHARED"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
MAX_GPU_INDEX = 1023
_DIGITS = re.compile(r"[0-9]{1,9}")

Json = Mapping[str, Any]


@dataclass(frozen=True)
class Holder:
    """One pod's claim on a GPU or MIG instance, with what the metrics need from the pod."""

    namespace: str
    pod: str
    container: str
    uid: str
    start_time: float  # epoch seconds: status.startTime, else metadata.creationTimestamp
    usage: str | None  # fake-dcgm.gpu-scheduler.io/usage text, if any
    fb_used: str | None  # fake-dcgm.gpu-scheduler.io/fb-used-mib text, if any


@dataclass(frozen=True)
class Gpu:
    """A whole GPU and the pods holding it (empty: nobody; several: time-sliced)."""

    index: int
    holders: tuple[Holder, ...]


@dataclass(frozen=True)
class MigInstance:
    """One MIG GPU instance living on physical GPU ``gpu_index``."""

    gpu_index: int
    profile: str  # e.g. "1g.18gb"
    instance_id: int  # GPU_I_ID
    holder: Holder | None


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs of one node and who holds them."""

    name: str
    product: str | None  # nvidia.com/gpu.product label
    profiling: bool  # fake-dcgm.gpu-scheduler.io/profiling == "true"
    gpus: tuple[Gpu, ...]  # whole GPUs, by index
    mig_gpu_index: int | None  # physical GPU hosting the MIG instances, if any
    mig: tuple[MigInstance, ...]
    per_process: bool = False  # fake-dcgm.gpu-scheduler.io/per-process == "true"
    faults: Mapping[int, GpuFaults] = field(default_factory=dict)
    """Injected Xid / ECC faults by GPU index (`hack.fake_dcgm.faults`)."""


@dataclass(frozen=True)
class Assignment:
    """Result of :func:`assign`: per node GPUs, plus what could not be honoured."""

    nodes: tuple[NodeGpus, ...]
    problems: tuple[str, ...]


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _str_map(obj: Any) -> dict[str, str]:
    if not isinstance(obj, Mapping):
        return {}
    return {str(k): v for k, v in obj.items() if isinstance(v, str)}


def _count(value: Any) -> int | None:
    """A non-negative integer quantity, or None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def is_fake_gpu_node(node: Json, dra_nodes: Iterable[str] = ()) -> bool:
    """True for a kwok fake node (``kwok.x-k8s.io/node: fake``) with nonzero GPU or MIG capacity,
    or among ``dra_nodes`` (those with GPUs published through DRA)."""
    if _str_map(_dig(node, "metadata", "annotations")).get(KWOK_ANNOTATION) != "fake":
        return False
    if _dig(node, "metadata", "name") in set(dra_nodes):
        return True
    capacity = _str_map(_dig(node, "status", "capacity"))
    return any(
        (k in (GPU_RESOURCE, SHARED_RESOURCE) or k.startswith(MIG_PREFIX)) and (_count(v) or 0) > 0
        for k, v in capacity.items()
    )


@dataclass(frozen=True)
class Sharing:
    """A node's time-sliced (or MPS) GPUs: `replicas` per GPU, advertised as `resource`."""

    replicas: int
    gpus: int
    resource: str


def node_sharing(node: Json) -> Sharing | None:
    """The node's sharing from its labels and capacity (module docstring), None without."""
    labels = _str_map(_dig(node, "metadata", "labels"))
    replicas = _count(labels.get(REPLICAS_LABEL))
    if labels.get(STRATEGY_LABEL) not in ("time-slicing", "mps") or (replicas or 0) < 2:
        return None
    assert replicas is not None
    capacity = _str_map(_dig(node, "status", "capacity"))
    shared = (_count(capacity.get(SHARED_RESOURCE)) or 0) > 0
    resource = SHARED_RESOURCE if shared else GPU_RESOURCE
    gpus = _count(labels.get(COUNT_LABEL)) or -(-(_count(capacity.get(resource)) or 0) // replicas)
    return Sharing(replicas, min(gpus, MAX_GPU_INDEX), resource)


def _pod_label(pod: Json) -> str:
    return f"{_dig(pod, 'metadata', 'namespace')}/{_dig(pod, 'metadata', 'name')}"


def _containers(pod: Json) -> list[Json]:
    containers = _dig(pod, "spec", "containers")
    if not isinstance(containers, list):
        return []
    return [c for c in containers if isinstance(c, Mapping)]


def _requested(container: Json, resource: str) -> int:
    for section in ("limits", "requests"):
        value = _dig(container, "resources", section, resource)
        if value is not None:
            return _count(value) or 0
    return 0


def _request(pod: Json, resource: str) -> tuple[int, str]:
    """(total count of ``resource`` over containers, name of the first container asking)."""
    total, first = 0, ""
    for container in _containers(pod):
        n = _requested(container, resource)
        if n > 0 and not first:
            first = str(container.get("name", ""))
        total += n
    return total, first


def _holder(pod: Json, container: str) -> Holder:
    annotations = _str_map(_dig(pod, "metadata", "annotations"))
    start = _timestamp(_dig(pod, "status", "startTime"))
    if start is None:
        start = _timestamp(_dig(pod, "metadata", "creationTimestamp")) or 0.0
    return Holder(
        namespace=str(_dig(pod, "metadata", "namespace") or ""),
        pod=str(_dig(pod, "metadata", "name") or ""),
        container=container,
        uid=str(_dig(pod, "metadata", "uid") or ""),
        start_time=start,
        usage=annotations.get(USAGE_ANNOTATION),
        fb_used=annotations.get(FB_USED_ANNOTATION),
    )


def _creation_order(pod: Json) -> tuple[float, str, str]:
    created = _timestamp(_dig(pod, "metadata", "creationTimestamp"))
    return (
        created if created is not None else 0.0,
        str(_dig(pod, "metadata", "namespace") or ""),
        str(_dig(pod, "metadata", "name") or ""),
    )


def _annotated_indices(
    pod: Json, whole: Sequence[int], want: int, problems: list[str]
) -> list[int] | None:
    text = _str_map(_dig(pod, "metadata", "annotations")).get(GPUS_ANNOTATION)
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    reason = ""
    if not all(_DIGITS.fullmatch(p) for p in parts):
        reason = "is not a comma-separated list of integers"
    else:
        indices = [int(p) for p in parts]
        if any(i not in whole for i in indices):
            reason = f"names an index outside the node's whole GPUs {list(whole)}"
        elif len(set(indices)) != len(indices):
            reason = "lists an index twice"
        elif len(indices) != want:
            reason = f"names {len(indices)} GPUs but the pod requests {want}"
        else:
            return indices
    problems.append(
        f"pod {_pod_label(pod)}: annotation {GPUS_ANNOTATION}={text!r} {reason}; "
        "using the lowest free GPUs instead"
    )
    return None


def _node_layout(node: Json, problems: list[str]) -> tuple[list[int], int | None, list[str]]:
    """(whole GPU indices, MIG GPU index or None, MIG profile names in order with repeats)."""
    name = _dig(node, "metadata", "name")
    capacity = _dig(node, "status", "capacity")
    capacity = capacity if isinstance(capacity, Mapping) else {}
    sharing = node_sharing(node)
    if sharing is not None:
        return list(range(sharing.gpus)), None, []
    gpu_count = _count(capacity.get(GPU_RESOURCE, 0))
    if gpu_count is None:
        problems.append(f"node {name}: {GPU_RESOURCE} capacity {capacity[GPU_RESOURCE]!r} ignored")
        gpu_count = 0
    slots: list[str] = []
    for key in sorted(k for k in capacity if isinstance(k, str) and k.startswith(MIG_PREFIX)):
        slots.extend([key.removeprefix(MIG_PREFIX)] * (_count(capacity[key]) or 0))
    gpu_count = min(gpu_count, MAX_GPU_INDEX)
    if not slots:
        return list(range(gpu_count)), None, []
    mig_index = gpu_count
    text = _str_map(_dig(node, "metadata", "annotations")).get(MIG_GPU_ANNOTATION)
    if text is not None:
        parsed = _count(text)
        if parsed is None or parsed > MAX_GPU_INDEX:
            problems.append(
                f"node {name}: annotation {MIG_GPU_ANNOTATION}={text!r} is not an index "
                f"in 0..{MAX_GPU_INDEX}; using {gpu_count}"
            )
        else:
            mig_index = parsed
    whole = [i for i in range(gpu_count + 1) if i != mig_index][:gpu_count]
    return whole, mig_index, slots


def _assign_whole(
    whole: list[int], pods: list[Json], problems: list[str], sharing: Sharing | None = None
) -> dict[int, list[Holder]]:
    held: dict[int, list[Holder]] = {i: [] for i in whole}
    fallback: list[tuple[Json, int, str]] = []
    resource, room = (sharing.resource, sharing.replicas) if sharing else (GPU_RESOURCE, 1)
    for pod in pods:
        want, container = _request(pod, resource)
        if want == 0:
            continue
        indices = _annotated_indices(pod, whole, want, problems)
        if indices is not None and sharing and any(len(held[i]) >= room for i in indices):
            problems.append(f"pod {_pod_label(pod)}: a GPU it names has no free replica")
            indices = None
        if indices is None:
            fallback.append((pod, want, container))
            continue
        for i in indices:
            held[i].append(_holder(pod, container))
    for pod, want, container in fallback:
        free = [i for i in whole if len(held[i]) < room]
        free.sort(key=lambda i: len(held[i]))  # stable: fewest holders, then lowest index
        if len(free) < want:
            problems.append(
                f"pod {_pod_label(pod)}: requests {want} GPUs but only {len(free)} are free; "
                "it holds none"
            )
            continue
        for i in free[:want]:
            held[i].append(_holder(pod, container))
    return held


def _assign_mig(
    mig_index: int, slots: list[str], pods: list[Json], problems: list[str]
) -> list[MigInstance]:
    holders: list[Holder | None] = [None] * len(slots)
    for profile in sorted(set(slots)):
        resource = MIG_PREFIX + profile
        free = [n for n, p in enumerate(slots) if p == profile]
        for pod in pods:
            want, container = _request(pod, resource)
            if want == 0:
                continue
            if want > len(free):
                problems.append(
                    f"pod {_pod_label(pod)}: requests {want} {resource} but only {len(free)} "
                    "are free; it holds none"
                )
                continue
            take, free = free[:want], free[want:]
            for n in take:
                holders[n] = _holder(pod, container)
    return [
        MigInstance(mig_index, profile, n + 1, holder)
        for n, (profile, holder) in enumerate(zip(slots, holders, strict=True))
    ]


def _bound_pods(pods: Iterable[Json]) -> dict[str, list[Json]]:
    by_node: dict[str, list[Json]] = {}
    for pod in pods:
        node = _dig(pod, "spec", "nodeName")
        if not isinstance(node, str) or not node:
            continue
        if _dig(pod, "status", "phase") in FINISHED_PHASES:
            continue
        by_node.setdefault(node, []).append(pod)
    for node_pods in by_node.values():
        node_pods.sort(key=_creation_order)
    return by_node


def _add_dra(name: str, held: dict[int, list[Holder]], dra: DraHoldings) -> None:
    """The GPUs pods of node ``name`` hold through their claims, added to ``held``."""
    for holding in dra.held:
        if holding.node == name and holding.index in held:
            holder = _holder(holding.pod, holding.container)
            if holder not in held[holding.index]:
                held[holding.index].append(holder)


def assign(
    nodes: Iterable[Json],
    pods: Iterable[Json],
    claims: Iterable[Json] = (),
    slices: Iterable[Json] = (),
) -> Assignment:
    """Decide GPU and MIG holders on every node with GPU capacity or DRA GPUs (see module
    docstring); ``claims`` and ``slices`` are ResourceClaims and ResourceSlices."""
    pods = list(pods)
    dra = dra_holdings(pods, claims, slices)
    problems: list[str] = list(dra.problems)
    by_node = _bound_pods(pods)
    result: list[NodeGpus] = []
    for node in sorted(nodes, key=lambda n: str(_dig(n, "metadata", "name") or "")):
        name = str(_dig(node, "metadata", "name") or "")
        whole, mig_index, slots = _node_layout(node, problems)
        node_pods = by_node.get(name, [])
        device_plugin = bool(whole)
        if not whole and dra.gpu_counts.get(name):
            whole = list(range(dra.gpu_counts[name]))
        if not whole and mig_index is None:
            continue
        sharing = node_sharing(node)
        held = _assign_whole(whole, node_pods if device_plugin else [], problems, sharing)
        _add_dra(name, held, dra)
        mig = _assign_mig(mig_index, slots, node_pods, problems) if mig_index is not None else []
        annotations = _str_map(_dig(node, "metadata", "annotations"))
        faults = node_faults(name, annotations, problems)
        product = _str_map(_dig(node, "metadata", "labels")).get(PRODUCT_LABEL)
        if product is not None and sharing is not None:
            product = product.removesuffix(SHARED_SUFFIX)
        result.append(
            NodeGpus(
                name=name,
                product=product,
                profiling=annotations.get(PROFILING_ANNOTATION, "").lower() == "true",
                gpus=tuple(Gpu(i, tuple(held[i])) for i in whole),
                mig_gpu_index=mig_index,
                mig=tuple(mig),
                per_process=annotations.get(PER_PROCESS_ANNOTATION, "").lower() == "true",
                faults={i: f for i, f in faults.items() if i in whole},
            )
        )
    return Assignment(tuple(result), tuple(problems))
