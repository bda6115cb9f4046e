"""The scheduler's view of the cluster: nodes, the pods on them, and pods it has assumed.

Every pod bound to a node counts against it, whoever bound it, until it finishes or is deleted.
Usage is kept per node row in numpy arrays that filter and score plugins read whole (see
`Snapshot`); a change touches only the rows of the nodes involved.

Pod states (kube-scheduler's cache since it stopped expiring assumed pods, with the binding
done by this process):

    (not in cache) --assume--> Assumed ----add_pod: bound on its node------------> Added
          ^                    | |  ^ |                                            |  ^
          |  forget: the       | |  | | finish_binding: the Binding succeeded;     |  | update_pod
          |  binding failed    | |  +-+ it stays Assumed and never expires         +--+
          +--------------------+ |                                                 |
          |                      +----add_pod: bound on another node (replaced) -->|
          |                                                                        |
          +------ remove_pod (deleted, or missing from a relist), or add_pod ------+
                  of a finished pod: from Assumed as from Added

- assume: the scheduling cycle chose a node and GPUs; they are taken at once so the next cycle
  sees them used, before the binding call returns.
- forget: the binding failed (every error, of any type); the pod's resources are given back.
- finish_binding: the Binding succeeded. The pod stays assumed until the informer shows it,
  however late that is: a watch that lags must not make a bound pod's GPUs look free (assumed
  pods whose binding succeeded are never expired, as in kube-scheduler since Kubernetes 1.23).
- add_pod for an assumed pod bound on its node confirms it (its GPU indices stay the ones
  chosen); bound on another node, the informer's view replaces it; finished, it is removed. For
  any other bound pod it adds it, taking the GPU indices from its `gpu-scheduler.io/gpus`
  annotation, or from the documented fill order of `topology.occupancy` when it has none. On a
  node with no GPU allocatable, a pod asking for nvidia.com/gpu holds no GPU index and no GPU
  of the row: a DeviceClass serves its GPUs through DRA (its claim holds the devices). On a
  node whose device plugin shares its GPUs (time-slicing, MPS: `NodeInfo.sharing`) a pod's
  indices name the physical GPUs it holds one replica of each (`scheduler.state.replicas`),
  several pods may name the same GPU up to its replicas, and a pod naming none is counted where
  the plugin's default policy would put it.
- remove_pod: the informer saw the pod deleted (a watch DELETED event, or a relist that no
  longer lists it); assumed or not, its resources are given back.

Reservations (room held for a nominated pod, `reserve`) are a different mechanism: they expire
after a TTL (`expire_reservations`).

The node rows themselves (the arrays, their growth, label columns and GPU states) are a
`scheduler.state.node_table.NodeTable`, which `ClusterCache` extends with the pods.

Every entry counted on a known node row (pods in any state above, and reservations) is also in
`pod_counts` (`scheduler.state.pod_counts.PodCounts`): per node row, the pods each selector of pod
affinity and topology spread matches and the pods holding each pod (anti-)affinity term. Every
change of `pods`, of an entry's pod record, or of the node rows goes through the hooks here that
keep those tables in step.

All methods are synchronous and run on the event loop thread, so a scheduling cycle's filter and
score see one consistent state without copying: the arrays are the snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import structlog

from scheduler.model.gpu_sharing import replicas_requested
from scheduler.model.objects import NodeInfo, PodInfo
from scheduler.model.resources import GPU
from scheduler.model.volumes import VolumeStore
from scheduler.state.dra import DraStore
from scheduler.state.node_table import NodeTable
from scheduler.state.pod_counts import NamespaceLabelStore, PodCounts
from scheduler.state.replicas import UNANNOTATED_POLICY, ReplicaTable
from topology.occupancy import choose_gpus

log = structlog.get_logger("gpu-scheduler.state.cache")

RESERVATION_PREFIX = "reservation:"
"""Cache key prefix of the room held for a nominated pod."""


def own_keys(pod_key: str) -> tuple[str, str]:
    """Cache keys of a pod's own entries: itself and the room reserved for it (which pod
    affinity and topology spread never count for the pod itself)."""
    return pod_key, RESERVATION_PREFIX + pod_key


@dataclass
class PodState:
    """A pod counted on a node, and the GPU indices it holds there (or a reservation)."""

    info: PodInfo
    node: str
    gpus: tuple[int, ...]
    assumed: bool
    binding_finished_at: float | None = None
    """Set on an assumed pod when its Binding succeeded (it waits for the informer)."""
    reserved_at: float | None = None
    """Set for a reservation: when reclaim nominated the node for the pod."""
    observed: bool = False
    """The GPU indices come from dcgm-exporter (what the device plugin really gave the pod),
    not from the scheduler's choice or the fill order; they are kept on later updates."""


class ClusterCache(NodeTable):
    """Nodes and pods in arrays; see the module docstring for the pod state machine."""

    def __init__(self) -> None:
        super().__init__()
        self.pods: dict[str, PodState] = {}
        self.pods_on_node: dict[str, set[str]] = {}
        self._released: dict[str, PodState] = {}
        """Reservations taken out by `released` blocks now running, to restore at their end."""
        self.with_pod_affinity: set[str] = set()
        """Keys of counted pods with pod (anti-)affinity terms (`_index_pod_affinity`)."""
        self.with_required_anti_affinity: set[str] = set()
        """Keys of counted pods with required pod anti-affinity terms."""
        self.namespace_labels = NamespaceLabelStore()
        """Labels of each namespace, for pod affinity's namespaceSelector (namespace informer)."""
        self.pod_counts = PodCounts(self)
        """Counted pods per node row by selector, and pods' affinity terms per node row, for
        InterPodAffinity and PodTopologySpread; kept in step with `pods` here."""
        self.volumes = VolumeStore()
        """PersistentVolumeClaims, PersistentVolumes and StorageClasses (VolumeBinding)."""
        self.dra = DraStore()
        """DeviceClasses, ResourceSlices, ResourceClaims and in-flight allocations
        (DynamicResources)."""
        self.replicas = ReplicaTable()
        """Time-sliced (or MPS) replicas offered and taken per GPU (`scheduler.state.replicas`)."""

    # -- nodes ---------------------------------------------------------------------------------

    def add_or_update_node(self, node: NodeInfo) -> None:
        """Insert or replace a node, keeping the pods counted on it."""
        known = node.name in self.row_of
        row = self._write_node_row(node)
        self.replicas.set_node(row, node.sharing, node.topology.gpu_count)
        self.pods_on_node.setdefault(node.name, set())
        self._recount_usage(row)
        if not known:  # the pods that named it before it appeared count from now on
            for key in self.pods_on_node[node.name]:
                self.pod_counts.add(self.pods[key].info, row)

    def remove_node(self, name: str) -> None:
        """Forget a node; its pods stay known and count again if the node comes back."""
        row = self.row_of.get(name)
        if row is not None:
            for key in self.pods_on_node.get(name, ()):
                self.pod_counts.remove(self.pods[key].info, row)
        super().remove_node(name)

    def _recount_usage(self, row: int) -> None:
        """Rebuild one node's usage from the pods counted on it (after a node change)."""
        name = self.names[row]
        self.requested[row] = 0
        self.free[row] = self.allocatable[row]
        self.gpu_used[row] = False
        self.mig_requested[row] = 0
        self.replicas.clear(row)
        states = [self.pods[key] for key in self.pods_on_node.get(name, ())]
        wanted = {state.info.key: state.gpus or state.info.gpu_indices for state in states}
        # Pods that name their GPUs first, so a pod placed by the fill order cannot take them.
        for state in sorted(states, key=lambda st: (wanted[st.info.key] is None, st.info.key)):
            state.gpus = ()
            state.gpus = self._pick_gpus(row, state.info, wanted[state.info.key])
            self._charge(row, state, sign=1)
        self._recount_domains(row)

    # -- pods ----------------------------------------------------------------------------------

    def _charge(self, row: int, state: PodState, sign: int) -> None:
        requests = state.info.requests
        if state.info.gpus and not self.allocatable[row, GPU]:
            requests = requests.copy()  # GPUs from DRA: its claim holds them, not the row
            requests[GPU] = 0
        self.requested[row] += sign * requests
        self.free[row] = self.allocatable[row] - self.requested[row]
        for resource, amount in state.info.mig.items():
            mig_column = self._mig_column(resource)  # may widen the arrays: index after
            self.mig_requested[row, mig_column] += sign * amount
        if state.gpus and sign > 0:
            self.gpu_used[row, list(state.gpus)] = True
        self.replicas.add(row, state.gpus, sign)

    def _rebuild_gpu_used(self, row: int) -> None:
        """Mark exactly the GPUs held by the states counted on the row (after a removal: a
        reservation may hold the same GPUs as a leaving victim)."""
        self.gpu_used[row] = False
        for key in self.pods_on_node.get(self.names[row], ()):
            gpus = self.pods[key].gpus
            if gpus:
                self.gpu_used[row, list(gpus)] = True

    def _pick_gpus(self, row: int, pod: PodInfo, wanted: tuple[int, ...] | None) -> tuple[int, ...]:
        node = self.nodes[self.names[row]]
        if node.sharing is not None:
            return self._pick_replicas(row, pod, wanted)
        count = pod.gpus if self.allocatable[row, GPU] else 0
        if count == 0:
            return ()
        used = self.gpu_used[row, : node.topology.gpu_count]  # used: (gpus,)
        sick = self.gpu_sick[row, : node.topology.gpu_count]  # sick: (gpus,)
        if wanted is not None:
            if len(wanted) == count and all(
                g < node.topology.gpu_count and not used[g] for g in wanted
            ):
                return wanted
            log.warning(
                "gpu_annotation_conflict",
                pod=pod.key,
                node=node.name,
                annotated=list(wanted),
                detail="indices out of range, taken, or not matching the GPU request; "
                "using the fill order instead",
            )
        choice = choose_gpus(node.topology, used | sick, count)  # sick GPUs last resort only
        if choice is not None:
            return choice.gpus
        free = [int(g) for g in np.flatnonzero(~used)]
        if len(free) < count:
            log.warning("gpu_overcommit", pod=pod.key, node=node.name, requested=count, free=free)
        return tuple(free[:count])  # enough only with sick GPUs: the pod holds them anyway

    def _pick_replicas(
        self, row: int, pod: PodInfo, wanted: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        """The GPUs a pod on a sharing node holds one replica of each: the ones it names when
        they have a replica free, else the device plugin's default order."""
        node = self.nodes[self.names[row]]
        assert node.sharing is not None
        count = replicas_requested(pod.gpus, pod.scalar, node.sharing)
        gpu_count = node.topology.gpu_count
        if count == 0:
            return ()
        if wanted is not None:
            if len(wanted) == count and self.replicas.fits(row, gpu_count, wanted):
                return wanted
            log.warning(
                "gpu_annotation_conflict",
                pod=pod.key,
                node=node.name,
                annotated=list(wanted),
                detail="no free replica on a named GPU",
            )
        choice = self.replicas.choose(row, gpu_count, count, UNANNOTATED_POLICY)
        if not choice:
            log.warning("gpu_overcommit", pod=pod.key, node=node.name, requested=count)
        return choice

    def _insert(self, pod: PodInfo, node: str, gpus: tuple[int, ...] | None, assumed: bool) -> None:
        self.generation += 1
        state = PodState(pod, node, (), assumed)
        self.pods[pod.key] = state
        self._index_pod_affinity(pod.key, pod, counted=True)
        self.pods_on_node.setdefault(node, set()).add(pod.key)
        row = self.row_of.get(node)
        if row is None:  # node not known (yet): the pod is remembered and counted when it appears
            state.gpus = gpus or ()
            return
        state.gpus = self._pick_gpus(row, pod, gpus)
        self._charge(row, state, sign=1)
        self._recount_domains(row)
        self.pod_counts.add(pod, row)

    def _delete(self, key: str) -> PodState | None:
        state = self.pods.pop(key, None)
        if state is None:
            return None
        self._index_pod_affinity(key, state.info, counted=False)
        self.generation += 1
        self.pods_on_node.get(state.node, set()).discard(key)
        row = self.row_of.get(state.node)
        if row is not None:
            self.pod_counts.remove(state.info, row)
            self._charge(row, state, sign=-1)
            self._rebuild_gpu_used(row)
            if self._short_of_gpus(state.node):
                self._recount_usage(row)  # an overcommitted pod can now get real GPUs
            else:
                self._recount_domains(row)
        return state

    def _short_of_gpus(self, node: str) -> bool:
        """Whether a pod on `node` holds fewer GPU indices than it asks for (overcommit)."""
        row = self.row_of.get(node)
        if row is None or not self.allocatable[row, GPU]:
            return False  # no device-plugin GPUs: pods asking for GPUs got them through DRA
        return any(
            len(self.pods[key].gpus) < self.pods[key].info.gpus
            for key in self.pods_on_node.get(node, ())
        )

    def assume(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> None:
        """Count `pod` on `node` with `gpus` before its binding is confirmed."""
        if pod.key in self.pods:
            raise ValueError(f"pod {pod.key} is already in the cache")
        self._insert(pod, node, gpus, assumed=True)

    def finish_binding(self, key: str, now: float) -> None:
        """The binding call succeeded: the assumed pod waits for the informer to confirm it
        (it is never expired; see the module docstring)."""
        state = self.pods.get(key)
        if state is not None and state.assumed:
            state.binding_finished_at = now

    def forget(self, key: str) -> None:
        """Give back an assumed pod's resources (its binding failed), the volumes its cycle
        assumed it would pre-bind and the device allocations it decided."""
        self.volumes.revert(key)
        self.dra.revert(key)
        state = self.pods.get(key)
        if state is not None and state.assumed:
            self._delete(key)

    def is_assumed(self, key: str) -> bool:
        state = self.pods.get(key)
        return state is not None and state.assumed

    def add_pod(self, pod: PodInfo) -> None:
        """A pod the informer reports. Bound, unfinished pods are counted; others are dropped."""
        existing = self.pods.get(pod.key)
        if not pod.holds_resources:
            # An assumed pod stays while the informer still shows it pending; once it shows it
            # bound and finished, it is done.
            if existing is not None and (not existing.assumed or pod.bound):
                self._delete(pod.key)
            return
        if existing is not None:
            if existing.assumed and existing.node == pod.node_name:
                existing.assumed = False
                existing.binding_finished_at = None
                self._set_info(existing, pod)
                return
            if (
                not existing.assumed
                and existing.info.uid == pod.uid
                and existing.node == pod.node_name
                and existing.info.gpus == pod.gpus
                and existing.info.mig == pod.mig
                and (
                    pod.gpu_indices is None or pod.gpu_indices == existing.gpus or existing.observed
                )
            ):
                self._replace_info(existing, pod)
                return
            self._delete(pod.key)
        self._insert(pod, pod.node_name, pod.gpu_indices, assumed=False)

    def _replace_info(self, state: PodState, pod: PodInfo) -> None:
        """Same pod, same node and GPUs: only its requests may have changed (in-place resize)."""
        row = self.row_of.get(state.node)
        if row is not None and not np.array_equal(state.info.requests, pod.requests):
            self._charge(row, state, sign=-1)
            self._set_info(state, pod)
            self._charge(row, state, sign=1)
            self._recount_domains(row)
            self.generation += 1
        else:
            self._set_info(state, pod)

    def _set_info(self, state: PodState, pod: PodInfo) -> None:
        """Give a counted entry the informer's newer record of its pod (labels may differ)."""
        row = self.row_of.get(state.node)
        if row is not None:
            self.pod_counts.replace(state.info, pod, row)
        state.info = pod

    update_pod = add_pod

    def remove_pod(self, key: str) -> None:
        """The pod was deleted: give its resources back (with any claim allocation still in
        flight for it)."""
        self._delete(key)
        self.dra.revert(key)

    def correct_gpus(self, pod_key: str, node: str, gpus: tuple[int, ...]) -> bool:
        """Record the GPU indices a bound pod really holds (from dcgm-exporter); True when the
        cache changed. Pods not counted on `node`, assumed pods and reservations are left alone,
        as are indices the node does not have."""
        state = self.pods.get(pod_key)
        if state is None or state.assumed or state.node != node or node not in self.nodes:
            return False
        if tuple(sorted(state.gpus)) == tuple(sorted(gpus)) and state.observed:
            return False
        if len(gpus) != state.info.gpus or any(
            g >= self.nodes[node].topology.gpu_count for g in gpus
        ):
            return False
        self._delete(pod_key)
        self._insert(state.info, node, tuple(sorted(gpus)), assumed=False)
        self.pods[pod_key].observed = True
        return True

    def correct_node_gpus(self, node: str, observed: Mapping[str, tuple[int, ...]]) -> list[str]:
        """Record at once the GPU indices several bound pods of `node` really hold (from
        dcgm-exporter): `observed` maps pod key -> indices. Returns the keys the cache changed.

        All affected pods leave the node first and are then counted again with their observed
        indices, so swaps and rotations between them (pod A on B's GPU and B on A's) converge in
        one call; one pod at a time would see the other's old index as taken. A pod is skipped,
        as in `correct_gpus`, when it is not counted on `node`, is assumed or a reservation, or
        its indices do not match its request or the node; duplicates across pods skip both.
        """
        if node not in self.nodes:
            return []
        gpu_count = self.nodes[node].topology.gpu_count
        wanted: dict[str, tuple[int, ...]] = {}
        for key, gpus in observed.items():
            state = self.pods.get(key)
            indices = tuple(sorted(gpus))
            if (
                state is None
                or state.assumed
                or state.reserved_at is not None
                or state.node != node
                or len(indices) != state.info.gpus
                or len(set(indices)) != len(indices)
                or any(g < 0 or g >= gpu_count for g in indices)
                or (tuple(sorted(state.gpus)) == indices and state.observed)
            ):
                continue
            wanted[key] = indices
        claims = Counter(g for indices in wanted.values() for g in indices)
        sharers = max(1, int(self.replicas.per_gpu[self.row_of[node]]))  # replicas of one GPU
        wanted = {k: v for k, v in wanted.items() if all(claims[g] <= sharers for g in v)}
        if not wanted:
            return []
        states = {key: self.pods[key] for key in wanted}
        for key in sorted(wanted):
            self._delete(key)
        changed: list[str] = []
        for key in sorted(wanted):
            self._insert(states[key].info, node, wanted[key], assumed=False)
            state = self.pods[key]
            state.observed = state.gpus == wanted[key]
            if state.observed:
                changed.append(key)
        return changed

    # -- reservations and what-if ---------------------------------------------------------------

    def _put(self, key: str, state: PodState) -> None:
        """Count `state` exactly as given (GPU indices included), overlaps allowed."""
        self.generation += 1
        self.pods[key] = state
        self._index_pod_affinity(key, state.info, counted=True)
        self.pods_on_node.setdefault(state.node, set()).add(key)
        row = self.row_of.get(state.node)
        if row is not None:
            self._charge(row, state, sign=1)
            self._recount_domains(row)
            self.pod_counts.add(state.info, row)

    def reserve(self, pod: PodInfo, node: str, gpus: tuple[int, ...], now: float) -> None:
        """Hold room on `node` for `pod` while the pods evicted for it terminate: its requests
        count against the node and `gpus` stay in use for every other pod, also after the
        victims are gone, until `drop_reservation` or `expire_reservations`."""
        self.drop_reservation(pod.key)
        state = PodState(pod, node, gpus, assumed=True, reserved_at=now)
        self._put(RESERVATION_PREFIX + pod.key, state)

    def reservation(self, pod_key: str) -> PodState | None:
        return self.pods.get(RESERVATION_PREFIX + pod_key)

    def drop_reservation(self, pod_key: str) -> None:
        """Give the room back (also when called inside `released`: it is then not restored)."""
        self._delete(RESERVATION_PREFIX + pod_key)
        self._released.pop(RESERVATION_PREFIX + pod_key, None)

    def expire_reservations(self, now: float, ttl: float) -> list[str]:
        """Drop reservations older than `ttl` seconds; returns the pods they were for."""
        expired = [
            key.removeprefix(RESERVATION_PREFIX)
            for key, state in self.pods.items()
            if state.reserved_at is not None and now - state.reserved_at > ttl
        ]
        for pod_key in expired:
            log.warning("reservation_expired", pod=pod_key, ttl_s=ttl)
            self.drop_reservation(pod_key)
        return expired

    @contextmanager
    def released(self, pod_key: str) -> Iterator[None]:
        """Within the block, the pod's own reservation does not count (its cycle may use that
        room); afterwards it is restored unless the block dropped or replaced it."""
        key = RESERVATION_PREFIX + pod_key
        state = self._delete(key)
        if state is not None:
            self._released[key] = state
        try:
            yield
        finally:
            kept = self._released.pop(key, None)
            if kept is not None and key not in self.pods:
                self._put(key, kept)

    @contextmanager
    def without(self, keys: Iterable[str]) -> Iterator[None]:
        """Within the block the given pods are not counted (what-if for victim selection), nor
        are the devices their claims would give back (`DraStore.released`: a claim made for
        one of them, a claim whose every consumer is gone, their allocations in flight);
        afterwards they are counted again with the same GPU indices."""
        keys = list(keys)
        removed = [(key, state) for key in keys if (state := self._delete(key)) is not None]
        gone = {state.info.uid for _, state in removed}
        try:
            with self.dra.released(gone, self._is_live_pod(), keys):
                yield
        finally:
            for key, state in removed:
                self._put(key, state)

    def _is_live_pod(self) -> Callable[[str], bool]:
        """Whether a pod uid is counted now (what a claim's consumer must be to keep holding
        its devices); the set of uids is built on the first question only."""
        live: set[str] | None = None

        def is_live(uid: str) -> bool:
            nonlocal live
            if live is None:
                live = {state.info.uid for state in self.pods.values()}
            return uid in live

        return is_live

    # -- reads ---------------------------------------------------------------------------------

    def gpus_of(self, key: str) -> tuple[int, ...]:
        state = self.pods.get(key)
        return state.gpus if state else ()

    def iter_pods_on(self, node: str) -> Iterator[PodState]:
        for key in sorted(self.pods_on_node.get(node, ())):
            yield self.pods[key]

    def _index_pod_affinity(self, key: str, pod: PodInfo, counted: bool) -> None:
        """Keep `with_pod_affinity` and `with_required_anti_affinity` in step with `pods`, so
        the InterPodAffinity plugin visits only those few pods (a pod's terms never change)."""
        affinity = pod.pod_affinity
        if affinity is None:
            return
        if not counted:
            self.with_pod_affinity.discard(key)
            self.with_required_anti_affinity.discard(key)
            return
        self.with_pod_affinity.add(key)
        if affinity.required_anti_affinity:
            self.with_required_anti_affinity.add(key)
