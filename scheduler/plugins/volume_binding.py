"""VolumeBinding: pods with PersistentVolumeClaims, as kube-scheduler's plugin of that name.

    pre_filter(pod, cache)      "" or the PreFilter message, for every node at once:
                                persistentvolumeclaim "x" not found / is being deleted,
                                pod has unbound immediate PersistentVolumeClaims, and
                                VolumeRestrictions' ReadWriteOncePod rule (a claim with that
                                access mode used by another pod)
    VolumeBinding.filter        (rows,) masks, all unresolvable:
      bound claims              the PV's required nodeAffinity must match the node
                                ("node(s) had volume node affinity conflict"); a PV that does
                                not exist rejects every node it is checked on
      unbound WaitForFirstConsumer claims
                                distinct available PVs whose nodeAffinity fits the node
                                (`scheduler.volumes.match_claims`), or, for the claims left
                                without one, dynamic provisioning: a provisioner other than
                                kubernetes.io/no-provisioner and allowedTopologies matching the
                                node ("node(s) didn't find available persistent volumes to bind")
    plan_volumes                for the chosen node: the PVs to pre-bind and the claims to mark
    assume_volumes              in the cycle, before the next pod's: the store shows them taken
    prebind_volumes             in the binding task, before the Binding: the API writes

A pod without claims costs one attribute test. The data of one pod's filter pass (candidate PVs
per claim, the (volumes, rows) fit matrix, provisioning masks) stays in the cycle state for
`plan_volumes`.

Per node, the greedy matching depends only on which candidate PVs fit it, so nodes are grouped
by that pattern (usually a handful: local PVs fit one node each) and the matching runs once per
group in Python.

Not implemented (kube-scheduler does them): waiting in PreBind until the PV controller has bound
the claims (the pod is bound right after the writes; the kubelet waits for the volume), CSI
storage capacity, and the VolumeBinding score.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from kubernetes_asyncio import client

from scheduler.cache import ClusterCache
from scheduler.framework.interface import BoolArray, CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.kube.volumes import SELECTED_NODE_ANNOTATION, prebind_volume, select_node
from scheduler.objects import NodeSelectorTerm, PodInfo
from scheduler.plugins.node_affinity import term_matches
from scheduler.volumes import (
    Claim,
    ClaimRef,
    Volume,
    VolumeStore,
    find_matching_volume,
    match_claims,
)
from topology.text import clip

NAME = "VolumeBinding"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
READ_WRITE_ONCE_POD_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)


@dataclass(frozen=True)
class PodVolumes:
    """A pod's claims, sorted as kube-scheduler's GetPodVolumeClaims sorts them."""

    bound: tuple[Claim, ...]
    to_bind: tuple[Claim, ...]
    """Unbound claims of a WaitForFirstConsumer class that name no volume yet."""


def pod_volumes(pod: PodInfo, store: VolumeStore) -> PodVolumes | str:
    """The pod's claims by state, or the PreFilter message that makes it unschedulable."""
    claims: list[Claim] = []
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{clip(name)}" not found'
        if claim.terminating:
            return f'persistentvolumeclaim "{clip(name)}" is being deleted'
        claims.append(claim)
    bound: list[Claim] = []
    to_bind: list[Claim] = []
    for claim in claims:
        if claim.bound:
            bound.append(claim)
            continue
        storage_class = store.classes.get(claim.class_name) if claim.class_name else None
        if storage_class is None or not storage_class.wait_for_first_consumer:
            return UNBOUND_IMMEDIATE
        if claim.volume_name:  # pre-bound by name: the PV controller's to bind
            return UNBOUND_IMMEDIATE
        to_bind.append(claim)
    return PodVolumes(tuple(bound), tuple(to_bind))


def read_write_once_pod_in_use(pod: PodInfo, store: VolumeStore, cache: ClusterCache) -> bool:
    """Whether another pod the cache counts (bound, assumed or nominated) uses one of the pod's
    ReadWriteOncePod claims (kube-scheduler's VolumeRestrictions PreFilter)."""
    exclusive = set()
    for name in pod.claims:
        claim = store.claim(pod.namespace, name)
        if claim is not None and READ_WRITE_ONCE_POD in claim.access_modes:
            exclusive.add(name)
    if not exclusive:
        return False
    return any(
        key != pod.key
        and state.info.namespace == pod.namespace
        and not exclusive.isdisjoint(state.info.claims)
        for key, state in cache.pods.items()
    )


def pre_filter(pod: PodInfo, cache: ClusterCache) -> str:
    """The PreFilter message of VolumeBinding and, for ReadWriteOncePod claims, of
    VolumeRestrictions, for every node at once; "" when the pod has no claims or they can be
    checked per node. Unresolvable: the pod waits for a claim, PV, StorageClass or pod event."""
    if not pod.claims:
        return ""
    found = pod_volumes(pod, cache.volumes)
    if isinstance(found, str):
        return found
    if read_write_once_pod_in_use(pod, cache.volumes, cache):
        return READ_WRITE_ONCE_POD_CONFLICT
    return ""


def _terms_match(snapshot: Snapshot, terms: tuple[NodeSelectorTerm, ...]) -> BoolArray:
    """(rows,) nodes matching any of `terms` (none: no node)."""
    matched = np.zeros(snapshot.rows, dtype=bool)  # matched: (rows,)
    for term in terms:
        matched |= term_matches(snapshot, term)
    return matched


def volume_fits(snapshot: Snapshot, volume: Volume) -> BoolArray:
    """(rows,) nodes satisfying the PV's required nodeAffinity (all without one)."""
    if volume.node_terms is None:
        return np.ones(snapshot.rows, dtype=bool)
    return _terms_match(snapshot, volume.node_terms)


@dataclass
class _Matching:
    """One pod's unbound-claim data, kept in the cycle state for `plan_volumes`."""

    claims: tuple[Claim, ...]
    candidates: dict[str, list[Volume]]
    """Claim key -> PVs it could take on some node (node affinity aside), by name."""
    names: list[str]
    """Row order of `fits`."""
    fits: BoolArray  # (volumes, rows)
    provisionable: dict[str, BoolArray]  # claim key -> (rows,)


def _candidates(claim: Claim, store: VolumeStore) -> list[Volume]:
    """PVs `find_matching_volume` could give `claim` on a node that fits them all."""
    return [
        volume
        for volume in store.volumes_of_class(claim.class_name)
        if find_matching_volume(claim, (volume,), lambda _: True) is volume
    ]


def _matching(snapshot: Snapshot, store: VolumeStore, claims: tuple[Claim, ...]) -> _Matching:
    candidates = {claim.key: _candidates(claim, store) for claim in claims}
    volumes = {v.name: v for found in candidates.values() for v in found}
    names = sorted(volumes)
    fits = np.ones((len(names), snapshot.rows), dtype=bool)  # fits: (volumes, rows)
    for index, name in enumerate(names):
        if volumes[name].node_terms is not None:
            fits[index] = volume_fits(snapshot, volumes[name])
    provisionable: dict[str, BoolArray] = {}
    for claim in claims:
        storage_class = store.classes.get(claim.class_name)
        if storage_class is None or not storage_class.provisions:
            provisionable[claim.key] = np.zeros(snapshot.rows, dtype=bool)
        elif not storage_class.allowed_topologies:
            provisionable[claim.key] = np.ones(snapshot.rows, dtype=bool)
        else:
            provisionable[claim.key] = _terms_match(snapshot, storage_class.allowed_topologies)
    return _Matching(claims, candidates, names, fits, provisionable)


def _assign(matching: _Matching, fitting: set[str]) -> tuple[dict[str, Volume], list[Claim]]:
    return match_claims(
        matching.claims, lambda c: matching.candidates[c.key], lambda v: v.name in fitting
    )


def _bindable(matching: _Matching, rows: int) -> BoolArray:
    """(rows,) nodes where every unbound claim gets a PV or can be provisioned."""
    volumes = len(matching.names)
    if volumes == 0:
        patterns = np.zeros((1, 0), dtype=bool)  # patterns: (groups, volumes)
        group = np.zeros(rows, dtype=np.intp)  # group: (rows,)
    else:
        packed = np.packbits(matching.fits, axis=0)  # packed: (ceil(volumes / 8), rows)
        unique, inverse = np.unique(packed.T, axis=0, return_inverse=True)
        patterns = np.unpackbits(unique, axis=1, count=volumes).astype(bool)
        group = np.asarray(inverse).reshape(-1)
    ok = np.zeros(rows, dtype=bool)  # ok: (rows,)
    for index, pattern in enumerate(patterns):
        fitting = {matching.names[i] for i in np.flatnonzero(pattern)}
        _, left = _assign(matching, fitting)
        here = group == index  # here: (rows,)
        for claim in left:
            here &= matching.provisionable[claim.key]
        ok |= here
    return ok


class VolumeBinding:
    """The filter (see the module docstring)."""

    name = NAME

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if not pod.claims:
            return []
        store = snapshot.cache.volumes
        found = pod_volumes(pod, store)
        if isinstance(found, str):
            return [Rejection(found, np.ones(snapshot.rows, dtype=bool), False, NAME)]
        rejections: list[Rejection] = []
        conflict = np.zeros(snapshot.rows, dtype=bool)  # conflict: (rows,)
        for claim in found.bound:
            volume = store.volume(claim.volume_name)
            if volume is None:  # checking stops at the missing PV, as kube-scheduler's does
                rejections.append(Rejection(PV_NOT_EXIST, ~conflict, False, NAME))
                break
            conflict |= ~volume_fits(snapshot, volume)
        if conflict.any():
            rejections.insert(0, Rejection(NODE_CONFLICT, conflict, False, NAME))
        if found.to_bind:
            matching = _matching(snapshot, store, found.to_bind)
            state.data[NAME] = matching
            unbindable = ~_bindable(matching, snapshot.rows)  # unbindable: (rows,)
            if unbindable.any():
                rejections.append(Rejection(BIND_CONFLICT, unbindable, False, NAME))
        return rejections


# -- after the choice: plan, assume, write -----------------------------------------------------


@dataclass(frozen=True)
class VolumePlan:
    """What the pod's PreBind writes for its node: PVs to pre-bind, claims to mark."""

    pod_key: str
    node: str
    bindings: tuple[tuple[Claim, Volume], ...]
    """(claim, the PV as it is now) for each PV whose claimRef must be set."""
    provisions: tuple[Claim, ...]
    """Claims (as they are now) to annotate with the selected node."""


def plan_volumes(state: CycleState, row: int, node: str, pod: PodInfo) -> VolumePlan | None:
    """The plan for `pod` on node `row` (None: nothing to write). The filter found the node
    feasible, so every claim has a PV or a provisioner there."""
    matching = state.data.get(NAME)
    if not isinstance(matching, _Matching):
        return None
    fitting = {name for i, name in enumerate(matching.names) if matching.fits[i, row]}
    chosen, left = _assign(matching, fitting)
    bindings = []
    for claim in matching.claims:
        volume = chosen.get(claim.key)
        ref = volume.claim_ref if volume is not None else None
        if volume is not None and ref != ClaimRef(claim.namespace, claim.name, claim.uid):
            bindings.append((claim, volume))
    provisions = tuple(c for c in left if c.annotations.get(SELECTED_NODE_ANNOTATION) != node)
    if not bindings and not provisions:
        return None
    return VolumePlan(pod.key, node, tuple(bindings), provisions)


def assume_volumes(store: VolumeStore, plan: VolumePlan) -> None:
    """Show the plan's writes in the store now (`VolumeStore.revert` takes them back)."""
    for claim, volume in plan.bindings:
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        store.assume_volume(plan.pod_key, replace(volume, claim_ref=ref))
    for claim in plan.provisions:
        annotations = {**claim.annotations, SELECTED_NODE_ANNOTATION: plan.node}
        store.assume_claim(plan.pod_key, replace(claim, annotations=annotations))


async def prebind_volumes(core_api: client.CoreV1Api, plan: VolumePlan, timeout: float) -> None:
    """The plan's API writes, PVs first, as kube-scheduler's bindAPIUpdate; the first failure
    raises `VolumeBindingError` (writes already done stay: the PV controller owns them now)."""
    for claim, volume in plan.bindings:
        claim_ref = (claim.namespace, claim.name, claim.uid, claim.resource_version)
        await prebind_volume(
            core_api,
            volume.name,
            volume.resource_version,
            claim_ref,
            not volume.bound_to(claim),
            timeout,
        )
    for claim in plan.provisions:
        await select_node(
            core_api, claim.namespace, claim.name, claim.resource_version, plan.node, timeout
        )
