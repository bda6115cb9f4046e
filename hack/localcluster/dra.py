"""GPUs published through Dynamic Resource Allocation (resource.k8s.io/v1) on fake nodes: the
ResourceSlice of one node and the `gpu.nvidia.com` DeviceClass, as JSON. Pure: no I/O.

What is modelled on what (kubernetes-sigs/dra-driver-nvidia-gpu, the GPU kubelet plugin):

- driver `gpu.nvidia.com`; one pool per node, named after the node, generation 1, one slice
  (`resourceSliceCount` 1), `nodeName` set, owned by the Node (`controller: true`), as the
  resourceslice controller of k8s.io/dynamic-resource-allocation@v0.37.2
  (resourceslice/resourceslicecontroller.go) publishes a kubelet plugin's pool. That controller
  names a slice `<index>-<driver>-<node>-` plus a random suffix; here the name is the same
  without the suffix (`slice_name`), so publishing again is idempotent.
- devices `gpu-<minor>` (`GpuInfo.CanonicalName`, cmd/gpu-kubelet-plugin/deviceinfo.go), minor
  numbers 0..N-1;
- attributes of a full GPU (`GpuInfo.Attributes`, same file): `type` "gpu", `uuid`,
  `productName`, `brand`, `architecture`, `cudaComputeCapability`, `driverVersion` and
  `cudaDriverVersion` (versions, normalized by semver parsing: "580.159.04" is published as
  "580.159.4", "9.0" as "9.0.0"), `addressingMode`, `resource.kubernetes.io/pciBusID`,
  `resource.kubernetes.io/pcieRoot` and `resource.kubernetes.io/numaNode` (an int; the driver
  publishes no unqualified `numaNode`, and the list form only with the alpha
  DRAListTypeAttributes gate);
- capacity `memory`: the GPU's total memory as a binary quantity (`fullGpuCapacity`,
  cmd/gpu-kubelet-plugin/partitions.go).

Shared GPUs (`shared=True`, DRAConsumableCapacity): each GPU is published once with
`allowMultipleAllocations: true` and its `memory` as a consumable capacity (`shared_gpu_capacity`):
shares from 1Gi in steps of 1Gi, and a request that names no memory takes the default, the
largest step within the GPU's memory (140Gi of an H200's 143771Mi), so a plain request for a GPU
still gets it whole while requests for `capacity.requests.memory` share it.

Values come from real recordings (tests/data/h200/, tests/data/h100/, checked by
tests/unit/test_localcluster_dra.py): product, brand, architecture, memory, driver and CUDA
versions, addressing mode. Not in the recordings and taken as NVML reports them: the brand string
is NVML's name for the brand (`Nvidia`, go-nvlib `GetBrandAsString`), compute capability 9.0 for
Hopper. Made up, in the style of an 8-GPU HGX board: PCI bus numbers (`BOARD_BUSES`), PCIe roots
(two GPUs per root), NUMA nodes (the first half of the board on node 0). UUIDs are the fake
dcgm-exporter's (`hack.fake_dcgm.identity.gpu_uuid`: a UUIDv5 of `<node>/<index>`), so a metric's
UUID names the same GPU as the slice's.

The DeviceClass is the driver's Helm chart's (deployments/helm/dra-driver-nvidia-gpu/templates/
deviceclass-gpu.yaml): `gpu.nvidia.com`, selecting full GPUs, with `extendedResourceName:
nvidia.com/gpu` (so pods asking for `nvidia.com/gpu` get a claim on a node without the device
plugin).

The NVLink domains of a DRA node are also written by GPU UUID
(`NVLINK_DOMAIN_IDS_ANNOTATION`: domains separated by `;`, UUIDs in a domain by `,`), built from
the spec's index groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hack.fake_dcgm.identity import gpu_uuid
from topology.domains import parse_domains

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
"""The DeviceClass of full GPUs (named like the driver)."""
GPU_CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
EXTENDED_RESOURCE = "nvidia.com/gpu"
NVLINK_DOMAIN_IDS_ANNOTATION = "gpu-scheduler.io/nvlink-domain-ids"
"""Node annotation: NVLink domains by GPU UUID, e.g. `GPU-a,GPU-b;GPU-c,GPU-d`."""
DOMAIN_SEPARATOR = ";"
ID_SEPARATOR = ","
MAX_GPUS = 128
"""At most this many devices in one slice (ResourceSliceMaxDevices, k8s.io/api@v0.37.2
resource/v1/types.go); a node has one slice."""


@dataclass(frozen=True)
class GpuModel:
    """What the driver reads from NVML about one GPU model, as it publishes it."""

    product_name: str
    architecture: str
    memory_mib: int
    cuda_compute_capability: str
    driver_version: str
    """Normalized semver: leading zeros dropped."""
    cuda_driver_version: str
    brand: str = "Nvidia"
    addressing_mode: str | None = "None"
    """None when NVML does not support the query (the driver then omits the attribute)."""


H200_GPU = GpuModel(
    product_name="NVIDIA H200",
    architecture="Hopper",
    memory_mib=143771,
    cuda_compute_capability="9.0.0",
    driver_version="580.159.4",
    cuda_driver_version="13.0.0",
)
"""tests/data/h200/nvidia-smi-q.xml and nvidia-smi-query.csv (driver 580.159.04, CUDA 13.0)."""
H100_GPU = GpuModel(
    product_name="NVIDIA H100 80GB HBM3",
    architecture="Hopper",
    memory_mib=81559,
    cuda_compute_capability="9.0.0",
    driver_version="580.159.4",
    cuda_driver_version="13.0.0",
)
"""tests/data/h100/nvidia-smi.txt (driver 580.159.04, CUDA 13.0)."""

GPU_MODELS: dict[str, GpuModel] = {
    "NVIDIA-H200": H200_GPU,
    "NVIDIA-H100-80GB-HBM3": H100_GPU,
}
"""By the `nvidia.com/gpu.product` label a `NodeSpec` gives (GPU feature discovery's spelling)."""

BOARD_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
"""PCI bus numbers of the eight GPU slots of a board (made up, HGX style)."""
BOARD_ROOTS = ("15", "37", "97", "b7")
"""Root bus of each pair of slots, below the pair's own bus numbers."""
BOARD_SLOTS = len(BOARD_BUSES)


@dataclass(frozen=True)
class GpuPlacement:
    """Where one GPU sits: its PCI address, PCIe root and NUMA node."""

    pci_bus_id: str
    """`dddd:bb:dd.f`, lower case, as `resource.kubernetes.io/pciBusID` holds it."""
    pcie_root: str
    """`pci<domain>:<root bus>`, as sysfs names a root complex."""
    numa_node: int


def gpu_placement(index: int, gpu_count: int) -> GpuPlacement:
    """The slot of GPU `index` of `gpu_count`: up to eight GPUs are spread over one board's
    slots (4 GPUs take slots 0, 2, 4, 6), more fill further boards, each its own PCI domain.
    Distinct addresses for distinct indices of one node."""
    if not 0 <= index < gpu_count <= MAX_GPUS:
        raise ValueError(f"GPU {index} of {gpu_count}: need 0 <= index < count <= {MAX_GPUS}")
    if gpu_count <= BOARD_SLOTS:
        board, slot = 0, index * (BOARD_SLOTS // _board_size(gpu_count))
    else:
        board, slot = divmod(index, BOARD_SLOTS)
    return GpuPlacement(
        pci_bus_id=f"{board:04x}:{BOARD_BUSES[slot]}:00.0",
        pcie_root=f"pci{board:04x}:{BOARD_ROOTS[slot // 2]}",
        numa_node=slot * 2 // BOARD_SLOTS,
    )


def _board_size(gpu_count: int) -> int:
    """The power of two >= `gpu_count` (at most a board), so slots are spaced evenly."""
    size = 1
    while size < gpu_count:
        size *= 2
    return size


def gpu_attributes(model: GpuModel, uuid: str, placement: GpuPlacement | None) -> Json:
    """The attributes of a full GPU (`deviceinfo.go` `GpuInfo.Attributes`); `placement` None
    leaves out the PCI and NUMA attributes."""
    attributes: Json = {
        "type": {"string": "gpu"},
        "uuid": {"string": uuid},
        "productName": {"string": model.product_name},
        "brand": {"string": model.brand},
        "architecture": {"string": model.architecture},
        "cudaComputeCapability": {"version": model.cuda_compute_capability},
        "driverVersion": {"version": model.driver_version},
        "cudaDriverVersion": {"version": model.cuda_driver_version},
    }
    if placement is not None:
        attributes["resource.kubernetes.io/pciBusID"] = {"string": placement.pci_bus_id}
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": placement.pcie_root}
        attributes["resource.kubernetes.io/numaNode"] = {"int": placement.numa_node}
    if model.addressing_mode is not None:
        attributes["addressingMode"] = {"string": model.addressing_mode}
    return attributes


def gpu_capacity(model: GpuModel) -> Json:
    return {"memory": {"value": f"{model.memory_mib}Mi"}}


SHARE_STEP_MIB = 1024
"""Memory shares of a shared GPU: at least, and in steps of, 1Gi."""


def whole_share_gib(model: GpuModel) -> int:
    """What a request that names no memory consumes of a shared GPU, in Gi: the largest step
    within its memory."""
    return model.memory_mib // SHARE_STEP_MIB


def shared_gpu_capacity(model: GpuModel) -> Json:
    """`memory` of a shared GPU as a consumable capacity (see the module docstring)."""
    return {
        "memory": {
            "value": f"{model.memory_mib}Mi",
            "requestPolicy": {
                "default": f"{whole_share_gib(model)}Gi",
                "validRange": {"min": "1Gi", "step": "1Gi"},
            },
        }
    }


def node_gpu_device(
    model: GpuModel, node: str, index: int, gpu_count: int, shared: bool = False
) -> Json:
    """GPU `gpu-<index>` of `node` (which has `gpu_count` GPUs) as the driver publishes it;
    `shared`: as a device that allows multiple allocations."""
    placement = gpu_placement(index, gpu_count)
    device: Json = {
        "name": f"gpu-{index}",
        "attributes": gpu_attributes(model, gpu_uuid(node, index), placement),
        "capacity": shared_gpu_capacity(model) if shared else gpu_capacity(model),
    }
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def slice_name(node: str) -> str:
    """The name of `node`'s slice: the resourceslice controller's `<index>-<driver>-<owner>`."""
    return f"0-{DRIVER}-{node}"


def node_resource_slice(
    node: str, node_uid: str, model: GpuModel, gpu_count: int, shared: bool = False
) -> Json:
    """The one ResourceSlice of `node` (UID `node_uid`, its owner): all its GPUs in the pool
    named after it, generation 1; `shared`: GPUs that allow multiple allocations."""
    if not 0 < gpu_count <= MAX_GPUS:
        raise ValueError(f"node {node}: a slice holds 1..{MAX_GPUS} GPUs, not {gpu_count}")
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": node_uid,
        "controller": True,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node), "ownerReferences": [owner]},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [
                node_gpu_device(model, node, i, gpu_count, shared) for i in range(gpu_count)
            ],
        },
    }


def gpu_device_class() -> Json:
    """The driver's `gpu.nvidia.com` DeviceClass (resource.k8s.io/v1 form)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": GPU_CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": GPU_CLASS_SELECTOR}}],
            "extendedResourceName": EXTENDED_RESOURCE,
        },
    }


def nvlink_domain_ids(node: str, domains: str, gpu_count: int) -> str:
    """The by-UUID annotation value for index groups `domains` (`0-3,4-7`) of `node`: UUIDs of
    one domain joined by `,`, domains by `;`, ordered by their first GPU. Raises
    `topology.domains.TopologyError` for a bad index annotation."""
    topology = parse_domains(domains, gpu_count)
    return DOMAIN_SEPARATOR.join(
        ID_SEPARATOR.join(gpu_uuid(node, index) for index in domain) for domain in topology.domains
    )
