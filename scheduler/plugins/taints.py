"""TaintToleration and NodeUnschedulable filters.

Taints with effect NoSchedule or NoExecute that the pod does not tolerate reject the node
(PreferNoSchedule does not). Nodes share a handful of distinct taint sets, so the check runs once
per set and is broadcast to the rows through the cache's taint-group index.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.fields import Taint, Toleration
from scheduler.model.objects import PodInfo

TAINT_NAME = "TaintToleration"
UNSCHEDULABLE_NAME = "NodeUnschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """The Kubernetes toleration rule (an empty key with Exists tolerates every taint)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("Equal", "") and toleration.value == taint.value


def first_untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect not in FILTERED_EFFECTS:
            continue
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None


class TaintToleration:
    name = TAINT_NAME

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        by_reason: dict[str, list[int]] = {}
        for group, taints in enumerate(snapshot.taint_groups):
            taint = first_untolerated(taints, pod.tolerations)
            if taint is not None:
                by_reason.setdefault(f"node(s) had untolerated taint {taint}", []).append(group)
        groups = snapshot.taint_group  # groups: (rows,)
        return [
            Rejection(reason, np.isin(groups, members), False, TAINT_NAME)
            for reason, members in sorted(by_reason.items())
        ]


class NodeUnschedulable:
    name = UNSCHEDULABLE_NAME

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return []
        failed = snapshot.unschedulable  # failed: (rows,)
        if not failed.any():
            return []
        return [Rejection("node(s) were unschedulable", failed.copy(), False, UNSCHEDULABLE_NAME)]
