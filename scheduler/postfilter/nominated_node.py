"""`NominatedNode`, the Narrow plugin that sends a preemptor to the node the PostFilter made room
on (`scheduler.postfilter.reclaim.Reclaimer.nominated_node`), as kube-scheduler evaluates a
pod's nominated node first."""

from __future__ import annotations

from scheduler.framework.interface import BoolArray, CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.postfilter.reclaim import Reclaimer

NOMINATED_NODE = "NominatedNode"
NOMINATED_REASON = "node(s) passed, but the pod's nominated node is preferred"


class NominatedNode:
    """Narrow plugin: a pod reclaim made room for goes to its nominated node whenever it fits
    there, as kube-scheduler evaluates a pod's nominated node first; without it the pod could
    land elsewhere and the evictions would have been for nothing. Runs after the NVLink
    narrower, so a one-domain placement elsewhere still wins over a split one there."""

    name = NOMINATED_NODE

    def __init__(self, reclaimer: Reclaimer) -> None:
        self.reclaimer = reclaimer

    def narrow(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> list[Rejection]:
        node = self.reclaimer.nominated_node(pod)
        if node is None:
            return []
        row = snapshot.cache.row_of.get(node)
        if row is None or row >= feasible.shape[0] or not feasible[row]:
            return []
        others = feasible.copy()  # others: (rows,)
        others[row] = False
        if not others.any():
            return []
        return [Rejection(NOMINATED_REASON, others, False, NOMINATED_NODE)]
