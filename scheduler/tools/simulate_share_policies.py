"""Placement policies of `gpu-scheduler simulate --shares`: where a pod goes when GPUs are
shared in thousandths.

Every policy filters with the production filters (`simulate_policies.POLICIES`' frameworks:
NodeResourcesFit, NodeAffinity, ...) over the cache of `ShareCluster`, where a GPU holding any
share is in use, so whole-GPU pods see only untouched GPUs. A share, which the filters see as its
cpu and memory, needs one GPU with `free >= milli` besides. The policies differ in the node
they pick among the feasible ones and the GPU inside it:

- `gpu-scheduler`: the daemon's profile (`scheduler.core.profile.default_framework`). Whole-GPU
  and CPU-only pods run `Framework.evaluate` unchanged (NVLink filter, Narrow and score; the
  GPU-fragmentation score) and take their GPUs with `scheduler.core.placement.place`. A share is
  scored as the profile's DynamicResources scores a consumable-capacity claim: 100 on a node
  where a GPU already shared takes it, elsewhere the NVLink score of the one GPU it would open
  (the NVLink plugin's kernel over untouched GPUs), plus the GPU-fragmentation score
  (`scheduler.plugins.gpu_fragmentation`, at its profile weight) of its thousandths, cpu and
  memory. The fragmentation score sees the room on partly used GPUs as free GPU and learns from
  shares too (`ClusterShares`, what the daemon reads from DRA devices that allow multiple
  allocations), and steers CPU-only pods to nodes without free GPU. The node is picked by the
  framework's seeded tie-break; the GPU by `simulate_share_gpus.PACKING` (the allocator's
  packing order).
- `gpu-scheduler-whole-gpus`: the same with the GPU-fragmentation score as it was before it
  knew shares: whole free GPUs only (a GPU holding a share is not free), learned from whole-GPU
  pods only, CPU-only pods not steered; a share scored for its cpu and memory, and where it
  opens a GPU for that GPU.
- `first-fit`: the first feasible node in the node list; the lowest GPU index with room.
- `best-fit`: `simulate_policies.BestFit` with GPUs counted in thousandths (fewest free
  thousandths of GPU left, then fewest free millicores); the tightest GPU.
- `least-allocated`, `most-allocated`: kube-scheduler's NodeResourcesFit strategies
  (`simulate_policies`), the GPU column in thousandths (a node's GPUs times 1000 allocatable,
  the thousandths held requested), scored for pods that ask for GPU; the GPU as kube-scheduler
  1.37's allocator picks it: the lowest index with room.
- `random`: uniform among feasible nodes (seeded); the lowest GPU index with room.

Baselines take whole GPUs in index order (the lowest untouched), as kube-scheduler 1.37's
allocator takes devices in its order; gpu-scheduler takes them NVLink-aware.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from scheduler.config import SchedulerConfig
from scheduler.core.placement import place
from scheduler.framework.interface import CycleState
from scheduler.framework.runtime import NO_NODE, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import CPU, MEMORY
from scheduler.plugins.dynamic_resources import DynamicResources
from scheduler.plugins.gpu_fragmentation import (
    COLUMNS,
    MAX_POINTS,
    NEUTRAL_POINTS,
    POINTS_PER_GPU,
    GpuFragmentation,
)
from scheduler.plugins.nvlink import NVLink
from scheduler.tools.simulate_policies import (
    BEST_FIT,
    GPU_SCHEDULER,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    POLICIES,
    RANDOM,
    best_fit_points,
    least_allocated_points,
    most_allocated_points,
)
from scheduler.tools.simulate_share_cluster import CPU_ONLY, SHARE, Arrival, ShareCluster
from scheduler.tools.simulate_share_gpus import (
    FIRST_FIT,
    NO_GPU,
    PACKING,
    TIGHTEST,
    WHOLE,
    lowest_untouched,
    share_gpu,
)
from topology.scoring import MAX_SCORE, pick_best

Choice = tuple[int, tuple[int, ...]]
"""A node row and the GPU indices taken there."""
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

GPU_SCHEDULER_WHOLE_GPUS = "gpu-scheduler-whole-gpus"
SHARE_POLICY_NAMES = (
    GPU_SCHEDULER,
    GPU_SCHEDULER_WHOLE_GPUS,
    FIRST_FIT,
    BEST_FIT,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    RANDOM,
)
"""Every policy of `--shares`, in the order of the tables."""


class SharePolicy(Protocol):
    """Chooses where an arrival goes; None when no node can take it. The caller commits it."""

    name: str

    def choose(self, arrival: Arrival, cluster: ShareCluster) -> Choice | None: ...


def feasible_rows(framework: Framework, arrival: Arrival, cluster: ShareCluster) -> BoolArray:
    """(rows,) nodes that pass the production filters for `arrival.pod` and, for a share, have a
    GPU with room for it."""
    diagnosis = framework.run_filters(arrival.pod, cluster.snapshot, CycleState())
    feasible = diagnosis.feasible  # feasible: (rows,)
    if arrival.kind == SHARE:
        feasible = feasible & (cluster.free >= arrival.milli).any(axis=1)
    return feasible


class Baseline:
    """A policy that scores the feasible nodes with `points(arrival, cluster)` (rows,) and
    takes the best (seeded tie-break), or without `points` the first feasible node; a share's
    GPU by `gpu_rule` (`simulate_share_gpus.GPU_CHOICES`)."""

    def __init__(
        self,
        name: str,
        framework: Framework,
        points: Callable[[Arrival, ShareCluster], FloatArray] | None,
        gpu_rule: str,
    ) -> None:
        self.name = name
        self.framework = framework
        self.points = points
        self.gpu_rule = gpu_rule

    def choose(self, arrival: Arrival, cluster: ShareCluster) -> Choice | None:
        feasible = feasible_rows(self.framework, arrival, cluster)  # feasible: (rows,)
        if not feasible.any():
            return None
        if self.points is None:
            row = int(np.argmax(feasible))
        else:
            row = pick_best(self.points(arrival, cluster), feasible, self.framework.rng)
        return row, gpus_on(cluster, row, arrival, self.gpu_rule)


def gpus_on(cluster: ShareCluster, row: int, arrival: Arrival, rule: str) -> tuple[int, ...]:
    """The GPUs `arrival` takes on node `row`: a share's by `rule`, a whole-GPU pod's lowest
    untouched ones, none for a CPU-only pod."""
    count = int(cluster.gpu_count[row])
    if arrival.kind == CPU_ONLY:
        return ()
    if arrival.kind == SHARE:
        gpu = share_gpu(cluster.free[row], cluster.domains[row], count, arrival.milli, rule)
        assert gpu != NO_GPU, "feasible_rows guarantees a GPU with room"
        return (gpu,)
    return lowest_untouched(cluster.free[row], count, arrival.gpus)


def _allocation(
    arrival: Arrival, cluster: ShareCluster
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], BoolArray]:
    """(rows, 3) allocatable and requested-after-placement cpu, memory and thousandths of GPU,
    and which (rows, 3) cells count (the GPU only for a pod that asks for GPU)."""
    rows = cluster.rows
    cache = cluster.cache
    gpu_allocatable = cluster.gpu_count * WHOLE  # gpu_allocatable: (rows,)
    allocatable = np.stack(  # allocatable: (rows, 3)
        [cache.allocatable[:rows, CPU], cache.allocatable[:rows, MEMORY], gpu_allocatable], axis=1
    )
    requested = np.stack(  # requested: (rows, 3)
        [
            cache.requested[:rows, CPU],
            cache.requested[:rows, MEMORY],
            gpu_allocatable - cluster.free.sum(axis=1),
        ],
        axis=1,
    )
    asked = np.array(  # asked: (3,)
        [arrival.pod.requests[CPU], arrival.pod.requests[MEMORY], arrival.gpu_milli]
    )
    scored = allocatable > 0  # scored: (rows, 3)
    if arrival.gpu_milli == 0:
        scored[:, 2] = False
    return allocatable, requested + asked, scored


def least_allocated(arrival: Arrival, cluster: ShareCluster) -> FloatArray:
    return least_allocated_points(*_allocation(arrival, cluster))


def most_allocated(arrival: Arrival, cluster: ShareCluster) -> FloatArray:
    return most_allocated_points(*_allocation(arrival, cluster))


def best_fit(arrival: Arrival, cluster: ShareCluster) -> FloatArray:
    rows = cluster.rows
    cache = cluster.cache
    gpus_after = np.maximum(cluster.free.sum(axis=1) - arrival.gpu_milli, 0)  # (rows,)
    cpu_after = np.maximum(cache.free[:rows, CPU] - arrival.pod.requests[CPU], 0)  # (rows,)
    gpu_span = float(cluster.gpu_count.max(initial=0)) * WHOLE + 1.0
    cpu_span = float(cache.allocatable[:rows, CPU].max(initial=0)) + 1.0
    return best_fit_points(gpus_after, cpu_after, gpu_span, cpu_span)


def no_preference(arrival: Arrival, cluster: ShareCluster) -> FloatArray:
    return np.zeros(cluster.rows, dtype=np.float64)  # (rows,)


class ClusterShares:
    """`gpu_fragmentation.SharedGpus` of the simulated cluster: the room is the free thousandths
    of its partly used GPUs (the cache counts those GPUs as used), the share that of the arrival
    being placed."""

    def __init__(self) -> None:
        self.cluster: ShareCluster | None = None
        self.milli = 0

    def room(self, snapshot: Snapshot) -> IntArray | None:
        if self.cluster is None:
            return None
        free = self.cluster.free  # free: (rows, gpus)
        room: IntArray = np.where(free < WHOLE, free, 0).sum(axis=1)  # room: (rows,)
        return room

    def share(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> int:
        return self.milli


class GpuSchedulerShares:
    """gpu-scheduler's profile, shares scored as its DynamicResources plugin scores them (see
    the module docstring). With `whole_gpus_only` its GPU-fragmentation score is the earlier
    one: whole free GPUs only, learned from whole-GPU pods, CPU-only pods not steered."""

    def __init__(self, framework: Framework, whole_gpus_only: bool = False) -> None:
        self.name = GPU_SCHEDULER_WHOLE_GPUS if whole_gpus_only else GPU_SCHEDULER
        self.framework = framework
        self.whole_gpus_only = whole_gpus_only
        self.nvlink = next(p for p in framework.scores if isinstance(p, NVLink))
        self.claims = next(p for p in framework.scores if isinstance(p, DynamicResources))
        self.fragmentation = next(
            (p for p in framework.scores if isinstance(p, GpuFragmentation)), None
        )
        self.shares = ClusterShares()
        if self.fragmentation is not None:
            self.fragmentation.shared = None if whole_gpus_only else self.shares
            self.fragmentation.steer_cpu_only = not whole_gpus_only

    def choose(self, arrival: Arrival, cluster: ShareCluster) -> Choice | None:
        snapshot = cluster.snapshot
        self.shares.cluster = cluster
        self.shares.milli = arrival.milli if arrival.kind == SHARE else 0
        if arrival.kind != SHARE:
            evaluation = self.framework.evaluate(arrival.pod, snapshot)
            if evaluation.chosen == NO_NODE:
                return None
            return evaluation.chosen, place(cluster.cache, arrival.pod, evaluation).gpus
        state = CycleState()
        feasible = self.framework.run_filters(arrival.pod, snapshot, state).feasible  # (rows,)
        room = cluster.free >= arrival.milli  # room: (rows, gpus)
        packs = feasible & (room & (cluster.free < WHOLE)).any(axis=1)  # packs: (rows,)
        opens = feasible & ~packs & room.any(axis=1)  # opens: (rows,)
        if not (packs | opens).any():
            return None
        assert arrival.opener is not None
        nvlink = self.nvlink.scores(arrival.opener, snapshot)
        assert nvlink is not None
        points = np.where(packs, MAX_SCORE, np.where(opens, nvlink.normalized(), 0.0))
        points *= self.claims.weight  # points: (rows,)
        fragmentation = self._fragmentation_points(arrival, snapshot, state, opens)
        if fragmentation is not None and self.fragmentation is not None:
            points += self.fragmentation.weight * fragmentation
        row = pick_best(points, packs | opens, self.framework.rng)
        count = int(cluster.gpu_count[row])
        gpu = share_gpu(cluster.free[row], cluster.domains[row], count, arrival.milli, PACKING)
        return row, (gpu,)

    def _fragmentation_points(
        self, arrival: Arrival, snapshot: Snapshot, state: CycleState, opens: BoolArray
    ) -> FloatArray | None:
        """GpuFragmentation's points (rows,) for the share; None when it abstains. The plugin
        scores the share itself (its thousandths off the node's free GPU); with
        `whole_gpus_only` the points are those of its cpu and memory, and on `opens` rows of
        one untouched GPU, against whole free GPUs."""
        plugin = self.fragmentation
        if plugin is None:
            return None
        if not self.whole_gpus_only:
            return plugin.score(arrival.pod, snapshot, state, opens)
        if not plugin.ready:
            return None
        plugin.refresh(snapshot, state)
        before = plugin.current_waste_by_row()  # before: (rows,)
        after = snapshot.free[:, list(COLUMNS)].T.astype(np.float32)  # after: (3, rows)
        after[0] -= opens  # the GPU column: a share opening a GPU takes it
        after[1] -= arrival.pod.requests[COLUMNS[1]]
        after[2] -= arrival.pod.requests[COLUMNS[2]]
        removed = np.subtract(before, plugin.waste(after), dtype=np.float64)  # (rows,) GPUs
        points: FloatArray = np.clip(NEUTRAL_POINTS + POINTS_PER_GPU * removed, 0.0, MAX_POINTS)
        return points


def share_policy(name: str, settings: SchedulerConfig, seed: int) -> SharePolicy:
    """The policy `name` (one of `SHARE_POLICY_NAMES`; `ValueError` otherwise), its framework
    built from `settings` and its tie-breaks seeded with `seed`."""
    if name in (GPU_SCHEDULER, GPU_SCHEDULER_WHOLE_GPUS):
        framework = POLICIES[GPU_SCHEDULER](settings, seed)
        return GpuSchedulerShares(framework, name == GPU_SCHEDULER_WHOLE_GPUS)
    framework = POLICIES[RANDOM](settings, seed)  # the production filters, seeded tie-breaks
    rules: dict[str, tuple[Callable[[Arrival, ShareCluster], FloatArray] | None, str]] = {
        FIRST_FIT: (None, FIRST_FIT),
        BEST_FIT: (best_fit, TIGHTEST),
        LEAST_ALLOCATED: (least_allocated, FIRST_FIT),
        MOST_ALLOCATED: (most_allocated, FIRST_FIT),
        RANDOM: (no_preference, FIRST_FIT),
    }
    if name not in rules:
        raise ValueError(
            f"unknown policy {name} for --shares (known: {', '.join(SHARE_POLICY_NAMES)})"
        )
    points, gpu_rule = rules[name]
    return Baseline(name, framework, points, gpu_rule)
