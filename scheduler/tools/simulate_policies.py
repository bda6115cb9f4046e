"""Placement policies compared by `gpu-scheduler simulate`, each a `Framework`.

Every policy runs the production filters (`scheduler.core.profile.default_framework`'s filter list:
NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit, NVLink), so the nodes a pod
may go to are the same under every policy and only the choice among them differs:

- `gpu-scheduler`: `default_framework(settings)` unchanged: the filters, Narrow (keep multi-GPU
  pods inside one NVLink domain when any feasible node allows it), the NVLink-domain score and
  preferred node affinity. GPU indices from `scheduler.core.placement.place`.
- `least-allocated`: kube-scheduler's default spreading, NodeResourcesFit with the
  LeastAllocated strategy (kubernetes pkg/scheduler/framework/plugins/noderesources/
  least_allocated.go and resource_allocation.go). Per resource r with allocatable `a > 0` and
  requested-after-placement `q`: `(a - q) * 100 // a` (0 when q > a); the node's score is the
  weighted mean, integer-divided. Resources: cpu, memory and `nvidia.com/gpu`, weight 1 each.
  kube-scheduler's default list is cpu and memory only; `nvidia.com/gpu` is added the way an
  operator adds an extended resource to `scoringStrategy.resources`, and as upstream it is only
  scored for pods that request it (an extended resource the pod does not request returns (0, 0)
  and is skipped, as is any resource the node has none of).
- `most-allocated`: the MostAllocated strategy, `q * 100 // a` (q capped at a), same resources.
- `best-fit`: the node with the fewest free GPUs left after placement; ties go to the fewest
  free millicores left (then the seeded tie-break).
- `random`: no preference: every feasible node scores the same, and the framework's seeded
  tie-break picks uniformly among them.

kube-scheduler has no NVLink notion, so the baselines have no Narrow step; which GPUs a baseline
pod gets inside its node is decided by the simulator (see `scheduler.tools.simulate`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from scheduler.config import SchedulerConfig
from scheduler.framework.interface import BoolArray, CycleState, FloatArray, ScorePlugin
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY

IntMatrix = npt.NDArray[np.int64]
BoolMatrix = npt.NDArray[np.bool_]

MAX_NODE_SCORE = 100
"""kube-scheduler's `framework.MaxNodeScore`."""
FIT_RESOURCES = (CPU, MEMORY, GPU)
"""Resource columns scored by LeastAllocated / MostAllocated, weight 1 each."""
GPU_SCHEDULER = "gpu-scheduler"
LEAST_ALLOCATED = "least-allocated"
MOST_ALLOCATED = "most-allocated"
BEST_FIT = "best-fit"
RANDOM = "random"


def _allocation_inputs(pod: PodInfo, snapshot: Snapshot) -> tuple[IntMatrix, IntMatrix, BoolMatrix]:
    """Allocatable, requested after placement, and which (node, resource) cells are scored."""
    columns = list(FIT_RESOURCES)
    allocatable = snapshot.allocatable[:, columns]  # allocatable: (rows, 3)
    after = snapshot.requested[:, columns] + pod.requests[columns]  # after: (rows, 3)
    scored = allocatable > 0  # scored: (rows, 3)
    if pod.requests[GPU] == 0:  # an extended resource the pod does not request is skipped
        scored[:, columns.index(GPU)] = False
    return allocatable, after, scored


def _weighted_mean(points: IntMatrix, scored: BoolMatrix) -> FloatArray:
    """Integer mean over the scored resources of each row, as kube-scheduler (0 if none)."""
    total = np.where(scored, points, 0).sum(axis=1)  # total: (rows,)
    weights = scored.sum(axis=1)  # weights: (rows,)
    mean = total // np.maximum(weights, 1)  # mean: (rows,)
    return np.where(weights > 0, mean, 0).astype(np.float64)  # (rows,)


def least_allocated_points(
    allocatable: IntMatrix, after: IntMatrix, scored: BoolMatrix
) -> FloatArray:
    """LeastAllocated's (rows,) points from allocatable and requested-after-placement amounts
    (rows, resources) and the (rows, resources) cells that count (see the module docstring)."""
    safe = np.maximum(allocatable, 1)  # safe: (rows, resources)
    points = np.where(  # points: (rows, resources)
        after > allocatable, 0, (allocatable - after) * MAX_NODE_SCORE // safe
    )
    return _weighted_mean(points, scored)


def most_allocated_points(
    allocatable: IntMatrix, after: IntMatrix, scored: BoolMatrix
) -> FloatArray:
    """MostAllocated's (rows,) points, with the inputs of `least_allocated_points`."""
    safe = np.maximum(allocatable, 1)  # safe: (rows, resources)
    points = np.minimum(after, allocatable) * MAX_NODE_SCORE // safe  # (rows, resources)
    return _weighted_mean(points, scored)


def best_fit_points(
    gpus_after: FloatArray, cpu_after: FloatArray, gpu_span: float, cpu_span: float
) -> FloatArray:
    """BestFit's (rows,) points from the free GPUs and millicores (rows,) left after placement;
    `gpu_span` and `cpu_span` exceed every node's allocatable amount of each."""
    # cpu_after / cpu_span < 1, so it only orders nodes with equal free GPUs.
    key = gpus_after + cpu_after / cpu_span  # key: (rows,), smaller is better
    points: FloatArray = MAX_NODE_SCORE * (1.0 - key / gpu_span)  # points: (rows,)
    return points


class LeastAllocated:
    """Score plugin: kube-scheduler's NodeResourcesFit LeastAllocated (see module docstring).
    Returns (rows,) points in 0..100; higher for nodes with more left free after placement."""

    name = "LeastAllocated"
    weight = 1.0

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray:
        return least_allocated_points(*_allocation_inputs(pod, snapshot))


class MostAllocated:
    """Score plugin: kube-scheduler's NodeResourcesFit MostAllocated (see module docstring).
    Returns (rows,) points in 0..100; higher for nodes fuller after placement."""

    name = "MostAllocated"
    weight = 1.0

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray:
        return most_allocated_points(*_allocation_inputs(pod, snapshot))


class BestFit:
    """Score plugin: fewest free GPUs after placement first, then fewest free millicores.

    Returns (rows,) points in 0..100, lexicographic in (free GPUs after, free CPU after): a node
    with fewer free GPUs always scores higher; among equal GPUs, fewer free CPU scores higher.
    """

    name = "BestFit"
    weight = 1.0

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray:
        free = snapshot.free  # free: (rows, resources)
        gpus_after = np.maximum(free[:, GPU] - pod.requests[GPU], 0)  # gpus_after: (rows,)
        cpu_after = np.maximum(free[:, CPU] - pod.requests[CPU], 0)  # cpu_after: (rows,)
        gpu_span = float(snapshot.allocatable[:, GPU].max(initial=0)) + 1.0
        cpu_span = float(snapshot.allocatable[:, CPU].max(initial=0)) + 1.0
        return best_fit_points(gpus_after, cpu_after, gpu_span, cpu_span)


class NoPreference:
    """Score plugin: the same points for every node, so the framework's seeded tie-break picks
    uniformly among the feasible nodes. Returns (rows,) zeros."""

    name = "Random"
    weight = 1.0

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray:
        return np.zeros(snapshot.rows, dtype=np.float64)  # (rows,)


def gpu_scheduler_framework(settings: SchedulerConfig, seed: int) -> Framework:
    """The daemon's profile exactly, with the tie-break generator seeded with `seed`."""
    from scheduler.core.profile import default_framework

    scoring = replace(settings.scoring, seed=seed)
    return default_framework(replace(settings, scoring=scoring))


def _baseline(score: Callable[[], ScorePlugin]) -> Callable[[SchedulerConfig, int], Framework]:
    """A builder of the production filters (the very plugin list of `default_framework`) with
    `score` as the only score plugin and no Narrow step."""

    def build(settings: SchedulerConfig, seed: int) -> Framework:
        filters = gpu_scheduler_framework(settings, seed).filters
        return Framework(filters=filters, scores=[score()], seed=seed)

    return build


POLICIES: dict[str, Callable[[SchedulerConfig, int], Framework]] = {
    GPU_SCHEDULER: gpu_scheduler_framework,
    LEAST_ALLOCATED: _baseline(LeastAllocated),
    MOST_ALLOCATED: _baseline(MostAllocated),
    BEST_FIT: _baseline(BestFit),
    RANDOM: _baseline(NoPreference),
}
"""Policy name -> builder of its Framework from the settings and the run's seed."""

NVLINK_AWARE = frozenset({GPU_SCHEDULER})
"""Policies that choose GPU indices with `scheduler.core.placement.place`; the others are the
baselines."""
