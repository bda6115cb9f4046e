"""MIG partitions of DRA GPUs as partitionable devices (DRAPartitionableDevices, beta and on in
Kubernetes 1.37): the ResourceSlices of a node whose GPUs may each be taken whole or as any MIG
placement, and the `mig.nvidia.com` DeviceClass, as JSON. Pure: no I/O.

Per GPU `i` the pool has one counter set `gpu-<i>-counter-set` holding the GPU's eight memory
slices as counters `memory-slice-0` .. `memory-slice-7` of 1 each, plus `multiprocessors` and
`memory`. The GPU is published as

- the whole GPU `gpu-<i>` (as `hack.localcluster.dra.node_gpu_device` has it, type "gpu"),
  consuming every counter of its set, and
- every placement of every MIG profile, `gpu-<i>-mig-<profile with '.' as '-'>-<start>` (device
  names are DNS labels, so `1g.18gb` placed at memory slice 3 is `gpu-0-mig-1g-18gb-3`), of type
  "mig", with the attributes `profile` (`1g.18gb`), `parentUUID`, `memorySliceStart`, the GPU's
  model attributes and capacity `memory`, consuming the memory slices of its placement, its
  multiprocessors and its memory.

So the API server's counters make placements exclusive exactly where their memory slices
overlap, and the whole GPU exclusive with all of them: one pool, one allocator, no MIG manager.

A placement (NVML's `nvmlGpuInstancePlacement_t`: the first memory slice and the number of
slices) follows NVIDIA's MIG user guide, "Supported MIG Profiles", H100/H200: 1g at slices 0-6
(one slice each), 1g with twice the memory at 0, 2, 4, 6 (two slices), 2g at 0, 2, 4 (two), 3g at
0 and 4 (four), 4g at 0 (four), 7g at 0 (all eight). Multiprocessors and memory per profile are
those of the H200 recording `nvidia-smi mig -lgip` (the shared h200 trace's
nvidia-smi-mig-lgip.txt: SM and GiB columns); the media-extension profile `1g.18gb+me` is left
out (it would need a counter of its own for the single media engine).

Slices: a pool's shared counters and its devices cannot share a slice (k8s.io/api@v0.37.2
resource/v1/types.go, `ResourceSliceSpec.SharedCounters`), and a slice of devices that consume
counters holds at most 64 of them (`ResourceSliceMaxDevicesWithAdvancedFeatures`). The pool has
one slice `0-gpu.nvidia.com-<node>` with the counter sets (at most 8: `ResourceSliceMaxCounterSets`,
so at most 8 GPUs) and one slice per GPU, `<i + 1>-gpu.nvidia.com-<node>`, with its devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster.dra import (
    API_VERSION,
    DRIVER,
    GpuModel,
    Json,
    gpu_attributes,
    node_gpu_device,
)

MIG_CLASS = "mig.nvidia.com"
"""The DeviceClass of MIG placements."""
MIG_CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"
MEMORY_SLICES = 8
"""Memory slices of an H100/H200 (the counters `memory-slice-0..7`)."""
MAX_MIG_GPUS = 8
"""One counter set per GPU, at most 8 counter sets in a slice."""
H200_MULTIPROCESSORS = 132
"""SMs of the whole H200 (the 7g.141gb row of the recording)."""


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile and where it may be placed."""

    name: str
    memory_slices: int
    multiprocessors: int
    memory_mib: int
    starts: tuple[int, ...]
    """First memory slice of each placement."""


H200_MIG_PROFILES: tuple[MigProfile, ...] = (
    MigProfile("1g.18gb", 1, 16, 16384, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.35gb", 2, 26, 33280, (0, 2, 4, 6)),
    MigProfile("2g.35gb", 2, 32, 33280, (0, 2, 4)),
    MigProfile("3g.71gb", 4, 60, 71424, (0, 4)),
    MigProfile("4g.71gb", 4, 64, 71424, (0,)),
    MigProfile("7g.141gb", 8, 132, 143360, (0,)),
)
"""SM and memory (16.00, 32.50, 69.75, 140.00 GiB) from the H200's `nvidia-smi mig -lgip`;
placements from NVIDIA's MIG user guide (see the module docstring)."""


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counter-set"


def slice_counter(index: int) -> str:
    """The counter of memory slice `index`."""
    return f"memory-slice-{index}"


def mig_device_name(gpu: int, profile: str, start: int) -> str:
    """`gpu-0-mig-1g-18gb-3`: the placement of `profile` at memory slice `start` of GPU `gpu`."""
    return f"gpu-{gpu}-mig-{profile.replace('.', '-')}-{start}"


def gpu_counters(model: GpuModel) -> Json:
    """The counters of one GPU's set (and what its whole GPU consumes)."""
    counters: Json = {slice_counter(i): {"value": "1"} for i in range(MEMORY_SLICES)}
    counters["multiprocessors"] = {"value": str(H200_MULTIPROCESSORS)}
    counters["memory"] = {"value": f"{model.memory_mib}Mi"}
    return counters


def mig_device(model: GpuModel, node: str, gpu: int, profile: MigProfile, start: int) -> Json:
    """One placement of `profile` at memory slice `start` of GPU `gpu` of `node`."""
    attributes = gpu_attributes(model, "", None)
    del attributes["uuid"]
    attributes["type"] = {"string": "mig"}
    attributes["profile"] = {"string": profile.name}
    attributes["parentUUID"] = {"string": gpu_uuid(node, gpu)}
    attributes["memorySliceStart"] = {"int": start}
    counters: Json = {
        slice_counter(i): {"value": "1"} for i in range(start, start + profile.memory_slices)
    }
    counters["multiprocessors"] = {"value": str(profile.multiprocessors)}
    counters["memory"] = {"value": f"{profile.memory_mib}Mi"}
    return {
        "name": mig_device_name(gpu, profile.name, start),
        "attributes": attributes,
        "capacity": {"memory": {"value": f"{profile.memory_mib}Mi"}},
        "consumesCounters": [{"counterSet": counter_set_name(gpu), "counters": counters}],
    }


def gpu_devices(model: GpuModel, node: str, gpu: int, gpu_count: int) -> list[Json]:
    """GPU `gpu` whole, then every MIG placement of it, profile by profile, start by start."""
    whole = node_gpu_device(model, node, gpu, gpu_count)
    whole["consumesCounters"] = [
        {"counterSet": counter_set_name(gpu), "counters": gpu_counters(model)}
    ]
    return [whole] + [
        mig_device(model, node, gpu, profile, start)
        for profile in H200_MIG_PROFILES
        for start in profile.starts
    ]


def mig_slice_name(node: str, index: int) -> str:
    """Slice `index` of `node`'s pool (0: the counters; i + 1: GPU i's devices)."""
    return f"{index}-{DRIVER}-{node}"


def mig_resource_slices(node: str, node_uid: str, model: GpuModel, gpu_count: int) -> list[Json]:
    """The slices of `node` (see the module docstring), owned by the node, generation 1."""
    if not 0 < gpu_count <= MAX_MIG_GPUS:
        raise ValueError(f"node {node}: a MIG node has 1..{MAX_MIG_GPUS} GPUs, not {gpu_count}")
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
    pool = {"name": node, "generation": 1, "resourceSliceCount": gpu_count + 1}

    def one(index: int, content: Json) -> Json:
        return {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": mig_slice_name(node, index), "ownerReferences": [owner]},
            "spec": {"driver": DRIVER, "pool": pool, "nodeName": node, **content},
        }

    counters = [
        {"name": counter_set_name(gpu), "counters": gpu_counters(model)} for gpu in range(gpu_count)
    ]
    return [one(0, {"sharedCounters": counters})] + [
        one(gpu + 1, {"devices": gpu_devices(model, node, gpu, gpu_count)})
        for gpu in range(gpu_count)
    ]


def mig_device_class() -> Json:
    """The `mig.nvidia.com` DeviceClass: MIG placements of the driver's GPUs."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": MIG_CLASS},
        "spec": {"selectors": [{"cel": {"expression": MIG_CLASS_SELECTOR}}]},
    }


def placement_of(name: str) -> tuple[int, str, int] | None:
    """(GPU, profile, start) of a MIG device name, None for another name."""
    parts = name.split("-")
    if len(parts) != 6 or parts[0] != "gpu" or parts[2] != "mig":
        return None
    return int(parts[1]), f"{parts[3]}.{parts[4]}", int(parts[5])
