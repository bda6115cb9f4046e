"""DynamicResources: pods with ResourceClaims, as kube-scheduler's plugin of that name
(k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go),
with the device choice made NVLink-aware by `scheduler.dra`.

    pre_filter(pod, store)      the pod's claims resolved against the store, or the message that
                                keeps it waiting, worded as upstream's PreEnqueue and PreFilter:
                                pod "ns/p": ResourceClaim not created yet;
                                resourceclaim.resource.k8s.io "c" not found;
                                resourceclaim "c" is being deleted;
                                ResourceClaim ns/c was not created for Pod ns/p (Pod is not owner);
                                resourceclaim in use;
                                resource claim ns/c is in the process of being allocated;
                                request r: device class k does not exist
    DynamicResources.filter     PreFilter again (its verdict on every node), then per node row
                                that no earlier filter rejected: an allocated claim's
                                node selector must match ("resourceclaim not available on the
                                node"), and the allocator must find devices for every claim to
                                allocate ("cannot allocate all claims"). The first is
                                unresolvable, as upstream's; the second is resolvable on a node
                                where some device is taken by a claim (evicting its pods may give
                                it back: preemption and idle reclaim weigh that with
                                `ClusterCache.without`), where upstream's is unresolvable (its
                                preemption never frees devices). The allocations found per row
                                stay in the cycle state.
    DynamicResources.score      per feasible node, how the devices it would allocate sit
                                among its NVLink-mapped GPUs (`scheduler.dra.node_score`): the
                                NVLink score of the seed (`topology.scoring.score_nodes`, the
                                NVLink plugin's kernel) of the free GPUs they break, so a node
                                where they fit one domain, tightly, scores best; the top score
                                (100) where they only take shares of GPUs already shared
                                (consumable capacity) or partitions of GPUs already partitioned
                                (MIG); and, where they are all MIG placements, 100 less what
                                they cost their GPU (the largest placement still possible there
                                before less after, `scheduler.dra.partitions`), ties to the most
                                fragmented GPU. A GPU counts once however many of its
                                partitions or shares are taken. None when they take no mapped
                                device. Upstream scores only firstAvailable choices;
                                gpu-scheduler's allocator already prefers the earlier
                                alternatives (it tries them in order).
    plan_claims                 for the chosen node: the allocations to write and the claims to
                                reserve for the pod (`ClaimPlan`), which the cycle assumes in the
                                store and the binding cycle writes (`scheduler.kube.claims`).

A selector that fails (CEL compile or runtime error) is an error of the attempt, not a verdict
on the node: `DynamicResourcesError` leaves the filter and the cycle backs the pod off with the
message, as upstream's statusError.

A pod without claims costs one attribute test.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import numpy.typing as npt

from scheduler.dra.allocator import AllocationError, Allocator
from scheduler.dra.consumable import DeviceUse
from scheduler.dra.domains import DeviceDomains, device_domains
from scheduler.dra.equivalence import NodeShape, groupable, node_shape
from scheduler.dra.extended import ExtendedClaim
from scheduler.dra.node_score import DomainOccupancy, domain_occupancy, occupancy_points
from scheduler.dra.partitions import Partitions
from scheduler.dra.selectors import SelectorError, SelectorMatcher
from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.allocations import MAX_RESERVED_FOR, Allocation
from scheduler.model.claims import ResourceClaim
from scheduler.model.objects import NodeInfo, PodInfo
from scheduler.model.pools import Pool
from scheduler.plugins.extended_resources import ExtendedClaims, mapped_resources
from scheduler.state.dra import DraStore
from scheduler.state.dra_handlers import DYNAMIC_RESOURCES
from topology.scoring import DEFAULT_WEIGHTS, ScoreWeights
from topology.text import clip

NAME = DYNAMIC_RESOURCES
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"
STALE_EXTENDED_CLAIM = "cannot schedule extended resource claim"
"""The pod's extended-resource claim from an earlier attempt exists: it is deleted first."""


class DynamicResourcesError(Exception):
    """An error of the scheduling attempt (a selector failed): the pod backs off."""


@dataclass
class PodClaimState:
    """The pod's claims as PreFilter resolved them, and what Filter found per node row."""

    claims: tuple[ResourceClaim, ...]
    """Every claim the pod uses, in spec order."""
    to_allocate: tuple[ResourceClaim, ...]
    """The claims not allocated yet (allocated by this scheduler on the chosen node)."""
    allocations: dict[int, tuple[Allocation, ...]] = field(default_factory=dict)
    """Row -> the allocations of `to_allocate` (same order) on that node."""
    reasons: dict[int, str] = field(default_factory=dict)
    """Row -> why the allocator found nothing there (for `explain`)."""
    occupancy: dict[int, DomainOccupancy] = field(default_factory=dict)
    """Row -> its NVLink-mapped devices per domain, for the score (rows whose allocations take
    at least one mapped device)."""
    allocate_row: Callable[[int], tuple[Allocation, ...] | None] | None = None
    """Allocates on one row again: for a feasible row of a group whose verdict came from
    another node (`scheduler.dra.equivalence`), whose allocations are not in `allocations`."""
    extended: ExtendedClaims | None = None
    """The pod's extended resources a DeviceClass serves, and its claim for them per node."""

    def claims_on(self, row: int) -> tuple[ResourceClaim, ...]:
        """The claims to allocate on node `row`: `to_allocate`, then the pod's extended-resource
        claim for the node, if it needs one there."""
        made = self.extended.claim_on(row) if self.extended is not None else None
        return self.to_allocate if made is None else (*self.to_allocate, made.claim)

    def allocations_for(self, row: int) -> tuple[Allocation, ...] | None:
        """The allocations of `claims_on(row)` on node `row` (None: it does not fit there)."""
        found = self.allocations.get(row)
        if found is None and self.allocate_row is not None and row not in self.reasons:
            found = self.allocate_row(row)
            if found is not None:
                self.allocations[row] = found
        return found


def _holds_taken(pools: tuple[Pool, ...], use: DeviceUse) -> bool:
    """Whether any device of `pools` is taken by a claim, whole or a share: only then can
    evicting pods (whose claims give devices and capacity back) make room for an allocation
    that failed."""
    return any(
        (device := (pool.id.driver, pool.id.pool, entry.device.name)) in use.taken
        or use.sharing(device)
        for pool in pools
        for entry in pool.devices
    )


@dataclass(frozen=True)
class ClaimPlan:
    """What the binding cycle writes for a pod with claims, before its Binding."""

    pod_key: str
    pod_name: str
    pod_uid: str
    allocate: tuple[tuple[ResourceClaim, Allocation], ...] = ()
    """Claims to allocate: the finalizer, then allocation and reservedFor in one write."""
    reserve: tuple[ResourceClaim, ...] = ()
    """Claims already allocated and not yet reserved for the pod: reservedFor only."""
    create: tuple[ExtendedClaim, Allocation] | None = None
    """The claim for the pod's extended resources, to create, then allocate and reserve; and
    the pod's `status.extendedResourceClaimStatus` to write."""

    @property
    def empty(self) -> bool:
        return not self.allocate and not self.reserve and self.create is None

    def described(self) -> tuple[str, ...]:
        """ "claim: pool/device,pool/device" for each claim to allocate (events, logs)."""
        allocate = [*self.allocate]
        if self.create is not None:
            allocate.append((self.create[0].claim, self.create[1]))
        return tuple(
            f"{claim.name}: " + ",".join(f"{r.pool}/{r.device}" for r in allocation.results)
            for claim, allocation in allocate
        )


def pre_filter(pod: PodInfo, store: DraStore) -> tuple[str, PodClaimState | None]:
    """("", state) when the pod's claims can be considered on nodes, (message, None) when the
    pod must wait (for every node alike); ("", None) for a pod without claims."""
    pod_claims = pod.resource_claims
    extended = mapped_resources(pod, store)
    if pod_claims is None and not extended:
        return "", None
    if extended and store.extended_claim_of(pod.uid) is not None:
        return STALE_EXTENDED_CLAIM, None
    if pod_claims is not None and pod_claims.waiting:
        return pod_claims.waiting, None
    claims: list[ResourceClaim] = []
    for entry in pod_claims.claims if pod_claims is not None else ():
        if not entry.claim_name:
            continue  # the controller made no claim for it on purpose: nothing to allocate
        claim = store.claims.get(f"{pod.namespace}/{entry.claim_name}")
        if claim is None:
            return f'resourceclaim.resource.k8s.io "{clip(entry.claim_name)}" not found', None
        if claim.deleting:
            return f'resourceclaim "{clip(claim.name)}" is being deleted', None
        if entry.from_template and (claim.controller is None or claim.controller.uid != pod.uid):
            message = (
                f"ResourceClaim {claim.key} was not created for Pod {pod.key} (Pod is not owner)"
            )
            return message, None
        if claim.errors:
            problems = "; ".join(str(e) for e in claim.errors[:3])
            return clip(f"resourceclaim {claim.key} has invalid fields: {problems}", 900), None
        if claim.key not in {c.key for c in claims}:
            claims.append(claim)
    return _check_claims(pod, store, tuple(claims), extended)


def _check_claims(
    pod: PodInfo, store: DraStore, claims: tuple[ResourceClaim, ...], extended: dict[str, str]
) -> tuple[str, PodClaimState | None]:
    to_allocate: list[ResourceClaim] = []
    for claim in claims:
        if claim.allocation is not None:
            full = len(claim.reserved_for) >= MAX_RESERVED_FOR
            if full and not claim.reserved_for_pod(pod.uid):
                return "resourceclaim in use", None
            continue
        flying = store.in_flight(claim.key)
        if flying is not None and flying.pod_key != pod.key:
            return f"resource claim {claim.key} is in the process of being allocated", None
        for request in claim.spec.requests:
            for reference, spec in request.alternatives:
                if spec.device_class_name not in store.classes:
                    message = (
                        f"request {reference}: device class {spec.device_class_name} does not exist"
                    )
                    return clip(message, 900), None
        to_allocate.append(claim)
    if extended:
        made = ExtendedClaims(pod, extended)
        return "", PodClaimState(claims, tuple(to_allocate), extended=made)
    if not claims:
        return "", None
    return "", PodClaimState(claims, tuple(to_allocate))


class DynamicResources:
    """The filter and the score (see the module docstring). `matcher` evaluates CEL selectors;
    `domain_attribute` names a device attribute that carries the NVLink domain ("" to read the
    node's annotations); `weights` are the NVLink score's."""

    name = NAME

    def __init__(
        self,
        matcher: SelectorMatcher,
        domain_attribute: str = "",
        weights: ScoreWeights = DEFAULT_WEIGHTS,
        weight: float = 1.0,
    ) -> None:
        self.matcher = matcher
        self.domain_attribute = domain_attribute
        self.weights = weights
        self.weight = weight
        self._domains: dict[str, tuple[tuple[Pool, ...], Mapping[str, str], DeviceDomains]] = {}
        """Node -> the pools and annotations its domain map was made from, and the map."""
        self._shapes: dict[str, tuple[tuple[Pool, ...], DeviceDomains, NodeShape]] = {}
        """Node -> the pools and domain map its shape was made from, and the shape."""
        self._partitions: dict[str, tuple[tuple[Pool, ...], Partitions]] = {}
        """Node -> the pools its partitions were found among, and those partitions."""

    def shape(self, store: DraStore, node: NodeInfo) -> NodeShape:
        """The node's `NodeShape` (`scheduler.dra.equivalence`), kept while its pools and
        domain map are the same objects."""
        pools = store.pools_for(node.name, node.labels)
        domains = self.domains(node.name, node.topology_annotations, pools)
        kept = self._shapes.get(node.name)
        if kept is not None and kept[0] is pools and kept[1] is domains:
            return kept[2]
        found = node_shape(pools, domains.domain_of, store.shape_of)
        self._shapes[node.name] = (pools, domains, found)
        return found

    def partitions(self, store: DraStore, node: NodeInfo) -> Partitions:
        """The MIG placements among the node's devices (`scheduler.dra.partitions`), kept
        while its pools are the same objects."""
        pools = store.pools_for(node.name, node.labels)
        kept = self._partitions.get(node.name)
        if kept is not None and kept[0] is pools:
            return kept[1]
        found = Partitions.of_pools(pools)
        self._partitions[node.name] = (pools, found)
        return found

    def domains(
        self, node: str, annotations: Mapping[str, str], pools: tuple[Pool, ...]
    ) -> DeviceDomains:
        """The node's device -> NVLink domain map, kept until its pools (a new tuple from the
        store when a slice changes) or its annotations change."""
        kept = self._domains.get(node)
        if kept is not None and kept[0] is pools and kept[1] == annotations:
            return kept[2]
        found = device_domains(annotations, pools, self.domain_attribute)
        self._domains[node] = (pools, annotations, found)
        return found

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        """`occupancy_points` of each feasible node's `DomainOccupancy`. None for a pod whose
        allocations take no mapped device (no preference)."""
        claim_state = state.data.get(NAME)
        if not isinstance(claim_state, PodClaimState) or not claim_state.occupancy:
            return None
        rows = np.array(sorted(claim_state.occupancy), dtype=np.int64)  # rows: (n,)
        found = occupancy_points([claim_state.occupancy[int(r)] for r in rows], self.weights)
        points = np.zeros(snapshot.rows, dtype=np.float64)  # points: (rows,)
        points[rows] = found
        return np.where(feasible, points, 0.0)

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if pod.resource_claims is None and not pod.extended:
            return []
        store = snapshot.cache.dra
        rows = snapshot.rows
        message, claim_state = pre_filter(pod, store)
        if message:  # the cycle reports it before filtering; `explain` shows it per node
            return [Rejection(message, snapshot.valid.copy(), False, NAME)]
        if claim_state is None:
            return []
        state.data[NAME] = claim_state
        unavailable = np.zeros(rows, dtype=bool)  # unavailable: (rows,)
        unallocatable = np.zeros(rows, dtype=bool)  # unallocatable: (rows,)
        freeable = np.zeros(rows, dtype=bool)  # freeable: (rows,) some device there is taken
        look = snapshot.valid if state.passed is None else state.passed & snapshot.valid
        use = store.device_use()
        extended = claim_state.extended
        if extended is not None:
            extended.prepare(snapshot)
            if not claim_state.claims:  # only its extended resources: rows that serve them
                look = look & extended.delegated_rows()
        allocator = (
            Allocator(store.classes, use.taken, self.matcher, shared=use)
            if claim_state.to_allocate or extended is not None
            else None
        )
        grouped = allocator is not None and groupable(
            (*claim_state.to_allocate, *(extended.all_claims() if extended else ())),
            store.classes,
        )
        verdicts: dict[Hashable, tuple[bool, str, DomainOccupancy | None]] = {}
        for row in np.flatnonzero(look):
            node = snapshot.cache.nodes[snapshot.names[row]]
            available = self._available(claim_state, node.name, node.labels)
            claims = claim_state.claims_on(int(row))
            if allocator is None or not claims:
                unavailable[row] = not available
                continue
            signature = self.shape(store, node).signature(use) if grouped else None
            key = (
                None  # a node the grouping does not cover is allocated on its own
                if signature is None
                else (extended.variant_on(int(row)) if extended else (), signature)
            )
            verdict = verdicts.get(key) if key is not None else None
            if verdict is None:
                found, reason, domains = self._allocate(allocator, claims, store, node)
                occupancy = (
                    None
                    if found is None
                    else domain_occupancy(domains, use, found, self.partitions(store, node))
                )
                verdict = (found is not None, reason, occupancy)
                if found is not None:
                    claim_state.allocations[int(row)] = found
                if key is not None:
                    verdicts[key] = verdict
            fits, reason, occupancy = verdict
            if not fits:
                unallocatable[row] = True
                freeable[row] = _holds_taken(store.pools_for(node.name, node.labels), use)
                claim_state.reasons[int(row)] = reason or CANNOT_ALLOCATE
            elif not available:  # upstream allocates first: its errors and verdict come first
                unavailable[row] = True
                claim_state.reasons[int(row)] = NOT_AVAILABLE
            elif occupancy is not None:
                claim_state.occupancy[int(row)] = occupancy
        if allocator is not None:
            claim_state.allocate_row = partial(self._allocate_row, allocator, claim_state, snapshot)
        rejections = []
        if unavailable.any():
            rejections.append(Rejection(NOT_AVAILABLE, unavailable, False, NAME))
        if (unallocatable & ~freeable).any():
            rejections.append(Rejection(CANNOT_ALLOCATE, unallocatable & ~freeable, False, NAME))
        if (unallocatable & freeable).any():
            rejections.append(Rejection(CANNOT_ALLOCATE, unallocatable & freeable, True, NAME))
        return rejections

    def _allocate(
        self,
        allocator: Allocator,
        claims: tuple[ResourceClaim, ...],
        store: DraStore,
        node: NodeInfo,
    ) -> tuple[tuple[Allocation, ...] | None, str, DeviceDomains]:
        """The allocator's allocations of `claims` on `node` (None and the reason when they do
        not fit), and the node's domain map. A failing selector or a spent step budget raise
        `DynamicResourcesError`."""
        pools = store.pools_for(node.name, node.labels)
        domains = self.domains(node.name, node.topology_annotations, pools)
        slices = store.slices_for(node.name, node.labels)
        try:
            outcome = allocator.allocate(
                node.name, node.labels, pools, claims, domains.domain_of, slices
            )
        except (SelectorError, AllocationError) as error:
            raise DynamicResourcesError(str(error)) from error
        if outcome.exceeded:
            raise DynamicResourcesError(outcome.reason)
        return outcome.allocations, outcome.reason, domains

    def _allocate_row(
        self,
        allocator: Allocator,
        claim_state: PodClaimState,
        snapshot: Snapshot,
        row: int,
    ) -> tuple[Allocation, ...] | None:
        """The allocations on node `row`, computed again (a node of a group whose verdict came
        from another node; results name the node's own pools)."""
        node = snapshot.cache.nodes[snapshot.names[row]]
        claims = claim_state.claims_on(row)
        return self._allocate(allocator, claims, snapshot.cache.dra, node)[0]

    @staticmethod
    def _available(claim_state: PodClaimState, node: str, labels: Mapping[str, str]) -> bool:
        """Every allocated claim's devices are available on `node`."""
        for claim in claim_state.claims:
            allocation = claim.allocation
            if allocation is None or allocation.node_selector is None:
                continue
            if not allocation.node_selector.matches(node, labels):
                return False
        return True


def free_mapped_devices(state: CycleState, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """(len(rows),) the free NVLink-mapped devices of each row before the pod, where the pod's
    allocations take mapped devices there (0 elsewhere)."""
    claim_state = state.data.get(NAME)
    found = np.zeros(len(rows), dtype=np.int64)  # found: (len(rows),)
    if isinstance(claim_state, PodClaimState):
        for i, row in enumerate(rows):
            occupancy = claim_state.occupancy.get(int(row))
            if occupancy is not None:
                found[i] = sum(occupancy.free)
    return found


def plan_claims(state: CycleState, row: int, pod: PodInfo) -> ClaimPlan | None:
    """The writes for `pod` placed on node `row` (None: the pod has no claims)."""
    claim_state = state.data.get(NAME)
    if not isinstance(claim_state, PodClaimState):
        return None
    claims = claim_state.claims_on(row)
    allocations = claim_state.allocations_for(row) if claims else ()
    if allocations is None:  # the filters let the node through: it fits there
        raise DynamicResourcesError(f"no allocation for node row {row}")
    count = len(claim_state.to_allocate)
    allocate = tuple(zip(claim_state.to_allocate, allocations[:count], strict=True))
    made = claim_state.extended.claim_on(row) if claim_state.extended is not None else None
    create = None if made is None else (made, allocations[count])
    reserve = tuple(
        claim
        for claim in claim_state.claims
        if claim.allocation is not None and not claim.reserved_for_pod(pod.uid)
    )
    return ClaimPlan(pod.key, pod.name, pod.uid, allocate, reserve, create)


def assume_claims(store: DraStore, plan: ClaimPlan) -> None:
    """Record the plan's allocations as in flight for the pod (`ClusterCache.forget` takes them
    back)."""
    allocate = [*plan.allocate]
    if plan.create is not None:
        allocate.append((plan.create[0].claim, plan.create[1]))
    store.assume(
        plan.pod_key, {claim.key: (claim.uid, allocation) for claim, allocation in allocate}
    )
