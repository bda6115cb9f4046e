"""Builders for Pod and Node JSON (the dicts the informers deliver) and small cluster helpers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import NodeInfo, PodInfo, parse_node, parse_pod
from scheduler.state.cache import ClusterCache
from topology.domains import NVLINK_DOMAINS_ANNOTATION
from topology.occupancy import GPUS_ANNOTATION

GPU = "nvidia.com/gpu"
NVLINK_POLICY = "gpu-scheduler.io/nvlink-policy"
AFFINITY = "spec.affinity.nodeAffinity"
REQUIRED = f"{AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
PREFERRED = f"{AFFINITY}.preferredDuringSchedulingIgnoredDuringExecution"

Json = dict[str, Any]


def make_container(
    name: str = "main",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    gpus: int | str | None = None,
    requests: Mapping[str, object] | None = None,
    limits: Mapping[str, object] | None = None,
) -> Json:
    """A container; `gpus` goes to limits only, as users write it (requests default to it)."""
    wanted: dict[str, object] = {}
    if cpu is not None:
        wanted["cpu"] = cpu
    if memory is not None:
        wanted["memory"] = memory
    wanted.update(requests or {})
    limited: dict[str, object] = dict(limits or {})
    if gpus:
        limited[GPU] = str(gpus)
    resources: Json = {}
    if wanted:
        resources["requests"] = wanted
    if limited:
        resources["limits"] = limited
    return {"name": name, "image": "busybox", "resources": resources}


def toleration(
    key: str = "", value: str = "", effect: str = "", operator: str | None = None
) -> Json:
    raw: Json = {}
    if key:
        raw["key"] = key
    if operator is not None:
        raw["operator"] = operator
    if value:
        raw["value"] = value
    if effect:
        raw["effect"] = effect
    return raw


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Json:
    raw: Json = {"key": key, "effect": effect}
    if value:
        raw["value"] = value
    return raw


def expr(key: str, operator: str, *values: str) -> Json:
    raw: Json = {"key": key, "operator": operator}
    if values:
        raw["values"] = list(values)
    return raw


def term(*expressions: Json, fields: Sequence[Json] = ()) -> Json:
    raw: Json = {}
    if expressions:
        raw["matchExpressions"] = list(expressions)
    if fields:
        raw["matchFields"] = list(fields)
    return raw


def node_affinity(
    required: Sequence[Json] | None = None, preferred: Sequence[tuple[object, Json]] = ()
) -> Json:
    """A pod `spec.affinity` with required terms (ORed) and weighted preferred terms."""
    affinity: Json = {}
    if required is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": list(required)
        }
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "preference": preference} for weight, preference in preferred
        ]
    return {"nodeAffinity": affinity}


def make_pod(
    name: str = "pod",
    *,
    gpus: int = 1,
    cpu: str | None = "100m",
    memory: str | None = None,
    node: str | None = None,
    namespace: str = "default",
    phase: str | None = None,
    gpu_indices: str | None = None,
    nvlink_policy: str | None = None,
    tolerations: Iterable[Json] = (),
    node_selector: Mapping[str, str] | None = None,
    affinity: Json | None = None,
    annotations: Mapping[str, str] | None = None,
    priority: object = None,
    containers: Sequence[Json] | None = None,
    init_containers: Sequence[Json] | None = None,
    overhead: Mapping[str, object] | None = None,
) -> Json:
    """A Pod's JSON; one container with `cpu`, `memory` and `gpus` unless `containers` is given."""
    notes = dict(annotations or {})
    if gpu_indices is not None:
        notes[GPUS_ANNOTATION] = gpu_indices
    if nvlink_policy is not None:
        notes[NVLINK_POLICY] = nvlink_policy
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "creationTimestamp": "2024-05-01T10:00:00Z",
    }
    if notes:
        metadata["annotations"] = notes
    spec: Json = {
        "schedulerName": "gpu-scheduler",
        "containers": list(containers)
        if containers is not None
        else [make_container(cpu=cpu, memory=memory, gpus=gpus)],
    }
    if init_containers is not None:
        spec["initContainers"] = list(init_containers)
    if overhead is not None:
        spec["overhead"] = dict(overhead)
    if node is not None:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = affinity
    pod: Json = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase is not None:
        pod["status"] = {"phase": phase}
    return pod


def make_node(
    name: str = "node",
    *,
    gpus: int | str = 8,
    domains: str | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int | str = "110",
    taints: Iterable[Json] = (),
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    mig: Mapping[str, object] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Json:
    """A Node's JSON. `domains` sets the NVLink annotation; None keeps the default layout
    (8 GPUs: "0-3,4-7")."""
    notes = dict(annotations or {})
    if domains is not None:
        notes[NVLINK_DOMAINS_ANNOTATION] = domains
    allocatable: Json = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        allocatable[GPU] = str(gpus)
    allocatable.update(mig or {})
    metadata: Json = {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
    if notes:
        metadata["annotations"] = notes
    spec: Json = {}
    if taints:
        spec["taints"] = list(taints)
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod_info(name: str = "pod", **kwargs: Any) -> PodInfo:
    return parse_pod(make_pod(name, **kwargs))


def node_info(name: str = "node", **kwargs: Any) -> NodeInfo:
    return parse_node(make_node(name, **kwargs))


def cluster(*nodes: Json, pods: Iterable[Json] = ()) -> ClusterCache:
    """A cache holding `nodes` (in order: row i is the i-th node) and then `pods`."""
    cache = ClusterCache()
    for raw in nodes:
        cache.add_or_update_node(parse_node(raw))
    for raw in pods:
        cache.add_pod(parse_pod(raw))
    return cache


def snapshot_of(*nodes: Json, pods: Iterable[Json] = ()) -> Snapshot:
    return Snapshot(cluster(*nodes, pods=pods))


def rows_named(snapshot: Snapshot, mask: Any) -> set[str]:
    """Names of the valid rows where `mask` is True."""
    return {
        snapshot.names[row] for row in range(snapshot.rows) if mask[row] and snapshot.valid[row]
    }


def rejected(plugin: Any, pod: PodInfo, snapshot: Snapshot) -> dict[str, set[str]]:
    """A filter plugin's verdict: reason -> names of the valid nodes it rejects for it."""
    from scheduler.framework.interface import CycleState

    found: dict[str, set[str]] = {}
    for rejection in plugin.filter(pod, snapshot, CycleState()):
        assert rejection.failed.shape == (snapshot.rows,)
        names = rows_named(snapshot, rejection.failed)
        if names:
            found.setdefault(rejection.reason, set()).update(names)
    return found
