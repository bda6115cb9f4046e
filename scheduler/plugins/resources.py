"""NodeResourcesFit: cpu, memory, ephemeral-storage, pods, nvidia.com/gpu, MIG profiles and
extended resources (example.com/foo, hugepages-*).

A node fails for every resource whose free amount (allocatable minus what the pods counted on it
request) is below the pod's request, with kube-scheduler's reasons ("Insufficient cpu",
"Too many pods"). Evicting pods can fix these, so the rejections are resolvable. The pod's
request is kube-scheduler's effective request (see `scheduler.model.objects.pod_requests`: init
containers, sidecars, pod-level resources, overhead).

Extended resources have no columns in the cache: few pods ask for them, so their free amount is
derived from the cache's nodes and pods when such a pod is filtered, and kept until the cache
changes (`ClusterCache.generation`). Pods without extended requests skip this entirely.

An extended resource a DeviceClass serves is left to DynamicResources on the nodes that have
none of it allocatable (`scheduler.plugins.extended_resources`), as kube-scheduler 1.37 does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import PODS, RESOURCES
from scheduler.plugins.extended_resources import mapped_resources, node_delegates
from scheduler.state.cache import ClusterCache
from topology.text import clip

NAME = "NodeResourcesFit"


MAX_RESOURCE_NAME = 317
"""Longest valid resource name: a DNS-subdomain prefix (253), "/", a name (63)."""


def insufficient_reason(resource: str) -> str:
    """kube-scheduler's reason for a resource the node lacks; a name longer than any valid one
    (the cache keeps what a pod requests unchecked) is clipped so the reason stays bounded."""
    if resource == "pods":
        return "Too many pods"
    return f"Insufficient {clip(resource, MAX_RESOURCE_NAME)}"


class ScalarFree:
    """Free amount per node row of extended resources, derived from the cache and memoized per
    cache generation."""

    def __init__(self) -> None:
        self._generation = -1
        self._cache: ClusterCache | None = None
        self._free: dict[str, npt.NDArray[np.int64]] = {}  # resource -> (rows,)

    def free(self, cache: ClusterCache, resource: str) -> npt.NDArray[np.int64]:  # (rows,)
        if cache is not self._cache or cache.generation != self._generation:
            self._cache, self._generation, self._free = cache, cache.generation, {}
        found = self._free.get(resource)
        if found is None or found.shape[0] != cache.rows:
            found = np.zeros(cache.rows, dtype=np.int64)  # found: (rows,)
            for name, node in cache.nodes.items():
                amount = node.scalar.get(resource, 0)
                if amount:
                    found[cache.row_of[name]] += amount
            for state in cache.pods.values():
                amount = state.info.scalar.get(resource, 0)
                row = cache.row_of.get(state.node)
                if amount and row is not None:
                    found[row] -= amount
            self._free[resource] = found
        return found


class NodeResourcesFit:
    name = NAME

    def __init__(self) -> None:
        self._scalar = ScalarFree()

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        free = snapshot.free  # free: (rows, resources)
        mapped = mapped_resources(pod, snapshot.cache.dra)
        rejections = []
        for index in np.flatnonzero(pod.requests > 0):
            failed = free[:, index] < pod.requests[index]  # failed: (rows,)
            if RESOURCES[index] in mapped:
                failed &= ~node_delegates(snapshot, RESOURCES[index])
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
                if resource in mapped:
                    failed &= ~node_delegates(snapshot, resource)
                rejections.append(Rejection(insufficient_reason(resource), failed, True, NAME))
        for resource, amount in pod.scalar.items():
            failed = self._scalar.free(snapshot.cache, resource) < amount  # failed: (rows,)
            if resource in mapped:
                failed &= ~node_delegates(snapshot, resource)
            rejections.append(Rejection(insufficient_reason(resource), failed, True, NAME))
        return rejections
