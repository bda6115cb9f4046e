"""GPUHealth: a node whose healthy free GPUs are too few for the pod fails, naming the sick GPUs.

GPUs dcgm-exporter reports sick (`scheduler.core.health_task`, recorded with
`ClusterCache.set_sick_gpus`) count as unusable on device-plugin nodes: the cache keeps them out
of `free_per_domain` and of every GPU choice, and this filter takes them off the node's free
nvidia.com/gpu count, so a pod asking for more GPUs than the node's free healthy ones fails here
(NodeResourcesFit still sees the node's free count, which includes them) with a reason naming
them, e.g. "node(s) had unhealthy GPUs (1 GPU unhealthy: GPU 3 XID 79)". Nodes with the same
sick GPUs share one reason, so the message stays short on a large cluster. The rejection is not
resolvable by evicting pods (only a GPU reset clears it; the queue retries when health changes).

DRA devices are not handled here: a sick device is tainted NoSchedule in memory and the
DynamicResources allocator skips it like any tainted device.
"""

from __future__ import annotations

import numpy as np

from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import GPU

NAME = "GPUHealth"
MAX_NAMED = 4
"""Sick GPUs named in one reason; the rest are counted."""


def sick_description(reasons: dict[int, str]) -> str:
    """ "1 GPU unhealthy: GPU 3 XID 79" (at most `MAX_NAMED` named)."""
    indices = sorted(reasons)
    named = [f"GPU {i} {reasons[i]}" for i in indices[:MAX_NAMED]]
    if len(indices) > MAX_NAMED:
        named.append(f"and {len(indices) - MAX_NAMED} more")
    plural = "s" if len(indices) != 1 else ""
    return f"{len(indices)} GPU{plural} unhealthy: {'; '.join(named)}"


class GpuHealth:
    name = NAME

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        cache = snapshot.cache
        if pod.gpus == 0 or not cache.sick_gpus:
            return []
        rows = snapshot.rows
        idle_sick = cache.gpu_sick[:rows] & ~cache.gpu_used[:rows]  # idle_sick: (rows, gpus)
        healthy_free = cache.free[:rows, GPU] - idle_sick.sum(axis=1)  # (rows,)
        has_gpus = cache.allocatable[:rows, GPU] > 0  # has_gpus: (rows,)
        failed = has_gpus & (healthy_free < pod.gpus) & idle_sick.any(axis=1)  # (rows,)
        by_reason: dict[str, list[int]] = {}
        for row in np.flatnonzero(failed):
            reasons = cache.sick_gpus.get(cache.names[row], {})
            by_reason.setdefault(sick_description(reasons), []).append(int(row))
        rejections = []
        for text, members in sorted(by_reason.items()):
            mask = np.zeros(rows, dtype=bool)  # mask: (rows,)
            mask[members] = True
            rejections.append(Rejection(f"node(s) had unhealthy GPUs ({text})", mask, False, NAME))
        return rejections
