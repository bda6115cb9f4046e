"""NVLink: the domain filter for pods that require one domain, and the NVLink-domain score.

Narrow: a pod asking for 2 or more GPUs goes inside one NVLink domain whenever any node that
passed the filters can hold it in one domain: the nodes where it would span domains are dropped
("node(s) would split the GPUs across NVLink domains"). Only when no feasible node can keep it
in one domain may it span (scored lower the more domains it spans).

Rows where the pod's GPUs come from DRA (`scheduler.plugins.extended_resources`: no GPU
allocatable, nvidia.com/gpu served by a DeviceClass) are left to DynamicResources, which chooses
and scores the devices NVLink-aware there: they are neither filtered nor narrowed here.

Filter: a pod annotated `gpu-scheduler.io/nvlink-policy: required` only fits nodes where its GPUs
lie inside one NVLink domain, or, when it asks for more GPUs than the node's largest domain
holds, where enough whole domains are free. Pods with the default "preferred" policy may span
domains (the score penalizes it). Evicting pods can free a domain, so the rejection is resolvable.

Score: `topology.scoring.score_nodes` (the seed's rules and weights), normalized to 0..100. Nodes
in the same GPU state (see `ClusterCache.gpu_state_arrays`) get the same score, so it is computed
once per distinct state and per GPU count, kept until new states appear, and gathered to the
nodes: the per-pod cost is one gather over the nodes. The result is kept in the cycle state
under this plugin's name, for events and `explain`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.plugins.extended_resources import gpus_delegated
from scheduler.state.node_table import GpuStateArrays
from topology.scoring import DEFAULT_WEIGHTS, ScoreBreakdown, ScoreWeights, normalize, score_nodes

NAME = "NVLink"
SPLIT_REASON = "node(s) would split the GPUs across NVLink domains"
COMPONENTS = ("base", "domain_integrity", "node_matching", "domain_completion", "efficiency")


def one_domain_feasible(snapshot: Snapshot, gpus: int) -> BoolArray:
    """(rows,) nodes where `gpus` GPUs can be placed without splitting a domain."""
    free = snapshot.free_per_domain  # free: (rows, domains)
    size = snapshot.domain_size  # size: (rows, domains)
    if free.shape[1] == 0:
        return np.zeros(snapshot.rows, dtype=bool)
    in_one = (free >= gpus).any(axis=1)  # in_one: (rows,)
    largest = size.max(axis=1)  # largest: (rows,)
    whole_free = np.where((free == size) & (size > 0), size, 0).sum(axis=1)  # (rows,)
    return np.where(gpus <= largest, in_one, whole_free >= gpus)


def dra_gpu_rows(pod: PodInfo, snapshot: Snapshot) -> BoolArray:  # (rows,)
    """Rows where the pod's GPUs come from DRA (no GPU allocatable, nvidia.com/gpu served by a
    DeviceClass): DynamicResources chooses and scores the devices there. Rows whose GPUs are
    shared by time-slicing or MPS are left out as well: a pod takes replicas there, in no
    NVLink domain (GpuSharing)."""
    replicas = snapshot.cache.replicas
    replicas.fit(snapshot.rows, 0)
    shared = replicas.per_gpu[: snapshot.rows] > 0  # shared: (rows,)
    if not gpus_delegated(pod, snapshot.cache.dra):
        return np.asarray(shared)
    return np.asarray((snapshot.gpu_total == 0) | shared)


@dataclass(frozen=True)
class NVLinkScores:
    """Scores per GPU state, and each node row's state."""

    by_state: ScoreBreakdown  # arrays: (states,)
    normalized_by_state: FloatArray  # (states,), 0 where the state cannot hold the pod
    state_of_row: npt.NDArray[np.int32]  # (rows,)

    def components(self, row: int) -> dict[str, float]:
        state = int(self.state_of_row[row])
        points = {name: float(getattr(self.by_state, name)[state]) for name in COMPONENTS}
        points["raw"] = float(self.by_state.raw[state])
        return points

    def per_row(self) -> ScoreBreakdown:
        """The breakdown gathered to every row (for `explain`)."""
        states = self.state_of_row  # states: (rows,)
        gathered = {f.name: getattr(self.by_state, f.name)[states] for f in fields(ScoreBreakdown)}
        return ScoreBreakdown(**gathered)

    def normalized(self) -> FloatArray:  # (rows,)
        return self.normalized_by_state[self.state_of_row]


@dataclass(frozen=True)
class _Memo:
    arrays: GpuStateArrays
    breakdown: ScoreBreakdown
    normalized: FloatArray


class NVLink:
    name = NAME

    def __init__(self, weights: ScoreWeights = DEFAULT_WEIGHTS, weight: float = 1.0) -> None:
        self.weights = weights
        self.weight = weight
        self._memo: dict[int, _Memo] = {}

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if pod.gpus == 0 or pod.nvlink_policy != "required":
            return []
        failed = ~one_domain_feasible(snapshot, pod.gpus) & ~dra_gpu_rows(pod, snapshot)  # (rows,)
        reason = f"node(s) had no NVLink domain with {pod.gpus} free GPUs"
        return [Rejection(reason, failed, True, NAME)]

    def narrow(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> list[Rejection]:
        scores = self.scores(pod, snapshot) if pod.gpus >= 2 else None
        if scores is None:
            return []
        single = scores.by_state.single_domain_possible  # single: (states,)
        in_one = single[scores.state_of_row]  # in_one: (rows,)
        feasible = feasible & ~dra_gpu_rows(pod, snapshot)  # feasible: (rows,)
        if not (feasible & in_one).any():
            return []
        failed = feasible & ~in_one  # failed: (rows,)
        if not failed.any():
            return []
        return [Rejection(SPLIT_REASON, failed, False, NAME)]

    def scores(self, pod: PodInfo, snapshot: Snapshot) -> NVLinkScores | None:
        """Scores of every row for `pod`; None for a pod without GPUs."""
        if pod.gpus == 0:
            return None
        arrays = snapshot.gpu_state_arrays()
        memo = self._memo.get(pod.gpus)
        if memo is None or memo.arrays is not arrays:
            breakdown = score_nodes(
                pod.gpus, arrays.free, arrays.size, arrays.total, arrays.used, self.weights
            )
            memo = _Memo(arrays, breakdown, np.nan_to_num(normalize(breakdown.raw), nan=0.0))
            self._memo[pod.gpus] = memo
        return NVLinkScores(memo.breakdown, memo.normalized, snapshot.gpu_state.copy())

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        scores = self.scores(pod, snapshot)
        if scores is None:
            return None
        state.data[NAME] = scores
        return scores.normalized()  # (rows,)
