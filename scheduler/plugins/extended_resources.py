"""Which of a pod's extended resources DynamicResources serves, node by node: kube-scheduler
1.37's "extended resources backed by DRA" (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/
plugins/noderesources/fit.go `shouldDelegateResourceToDRA`, and dynamicresources/
extendeddynamicresources.go `filterExtendedResources`).

    mapped_resources(pod, store) -> {resource: DeviceClass}
    node_delegates(snapshot, resource) -> (rows,) bool
    ExtendedClaims(pod, classes)          the pod's extended-resource claim per node row

A resource the pod requests is served through DRA on a node when a DeviceClass maps it
(`DraStore.class_for_resource`) and the node's allocatable has none of it (a device plugin
offering it on a node wins there). NodeResourcesFit leaves such a resource out on such nodes;
DynamicResources allocates it through the pod's extended-resource claim
(`scheduler.dra.extended`); the device-plugin GPU accounting (the cache's GPU indices, NVLink,
placement) counts no GPU for the pod there.

Cost: a pod without extended requests costs one attribute test; a cluster without DeviceClasses
maps nothing.
"""

from __future__ import annotations

import numpy as np

from scheduler.dra.extended import ExtendedClaim, extended_claim
from scheduler.framework.interface import BoolArray
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import ResourceClaim
from scheduler.model.objects import NodeInfo, PodInfo
from scheduler.model.resources import GPU, GPU_RESOURCE
from scheduler.state.dra import DraStore
from topology.mig import is_mig_resource


def mapped_resources(pod: PodInfo, store: DraStore) -> dict[str, str]:
    """Extended resource -> the DeviceClass serving it, for those the pod's containers request."""
    if not pod.extended:
        return {}
    found: dict[str, str] = {}
    for container in pod.extended:
        for resource in container.amounts:
            if resource not in found:
                class_name = store.class_for_resource(resource)
                if class_name is not None:
                    found[resource] = class_name
    return found


def gpus_delegated(pod: PodInfo, store: DraStore) -> bool:
    """Whether the pod's nvidia.com/gpu request goes through DRA on nodes without GPUs in their
    allocatable."""
    return pod.gpus > 0 and store.class_for_resource(GPU_RESOURCE) is not None


def node_allocatable(node: NodeInfo, resource: str) -> int:
    """The node's allocatable amount of an extended resource (GPU, MIG profile, or scalar)."""
    if resource == GPU_RESOURCE:
        return int(node.allocatable[GPU])
    if is_mig_resource(resource):
        return node.mig.get(resource, 0)
    return node.scalar.get(resource, 0)


def node_delegates(snapshot: Snapshot, resource: str) -> BoolArray:  # (rows,)
    """Rows whose node has none of `resource` allocatable (there DRA serves it, if mapped)."""
    if resource == GPU_RESOURCE:
        return np.asarray(snapshot.allocatable[:, GPU] == 0)
    delegates = np.ones(snapshot.rows, dtype=bool)  # delegates: (rows,)
    for name, node in snapshot.cache.nodes.items():
        if node_allocatable(node, resource) > 0:
            delegates[snapshot.cache.row_of[name]] = False
    return delegates


class ExtendedClaims:
    """One pod's extended resources that DeviceClasses serve (`classes`: resource -> class),
    and its claim for them per node row: nodes differ in which of the resources they leave to
    DRA (the variant), and each variant has its own claim (`scheduler.dra.extended`)."""

    def __init__(self, pod: PodInfo, classes: dict[str, str]) -> None:
        self.pod = pod
        self.classes = classes
        self._delegates: dict[str, BoolArray] = {}  # resource -> (rows,)
        self._any: BoolArray = np.zeros(0, dtype=bool)  # (rows,) after `prepare`
        self._claims: dict[tuple[str, ...], ExtendedClaim | None] = {}

    def prepare(self, snapshot: Snapshot) -> None:
        """Read which rows leave each resource to DRA (once per scheduling cycle)."""
        self._delegates = {
            resource: node_delegates(snapshot, resource) for resource in self.classes
        }
        self._any = np.zeros(snapshot.rows, dtype=bool)  # _any: (rows,)
        for delegates in self._delegates.values():
            self._any |= delegates

    def delegated_rows(self) -> BoolArray:  # (rows,)
        """Rows that leave at least one of the resources to DRA (after `prepare`)."""
        return self._any

    def variant_on(self, row: int) -> tuple[str, ...]:
        """The resources node `row` leaves to DRA, sorted."""
        return tuple(r for r in sorted(self.classes) if self._delegates[r][row])

    def claim_on(self, row: int) -> ExtendedClaim | None:
        """The claim for node `row` (None: the node leaves none of the resources to DRA)."""
        return self._claim(self.variant_on(row))

    def all_claims(self) -> tuple[ResourceClaim, ...]:
        """The claim for every resource (for properties that hold for every variant)."""
        made = self._claim(tuple(sorted(self.classes)))
        return () if made is None else (made.claim,)

    def _claim(self, variant: tuple[str, ...]) -> ExtendedClaim | None:
        if variant not in self._claims:
            pod = self.pod
            classes = {resource: self.classes[resource] for resource in variant}
            self._claims[variant] = (
                extended_claim(pod.namespace, pod.name, pod.uid, pod.extended, classes)
                if classes
                else None
            )
        return self._claims[variant]
