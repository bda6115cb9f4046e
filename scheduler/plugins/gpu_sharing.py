"""GpuSharing: replicas of time-sliced (or MPS) GPUs, the filter and the pack-or-spread score.

On a node whose device plugin shares its GPUs (`NodeInfo.sharing`, see
`scheduler.model.gpu_sharing`) a pod takes replicas: its request of the node's shared resource
(`nvidia.com/gpu`, or `nvidia.com/gpu.shared` when the plugin renames it), one replica on each of
that many distinct physical GPUs (`topology.replicas`). NodeResourcesFit already checks the
advertised count; this plugin adds what the count does not say. Nodes that do not share their
GPUs are neither filtered nor preferred here.

Filter, on sharing nodes only:
- a pod asking for more than one replica does not fit a node whose plugin refuses it (MPS, or
  time-slicing with `sharing.failRequestsGreaterThanOne`): the kubelet would fail it with
  UnexpectedAdmissionError. Not resolvable. The request counted is the pod's sum over its
  containers, a cautious reading of the plugin's per-container rule;
- a pod asking for N replicas needs N GPUs with a free replica, GPUs reported sick left out
  (`ClusterCache.set_sick_gpus`). Resolvable (evicting a sharer frees a replica).

Score (`sharing.timeSlicedPlacement`): `topology.replicas.node_preference` per sharing node,
0..100: pack prefers the node whose chosen GPUs already hold the most replicas, then the most
partly used GPUs; spread the opposite. A node that does not share its GPUs scores as a sharing
node with every GPU free would (its GPUs are whole). Abstains (None) for a pod that takes no
replicas anywhere or when no feasible node shares its GPUs.
"""

from __future__ import annotations

import numpy as np

from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from topology.replicas import PACK, node_preference, node_preferences

NAME = "GpuSharing"
REFUSED_REASON = "node(s) refuse more than one replica of a shared GPU per pod"


class ReplicaPlacement:
    """The GpuSharing filter and score; see the module docstring."""

    name = NAME

    def __init__(
        self, policy: str = PACK, weight: float = 10.0, fail_requests_greater_than_one: bool = False
    ) -> None:
        self.policy = policy
        self.weight = weight
        self.fail_requests_greater_than_one = fail_requests_greater_than_one

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        table = snapshot.cache.replicas
        count = table.requested(snapshot.rows, pod.gpus, pod.scalar)  # count: (rows,)
        if not count.any():
            return []
        refusing = table.mps[: snapshot.rows] | (self.fail_requests_greater_than_one)  # (rows,)
        refused = (count > 1) & refusing  # refused: (rows,)
        sick = snapshot.cache.gpu_sick  # sick: (capacity, gpus)
        short = (count > table.open_gpus(snapshot.rows, sick)) & ~refused  # short: (rows,)
        rejections = []
        if refused.any():
            rejections.append(Rejection(REFUSED_REASON, refused, False, NAME))
        if short.any():
            most = int(count[short].max())
            reason = f"node(s) had fewer than {most} GPUs with a free replica"
            rejections.append(Rejection(reason, short, True, NAME))
        return rejections

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        table = snapshot.cache.replicas
        count = table.requested(snapshot.rows, pod.gpus, pod.scalar)  # count: (rows,)
        rows = np.flatnonzero((count > 0) & feasible[: snapshot.rows])  # rows: (scored,)
        if rows.size == 0:
            return None
        whole = node_preference(np.zeros(1, dtype=np.int64), 2, 1, self.policy)
        points = np.full(snapshot.rows, whole, dtype=np.float64)  # points: (rows,)
        taken = table.effective(snapshot.rows, snapshot.cache.gpu_sick)  # (rows, gpus)
        points[rows] = node_preferences(
            taken[rows],
            table.per_gpu[rows],
            table.gpu_count[rows],
            count[rows],
            self.policy,
        )
        return points
