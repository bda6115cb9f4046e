"""NodeResourcesFit: cpu, memory, ephemeral-storage, pods, nvidia.com/gpu and MIG profiles.

A node fails for every resource whose free amount (allocatable minus what the pods counted on it
request) is below the pod's request, with kube-scheduler's reasons ("Insufficient cpu",
"Too many pods"). Evicting pods can fix these, so the rejections are resolvable.
"""

from __future__ import annotations

import numpy as np

from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.objects import PODS, RESOURCES, PodInfo

NAME = "NodeResourcesFit"


def insufficient_reason(resource: str) -> str:
    return "Too many pods" if resource == "pods" else f"Insufficient {resource}"


class NodeResourcesFit:
    name = NAME

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        free = snapshot.free  # free: (rows, resources)
        rejections = []
        for index in np.flatnonzero(pod.requests > 0):
            failed = free[:, index] < pod.requests[index]  # failed: (rows,)
            if index == PODS or failed.any():
                rejections.append(
                    Rejection(insufficient_reason(RESOURCES[index]), failed, True, NAME)
                )
        if pod.mig:
            mig_free = snapshot.mig_free  # mig_free: (rows, profiles)
            for resource, amount in sorted(pod.mig.items()):
                if resource in snapshot.mig_profiles:
                    column = snapshot.mig_profiles.index(resource)
                    failed = mig_free[:, column] < amount  # failed: (rows,)
                else:
                    failed = np.ones(snapshot.rows, dtype=bool)  # failed: (rows,)
                rejections.append(Rejection(insufficient_reason(resource), failed, True, NAME))
        return rejections
