"""How many whole GPUs a pod holds, device plugin and Dynamic Resource Allocation together: the
one count idle reclaim, preemption, the idle verdict, GPU time accounting and `idle-report` use.

    held_gpus(pod, device_plugin, dra_gpus) -> int      pure
    GpuHoldings(cache, drivers).of(pod, node) -> int    the cache's view at one moment

A pod holds

- its `nvidia.com/gpu` request (`PodInfo.gpus`) where its node offers GPUs through the device
  plugin (`nvidia.com/gpu` allocatable); on a node without any, that request is an extended
  resource served through the pod's extended-resource claim (`scheduler.plugins.
  extended_resources`), so it is not counted twice; on a node whose device plugin shares its
  GPUs (time-slicing, MPS) the replicas it takes (`scheduler.model.gpu_sharing`), one GPU
  each, also when they are advertised as `nvidia.com/gpu.shared`;
- plus one GPU per device of a GPU driver (`dra.gpuDrivers`) allocated to its claims reserved
  for it (`scheduler.state.dra.reserved_gpu_devices`).

A node the cache does not know counts the request, as before DRA.
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler.model.gpu_sharing import replicas_requested
from scheduler.model.objects import PodInfo
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache


def held_gpus(pod: PodInfo, device_plugin: bool, dra_gpus: int) -> int:
    """The GPUs `pod` holds: its request where `device_plugin` GPUs serve it, plus `dra_gpus`."""
    return (pod.gpus if device_plugin else 0) + dra_gpus


class GpuHoldings:
    """The GPU count of any pod of `cache`, with the claims read once (one pass) at creation."""

    def __init__(self, cache: ClusterCache, drivers: Collection[str]) -> None:
        self._cache = cache
        self._dra = cache.dra.gpu_devices_by_pod(drivers)

    def dra_gpus(self, pod: PodInfo) -> int:
        """The GPUs `pod` holds through its claims."""
        return self._dra.get(pod.uid, 0)

    def of(self, pod: PodInfo, node: str) -> int:
        """The GPUs `pod`, counted on `node`, holds (see the module docstring)."""
        row = self._cache.row_of.get(node)
        sharing = self._cache.nodes[node].sharing if row is not None else None
        if sharing is not None:
            return replicas_requested(pod.gpus, pod.scalar, sharing) + self.dra_gpus(pod)
        device_plugin = row is None or bool(self._cache.allocatable[row, GPU])
        return held_gpus(pod, device_plugin, self.dra_gpus(pod))
