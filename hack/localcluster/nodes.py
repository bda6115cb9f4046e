"""Fake GPU nodes for the local control plane, described by `NodeSpec`.

A node created from a spec carries everything gpu-scheduler and the fake dcgm-exporter read:

- capacity and allocatable for cpu, memory, pods, ephemeral-storage, `nvidia.com/gpu` and any
  `nvidia.com/mig-<profile>` resources;
- the labels NVIDIA's GPU feature discovery sets (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`)
  and `node.kubernetes.io/instance-type` set to the spec's type name;
- the NVLink domain annotation `gpu-scheduler.io/nvlink-domains` (e.g. "0-3,4-7") when the spec
  gives one;
- the annotation `kwok.x-k8s.io/node: fake`, which hands the node to the kwok controller: it marks
  the node Ready, keeps its lease, and runs the pods bound to it.

The three node types of the design (`SEED_NODE_TYPES`): G1 has 2 GPUs in one NVLink domain, G2 has
4 GPUs in two domains of 2, G2-Expansion has 8 GPUs in two domains of 4.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from kubernetes_asyncio import client

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NVLINK_ANNOTATION = "gpu-scheduler.io/nvlink-domains"
NODE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True)
class NodeSpec:
    """A group of identical fake GPU nodes, named `<type_name lowercased>-<index>`."""

    type_name: str
    count: int
    gpus: int
    nvlink_domains: str | None
    gpu_product: str
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    ephemeral_storage: str = "1Ti"
    mig: Mapping[str, int] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def with_count(self, count: int) -> NodeSpec:
        return replace(self, count=count)

    def node_names(self, start: int = 0) -> list[str]:
        prefix = self.type_name.lower()
        return [f"{prefix}-{index}" for index in range(start, start + self.count)]


G1 = NodeSpec(
    "G1",
    1,
    gpus=2,
    nvlink_domains="0-1",
    gpu_product="NVIDIA-A100-SXM4-80GB",
    cpu="32",
    memory="256Gi",
)
G2 = NodeSpec(
    "G2",
    1,
    gpus=4,
    nvlink_domains="0-1,2-3",
    gpu_product="NVIDIA-H100-80GB-HBM3",
    cpu="64",
    memory="512Gi",
)
G2_EXPANSION = NodeSpec(
    "G2-Expansion",
    1,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H200",
    cpu="128",
    memory="1Ti",
)
SEED_NODE_TYPES: tuple[NodeSpec, ...] = (G1, G2, G2_EXPANSION)


def spec_from_mapping(raw: Mapping[str, Any]) -> NodeSpec:
    """Build a NodeSpec from YAML-shaped data, with an error naming the field that is wrong."""
    known = {f for f in NodeSpec.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(
            f"node spec {raw.get('type_name', '?')}: unknown field(s) {sorted(unknown)}"
        )
    for required in ("type_name", "count", "gpus", "gpu_product"):
        if required not in raw:
            raise ValueError(f"node spec {raw.get('type_name', '?')}: missing field {required!r}")
    values = dict(raw)
    values.setdefault("nvlink_domains", None)
    for name in ("count", "gpus", "pods"):
        if name in values and (not isinstance(values[name], int) or values[name] < 0):
            raise ValueError(
                f"node spec {values['type_name']}: field {name!r} must be a non-negative integer, "
                f"got {values[name]!r}"
            )
    values["taints"] = tuple(values.get("taints", ()))
    return NodeSpec(**values)


def node_manifest(spec: NodeSpec, name: str) -> dict[str, Any]:
    """The Node object for one node of `spec`, status included (kwok keeps it)."""
    resources: dict[str, str] = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.ephemeral_storage,
        GPU_RESOURCE: str(spec.gpus),
    }
    for profile, count in sorted(spec.mig.items()):
        resources[f"{MIG_RESOURCE_PREFIX}{profile}"] = str(count)
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if spec.nvlink_domains is not None:
        annotations[NVLINK_ANNOTATION] = spec.nvlink_domains
    annotations.update(spec.annotations)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        NODE_TYPE_LABEL: spec.type_name,
        GPU_PRODUCT_LABEL: spec.gpu_product,
        GPU_COUNT_LABEL: str(spec.gpus),
    }
    labels.update(spec.labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": [dict(taint) for taint in spec.taints]},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
            },
        },
    }


async def create_nodes(
    api: client.CoreV1Api, specs: Iterable[NodeSpec], concurrency: int = 32
) -> list[str]:
    """Create every node of `specs` (an existing node of the same name is left as it is)."""
    manifests = [node_manifest(spec, name) for spec in specs for name in spec.node_names()]
    gate = asyncio.Semaphore(concurrency)

    async def create(manifest: dict[str, Any]) -> None:
        async with gate:
            try:
                await api.create_node(cast(Any, manifest))  # the client takes JSON-shaped dicts
            except client.ApiException as error:
                if error.status != 409:
                    raise

    await asyncio.gather(*(create(manifest) for manifest in manifests))
    return [manifest["metadata"]["name"] for manifest in manifests]


def node_is_ready(node: Any) -> bool:
    """Ready condition True and no not-ready taint left (so pods can be scheduled on it)."""
    conditions = (node.status.conditions or []) if node.status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    taints = node.spec.taints or [] if node.spec else []
    return ready and not any(t.key == NOT_READY_TAINT for t in taints)


async def wait_nodes_ready(
    api: client.CoreV1Api, names: Sequence[str], timeout: float = 120.0
) -> None:
    """Wait until every named node is Ready and untainted; TimeoutError names the laggards."""
    wanted = set(names)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    not_ready = wanted
    while loop.time() < deadline:
        nodes = await api.list_node(label_selector="type=kwok")
        ready = {node.metadata.name for node in nodes.items if node_is_ready(node)}
        not_ready = wanted - ready
        if not not_ready:
            return
        await asyncio.sleep(0.5)
    sample = ", ".join(sorted(not_ready)[:5])
    raise TimeoutError(f"{len(not_ready)} node(s) not Ready after {timeout:.0f} s: {sample}")
