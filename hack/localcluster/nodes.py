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

A spec's `gpu_api` says how its GPUs are published. `"device-plugin"` (the default): as the
`nvidia.com/gpu` capacity above. `"dra"`: through Dynamic Resource Allocation, as NVIDIA's DRA
driver does (`hack.localcluster.dra`): no `nvidia.com/gpu` capacity; `create_nodes` publishes one
ResourceSlice per node, owned by the node (so the garbage collector removes it with the node), and
applies the `gpu.nvidia.com` DeviceClass; the node also carries its NVLink domains by GPU UUID
(`gpu-scheduler.io/nvlink-domain-ids`). `delete_nodes` removes nodes and their slices;
`delete_gpu_device_class` the class once no slice of its driver is left; `temporary_nodes` holds
nodes (of either kind) for one `async with` block.

The three node types of the design (`SEED_NODE_TYPES`): G1 has 2 GPUs in one NVLink domain, G2 has
4 GPUs in two domains of 2, G2-Expansion has 8 GPUs in two domains of 4. The DRA node types
(`DRA_NODE_TYPES`, not among the seed types): D8 has 8 H200 GPUs in two domains of 4, D4 has 4
H100 GPUs in two domains of 2. A DRA spec with `shared_gpus` publishes its GPUs as devices that
allow multiple allocations, with memory as a consumable capacity (DRAConsumableCapacity): S8 is
D8 so (`SHARED_NODE_TYPES`, in no default set). A DRA spec with `mig_partitions` publishes each
GPU whole and as every MIG placement, partitionable devices sharing one counter set per GPU
(`hack.localcluster.dra_mig`: several slices per node, and the `mig.nvidia.com` DeviceClass):
M8 is D8 so (`PARTITIONED_NODE_TYPES`, in no default set).
H100 GPUs in two domains of 2.

A spec with `replicas` N >= 2 shares its GPUs as the NVIDIA device plugin's time-slicing does:
`nvidia.com/gpu` capacity GPUs x N, the labels `nvidia.com/gpu.sharing-strategy=time-slicing`,
`nvidia.com/gpu.replicas=N`, `nvidia.com/gpu.count=<GPUs>` and the product with a `-SHARED`
suffix. `SHARED_NODE_TYPES` (not among the seed types): T8 has 8 H100 GPUs x 4 replicas.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

from kubernetes_asyncio import client

from hack.localcluster import dra, dra_mig

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NVLINK_ANNOTATION = "gpu-scheduler.io/nvlink-domains"
NODE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
GPU_APIS = (DEVICE_PLUGIN, DRA)
"""The values of `NodeSpec.gpu_api`."""
FIELD_MANAGER = "gpu-scheduler-localcluster"
"""Server-side apply's field manager for the DRA objects the harness publishes."""
_APPLY: dict[str, Any] = {"_content_type": "application/apply-patch+yaml"}
"""The generated client sends a server-side apply with this content type; its type stubs do not
list `_content_type`."""


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
    gpu_api: str = DEVICE_PLUGIN
    """`"device-plugin"` or `"dra"` (see the module docstring)."""
    shared_gpus: bool = False
    """With `"dra"`: GPUs shared by capacity (`hack.localcluster.dra.shared_gpu_capacity`)."""
    replicas: int = 1
    """Time-slicing replicas per GPU (device plugin only); 1: GPUs are not shared."""
    mig_partitions: bool = False
    """With `"dra"`: every GPU also published as its MIG placements
    (`hack.localcluster.dra_mig`)."""

    def __post_init__(self) -> None:
        if self.gpu_api not in GPU_APIS:
            raise ValueError(
                f"node spec {self.type_name}: gpu_api must be one of {list(GPU_APIS)}, "
                f"got {self.gpu_api!r}"
            )
        if self.shared_gpus and self.gpu_api != DRA:
            raise ValueError(f"node spec {self.type_name}: shared_gpus needs gpu_api 'dra'")
        if self.mig_partitions and (
            self.gpu_api != DRA or self.shared_gpus or not 0 < self.gpus <= dra_mig.MAX_MIG_GPUS
        ):
            raise ValueError(
                f"node spec {self.type_name}: mig_partitions needs gpu_api 'dra', unshared GPUs "
                f"and 1..{dra_mig.MAX_MIG_GPUS} of them"
            )
        if self.replicas < 1 or (self.replicas > 1 and (self.gpu_api == DRA or self.mig)):
            raise ValueError(
                f"node spec {self.type_name}: replicas must be >= 1, and 1 on DRA or MIG nodes"
            )
        if self.gpu_api == DRA:
            self.gpu_model()  # a known product, or ValueError
            if self.mig:
                raise ValueError(f"node spec {self.type_name}: MIG is not modelled on DRA nodes")
            if not 0 < self.gpus <= dra.MAX_GPUS:
                raise ValueError(
                    f"node spec {self.type_name}: a DRA node has 1..{dra.MAX_GPUS} GPUs, "
                    f"not {self.gpus}"
                )

    @property
    def is_dra(self) -> bool:
        return self.gpu_api == DRA

    def gpu_model(self) -> dra.GpuModel:
        """The published model of a DRA node's GPUs, by `gpu_product`; ValueError naming the
        known products for another."""
        try:
            return dra.GPU_MODELS[self.gpu_product]
        except KeyError:
            raise ValueError(
                f"node spec {self.type_name}: no DRA GPU model for product {self.gpu_product!r} "
                f"(known: {sorted(dra.GPU_MODELS)})"
            ) from None

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
D8 = NodeSpec(
    "D8",
    1,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H200",
    cpu="128",
    memory="1Ti",
    gpu_api=DRA,
)
D4 = NodeSpec(
    "D4",
    1,
    gpus=4,
    nvlink_domains="0-1,2-3",
    gpu_product="NVIDIA-H100-80GB-HBM3",
    cpu="64",
    memory="512Gi",
    gpu_api=DRA,
)
DRA_NODE_TYPES: tuple[NodeSpec, ...] = (D8, D4)
"""Nodes whose GPUs are published through DRA; not in `SEED_NODE_TYPES`."""
S8 = replace(D8, type_name="S8", shared_gpus=True)
T8 = NodeSpec(
    "T8",
    1,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H100-80GB-HBM3",
    cpu="128",
    memory="1Ti",
    replicas=4,
)
SHARED_NODE_TYPES: tuple[NodeSpec, ...] = (S8, T8)
"""Nodes whose GPUs are shared: S8 by DRA capacity, T8 by the device plugin's time-slicing;
in no default set."""
M8 = replace(D8, type_name="M8", mig_partitions=True)
PARTITIONED_NODE_TYPES: tuple[NodeSpec, ...] = (M8,)
"""Nodes whose DRA GPUs are partitionable into MIG placements; in no default set."""


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
    for name in ("count", "gpus", "pods", "replicas"):
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
    }
    if not spec.is_dra:
        resources[GPU_RESOURCE] = str(spec.gpus * spec.replicas)
    for profile, count in sorted(spec.mig.items()):
        resources[f"{MIG_RESOURCE_PREFIX}{profile}"] = str(count)
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if spec.nvlink_domains is not None:
        annotations[NVLINK_ANNOTATION] = spec.nvlink_domains
        if spec.is_dra:
            annotations[dra.NVLINK_DOMAIN_IDS_ANNOTATION] = dra.nvlink_domain_ids(
                name, spec.nvlink_domains, spec.gpus
            )
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
    if spec.replicas > 1:
        labels[GPU_PRODUCT_LABEL] = f"{spec.gpu_product}-SHARED"
        labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
        labels["nvidia.com/gpu.replicas"] = str(spec.replicas)
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
    """Create every node of `specs` (an existing node of the same name is left as it is).

    For DRA specs also apply the `gpu.nvidia.com` DeviceClass (once) and each node's
    ResourceSlice, owned by the node; both by server-side apply, so calling this again for
    existing nodes publishes their slices as the spec says. Returns the node names in spec
    order."""
    nodes = [(spec, name) for spec in specs for name in spec.node_names()]
    gate = asyncio.Semaphore(concurrency)
    resource = resource_api(api)
    if any(spec.is_dra for spec, _ in nodes):
        await apply_gpu_device_class(resource)
    if any(spec.mig_partitions for spec, _ in nodes):
        await apply_mig_device_class(resource)

    async def create(spec: NodeSpec, name: str) -> None:
        async with gate:
            uid = ""
            try:
                # the client takes JSON-shaped dicts
                created = await api.create_node(cast(Any, node_manifest(spec, name)))
                uid = created.metadata.uid
            except client.ApiException as error:
                if error.status != 409:
                    raise
            if spec.is_dra:
                if not uid:
                    uid = (await api.read_node(name)).metadata.uid
                await publish_node_slice(resource, spec, name, uid)

    await asyncio.gather(*(create(spec, name) for spec, name in nodes))
    return [name for _, name in nodes]


def resource_api(api: client.CoreV1Api) -> client.ResourceV1Api:
    """A resource.k8s.io/v1 client on `api`'s connection (the stubs do not list `api_client`)."""
    return client.ResourceV1Api(cast(Any, api).api_client)


async def apply_gpu_device_class(resource: client.ResourceV1Api) -> None:
    """Server-side apply the driver's `gpu.nvidia.com` DeviceClass (idempotent)."""
    await resource.patch_device_class(
        dra.GPU_CLASS,
        dra.gpu_device_class(),
        field_manager=FIELD_MANAGER,
        force=True,
        **_APPLY,
    )


async def apply_mig_device_class(resource: client.ResourceV1Api) -> None:
    """Server-side apply the `mig.nvidia.com` DeviceClass (idempotent)."""
    await resource.patch_device_class(
        dra_mig.MIG_CLASS,
        dra_mig.mig_device_class(),
        field_manager=FIELD_MANAGER,
        force=True,
        **_APPLY,
    )


async def publish_node_slice(
    resource: client.ResourceV1Api, spec: NodeSpec, name: str, uid: str
) -> None:
    """Server-side apply the ResourceSlice(s) of DRA node `name` (UID `uid`) of `spec`."""
    if spec.mig_partitions:
        for body in dra_mig.mig_resource_slices(name, uid, spec.gpu_model(), spec.gpus):
            await resource.patch_resource_slice(
                body["metadata"]["name"], body, field_manager=FIELD_MANAGER, force=True, **_APPLY
            )
        return
    body = dra.node_resource_slice(name, uid, spec.gpu_model(), spec.gpus, spec.shared_gpus)
    await resource.patch_resource_slice(
        dra.slice_name(name), body, field_manager=FIELD_MANAGER, force=True, **_APPLY
    )


async def delete_nodes(api: client.CoreV1Api, names: Iterable[str]) -> None:
    """Delete the named nodes and every ResourceSlice published for them (`spec.nodeName`),
    without waiting for the garbage collector; names already gone are fine."""
    resource = resource_api(api)

    async def delete(name: str) -> None:
        await resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")
        try:
            await api.delete_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise

    await asyncio.gather(*(delete(name) for name in names))


async def delete_gpu_device_class(api: client.CoreV1Api) -> bool:
    """Delete the `gpu.nvidia.com` DeviceClass unless a slice of its driver is still published
    (another DRA node uses it). Returns whether the class is gone (deleted now or before)."""
    resource = resource_api(api)
    left = await resource.list_resource_slice(field_selector=f"spec.driver={dra.DRIVER}", limit=1)
    if left.items:
        return False
    for name in (dra.GPU_CLASS, dra_mig.MIG_CLASS):
        try:
            await resource.delete_device_class(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
    return True


@asynccontextmanager
async def temporary_nodes(
    api: client.CoreV1Api, specs: Sequence[NodeSpec], timeout: float = 120.0
) -> AsyncIterator[list[str]]:
    """The nodes of `specs`, created (`create_nodes`) and Ready for the block, then deleted with
    their slices (`delete_nodes`), and the DeviceClass too when no DRA node is left
    (`delete_gpu_device_class`), also when the block raises. Yields the node names."""
    names: list[str] = []
    try:
        names = await create_nodes(api, specs)
        await wait_nodes_ready(api, names, timeout)
        yield names
    finally:
        names = names or [name for spec in specs for name in spec.node_names()]
        await delete_nodes(api, names)
        if any(spec.is_dra for spec in specs):
            await delete_gpu_device_class(api)


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
