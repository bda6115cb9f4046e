"""GPU usage over a `gpu-scheduler simulate --pods` run, recorded while the arrivals are placed,
for `simulate --plot` (`scheduler.tools.plots` draws it).

Each sample splits the cluster's GPUs in three parts, `allocated + fragmented + idle ==
gpus_total`:

- allocated: GPUs requested by the pods placed so far (at most each node's allocatable);
- fragmented: free GPUs the workload's largest pod cannot use now, the simulator's "stranded"
  GPUs (`scheduler.tools.simulate`) taken at that moment: free GPUs on nodes with fewer free
  GPUs than that pod asks for, or less free cpu or memory than it needs;
- idle: the other free GPUs, on nodes that could still take such a pod.

Pods never leave in a `--pods` run, so `allocated` never falls. The time axis is the arrivals:
`arrivals[i]` pods had arrived (placed or skipped) when sample i was taken, asking for
`gpus_requested[i]` GPUs in all. Recording stays cheap: a sample before every `stride`-th
arrival (`sample_stride`: at most `MAX_SAMPLES` of them) and one after the last, each a few
numpy passes over the nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from scheduler.model.resources import CPU, GPU, MEMORY
from scheduler.state.cache import ClusterCache

MAX_SAMPLES = 400
"""Samples per policy before the final one; enough for a line a few hundred pixels wide."""


def sample_stride(arrivals: int) -> int:
    """Take a sample before every this many arrivals so that at most `MAX_SAMPLES` are taken."""
    return max(1, math.ceil(arrivals / MAX_SAMPLES))


def gpu_usage(
    cache: ClusterCache, largest_gpus: int, largest_cpu: int, largest_memory: int
) -> tuple[int, int, int]:
    """(GPUs, GPUs allocated, GPUs stranded) of the cache's nodes now.

    Stranded: free GPUs on nodes that cannot take a pod of `largest_gpus` GPUs asking
    `largest_cpu` millicores and `largest_memory` bytes (fewer free GPUs, cpu or memory than
    that); 0 when `largest_gpus` is 0. Allocated GPUs are capped at each node's allocatable.
    """
    rows = cache.rows
    valid = cache.valid[:rows]  # valid: (rows,)
    allocatable = cache.allocatable[:rows, GPU]  # allocatable: (rows,)
    used = np.minimum(cache.requested[:rows, GPU], allocatable)  # used: (rows,)
    total, allocated = int(allocatable[valid].sum()), int(used[valid].sum())
    if largest_gpus == 0:
        return total, allocated, 0
    free = cache.free[:rows]  # free: (rows, resources)
    cannot = (  # cannot: (rows,)
        (free[:, GPU] < largest_gpus)
        | (free[:, CPU] < largest_cpu)
        | (free[:, MEMORY] < largest_memory)
    )
    return total, allocated, int(np.maximum(free[:, GPU], 0)[valid & cannot].sum())


@dataclass
class UsageSeries:
    """One policy's samples; the lists have one entry per sample, in arrival order."""

    gpus_total: int = 0
    arrivals: list[int] = field(default_factory=list)
    gpus_requested: list[int] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)
    fragmented: list[int] = field(default_factory=list)

    def add(
        self, arrivals: int, gpus_requested: int, gpus_total: int, allocated: int, fragmented: int
    ) -> None:
        """Append one sample: the counts after `arrivals` arrivals asking `gpus_requested`
        GPUs, of a cluster of `gpus_total` GPUs (`gpu_usage`'s three numbers)."""
        self.gpus_total = gpus_total
        self.arrivals.append(arrivals)
        self.gpus_requested.append(gpus_requested)
        self.allocated.append(allocated)
        self.fragmented.append(fragmented)

    @property
    def idle(self) -> list[int]:
        """Free GPUs that are not fragmented, per sample."""
        return [
            self.gpus_total - allocated - fragmented
            for allocated, fragmented in zip(self.allocated, self.fragmented, strict=True)
        ]

    @property
    def demand_pct(self) -> list[float]:
        """GPUs requested by the arrivals so far, in % of the cluster's GPUs, per sample."""
        total = max(self.gpus_total, 1)
        return [100.0 * requested / total for requested in self.gpus_requested]
