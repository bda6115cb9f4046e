"""Placing a gang: many pods at once on one view of the cluster (all or nothing).

`plan_gang` tries to place the pending members of one gang with the profile's filters and
scores, assuming each placement in the cache before the next member is tried, so the members
see each other (their GPUs, ports, spread and affinity). The group as a whole prefers few nodes
and few NVLink domains:

- members go largest GPU request first (ties by key, so plans are reproducible);
- among the nodes that pass the filters, a member prefers a node the gang already uses, then
  the node that can hold most of the gang's GPUs still to place (min(free GPUs, GPUs left)),
  then the best score; so a 4 x 2-GPU gang fills one free 8-GPU node rather than four 2-GPU
  nodes, and the NVLink score keeps each member's GPUs in one domain. With the profile's
  `pack_gang_members` off (`scoring.packGangMembers: false`), each member takes its best-scored
  node, as a single pod does.

With a topology key (PodGroup `spec.schedulingConstraints.topology[0].key`) every member must
land on nodes with one value of that node label: the values are tried best-first (most free
GPUs first, then by name) and the first where at least `need` members fit is taken. Nodes
without the label are never used. Members already placed (bound or assumed) pin the value.

Members with ResourceClaims (or extended resources a DeviceClass serves) get their devices as a
single pod would (`scheduler.plugins.dynamic_resources`): each member's claims are allocated on
its node, NVLink-aware, and assumed in the DRA store before the next member is tried, so no two
members take one device; the plan carries each member's claim writes (`MemberPlacement.claims`)
for the binding cycle. On nodes whose GPUs come from DRA, "free GPUs" above means the node's free
NVLink-mapped devices.

The outcome holds every member that fit (up to all of them) when at least `need` did; then
their placements stay assumed in the cache and the caller binds them. When fewer than `need`
fit anywhere, nothing stays assumed (each assumption is forgotten) and `reasons` says why
members did not fit, for the best attempt.

A gang that does not fit is handed, as a `GangRequest`, to the gang PostFilter
(`scheduler.postfilter.gang_reclaim`), which re-runs `plan_gang` on what-ifs of the cache without
candidate victims. Not here: the composite PodGroups of a Workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.tracker import PodGroupInfo
from scheduler.model.fields import sorted_errors
from scheduler.model.objects import PodInfo
from scheduler.model.resources import GPU
from scheduler.model.unsupported import unsupported_message
from scheduler.plugins.dynamic_resources import NAME as DYNAMIC_RESOURCES
from scheduler.plugins.dynamic_resources import (
    ClaimPlan,
    DynamicResourcesError,
    assume_claims,
    free_mapped_devices,
    plan_claims,
)
from scheduler.state.cache import ClusterCache
from topology.occupancy import NO_DOMAIN, choose_gpus
from topology.text import clip


@dataclass(frozen=True)
class MemberPlacement:
    """Where one member goes: node, GPU indices, their NVLink domain, the node's score."""

    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    domain: int
    score: float
    claims: ClaimPlan | None = None
    """DynamicResources' writes for the member (its claims' devices, assumed in the store)."""


@dataclass
class GangPlan:
    """The outcome of `plan_gang`: `placed` stay assumed in the cache when `fits`."""

    fits: bool
    placed: list[MemberPlacement] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)
    """Member key -> why it did not fit (in the attempt taken, or the best one)."""
    best: int = 0
    """Most members placed in one attempt (a topology value), for the message."""
    plugins: set[str] = field(default_factory=set)
    """Plugins that rejected nodes for unplaced members."""
    topology_value: str = ""


@dataclass(frozen=True)
class GangRequest:
    """A gang that did not fit: its PodGroup, its pending members, how many of them must be
    placed (minCount minus those already bound) and the topology values it is pinned to."""

    group: PodGroupInfo
    members: tuple[PodInfo, ...]
    need: int
    pinned: frozenset[str] = frozenset()

    @property
    def priority(self) -> int:
        """The priority the gang preempts with (`gang_priority`): the
        PodGroup's `spec.priority` when it comes from a `priorityClassName` or is not 0; the
        admission controller writes 0 into a PodGroup without a class, which here means unset,
        so the members' lowest priority counts."""
        group = self.group
        explicit = group.priority if group.priority_class or group.priority else None
        return gang_priority(explicit, (m.priority for m in self.members))


@dataclass(frozen=True)
class _Within(Snapshot):
    """The snapshot with only the rows of one topology value valid, so every filter and
    narrower (e.g. NVLink's preference for nodes that keep the GPUs in one domain) sees only
    the nodes the gang may use."""

    inside: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def valid(self) -> npt.NDArray[np.bool_]:  # (rows,)
        return self.cache.valid[: self.rows] & self.inside[: self.rows]


def _precheck(pod: PodInfo, snapshot: Snapshot) -> str:
    """Why the member cannot be tried at all ("" when it can)."""
    if pod.errors:
        return f"pod has invalid fields: {sorted_errors(pod.errors)}"
    if pod.unsupported:
        return unsupported_message(pod.unsupported, snapshot.node_count)
    return ""


@dataclass(frozen=True)
class _Domain:
    """One value of the topology key (or, without a key, the whole cluster): its rows and the
    free GPUs they hold."""

    value: str
    rows: npt.NDArray[np.intp]  # rows: (nodes with the value,)
    free: int
    slots: int
    """Members of the smallest GPU request the value's nodes could hold, each on one node
    (sum of free // smallest); an upper bound on the members that fit there."""
    size: int
    """Rows of the snapshot the mask is built for."""

    def mask(self) -> npt.NDArray[np.bool_]:
        """The value's rows as a mask: (size,)."""
        mask = np.zeros(self.size, dtype=bool)  # mask: (size,)
        mask[self.rows] = True
        return mask


def _domains(cache: ClusterCache, key: str, pinned: set[str], smallest: int = 0) -> list[_Domain]:
    """The values of node label `key` on valid rows, most free GPUs first, then by value; only
    values in `pinned` when it is not empty. Without a key: one domain of every valid row.
    `smallest`: the least GPUs a member asks for (0: slots are not counted, reported as 0).
    Grouped by one sort of the label codes, so the cost grows as nodes x log(nodes), not as
    values x nodes; masks are built only for the values a plan tries."""
    snapshot = Snapshot(cache)
    valid = snapshot.valid  # valid: (rows,)
    free = snapshot.gpu_total - snapshot.gpu_used  # free: (rows,)
    size = len(valid)
    slots = free // smallest if smallest > 0 else np.zeros_like(free)  # slots: (rows,)
    if not key:
        rows = np.flatnonzero(valid)  # rows: (valid,)
        return [_Domain("", rows, int(free[rows].sum()), int(slots[rows].sum()), size)]
    column = snapshot.label(key)
    rows = np.flatnonzero(valid & (column.codes >= 0))  # rows: (labelled,)
    if not rows.size:
        return []
    codes = column.codes[rows]  # codes: (labelled,)
    order = np.argsort(codes, kind="stable")  # order: (labelled,)
    rows, codes = rows[order], codes[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])  # starts: (values,)
    sums = np.add.reduceat(free[rows], starts)  # sums: (values,)
    room = np.add.reduceat(slots[rows], starts)  # room: (values,)
    groups = np.split(rows, starts[1:])
    found: list[_Domain] = []
    for start, group, total, fit in zip(starts, groups, sums, room, strict=True):
        value = column.values[int(codes[start])]
        if pinned and value not in pinned:
            continue
        found.append(_Domain(value, group, int(total), int(fit), size))
    found.sort(key=lambda domain: (-domain.free, domain.value))
    return found


def _may_hold(domain: _Domain, least: int, need: int, smallest: list[int]) -> bool:
    """False when `domain` surely cannot hold `need` members: fewer free GPUs than the `need`
    smallest requests, or (members asking for GPUs) fewer one-node slots than `need`."""
    if domain.free < least:
        return False
    return not (smallest and smallest[0] > 0 and domain.slots < need)


def _fill(
    cache: ClusterCache,
    framework: Framework,
    members: Sequence[PodInfo],
    domain: npt.NDArray[np.bool_],
    where: str,
) -> tuple[list[MemberPlacement], dict[str, str], set[str]]:
    """Place as many of `members` (in order) as fit inside `domain` (rows,), each assumed in
    the cache before the next is tried."""
    placed: list[MemberPlacement] = []
    unplaced: dict[str, str] = {}
    plugins: set[str] = set()
    used = np.zeros(cache.rows, dtype=bool)  # used: (rows,) nodes the gang already uses here
    left = sum(p.gpus for p in members)
    for pod in members:
        snapshot = _Within(cache, domain)
        problem = _precheck(pod, snapshot)
        if problem:
            unplaced[pod.key] = problem
            plugins.add("PodSpec")
            left -= pod.gpus
            continue
        try:
            evaluation = framework.evaluate(pod, snapshot, choose=False)
        except DynamicResourcesError as error:  # a selector failed: an error, not a verdict
            unplaced[pod.key] = clip(f'{where}running Filter plugin "{DYNAMIC_RESOURCES}": {error}')
            plugins.add(DYNAMIC_RESOURCES)
            left -= pod.gpus
            continue
        feasible = evaluation.diagnosis.feasible & snapshot.valid  # feasible: (rows,)
        if not feasible.any():
            message = evaluation.diagnosis.message(snapshot.valid)
            unplaced[pod.key] = f"{where}{message}" if where else message
            plugins.update(r.plugin for r in evaluation.diagnosis.rejections if r.plugin)
            left -= pod.gpus
            continue
        rows = np.flatnonzero(feasible)  # rows: (candidates,)
        free = (snapshot.gpu_total - snapshot.gpu_used)[rows]  # free: (candidates,)
        free = np.maximum(free, free_mapped_devices(evaluation.state, rows))  # (DRA nodes)
        # Best first: used by the gang, holds most of the GPUs left, best score, lowest row
        # (without packing: best score, lowest row).
        keys = [rows, -evaluation.total[rows]]
        if framework.pack_gang_members:
            keys += [-np.minimum(free, left), ~used[rows]]
        order = np.lexsort(keys)  # order: (candidates,)
        row = int(rows[order[0]])
        node = snapshot.names[row]
        gpus: tuple[int, ...] = ()
        domain_id = NO_DOMAIN
        if pod.gpus and cache.allocatable[row, GPU]:  # (no GPU allocatable: DRA serves them)
            choice = choose_gpus(
                cache.nodes[node].topology, cache.node_gpus_unavailable(node), pod.gpus
            )
            if choice is None:  # the filters guarantee enough free GPUs; stay safe regardless
                unplaced[pod.key] = f"node {node} has fewer than {pod.gpus} free GPUs"
                left -= pod.gpus
                continue
            gpus, domain_id = tuple(choice.gpus), int(choice.domain)
        try:
            claims = plan_claims(evaluation.state, row, pod)
        except DynamicResourcesError as error:
            unplaced[pod.key] = clip(
                f'{where}running Reserve plugin "{DYNAMIC_RESOURCES}": {error}'
            )
            plugins.add(DYNAMIC_RESOURCES)
            left -= pod.gpus
            continue
        claims = None if claims is None or claims.empty else claims
        cache.assume(pod, node, gpus)
        if claims is not None:  # the next members see its devices taken; `forget` gives back
            assume_claims(cache.dra, claims)
        score = float(evaluation.total[row])
        placed.append(MemberPlacement(pod, node, gpus, domain_id, score, claims))
        used[row] = True
        left -= pod.gpus
    return placed, unplaced, plugins


def plan_gang(
    cache: ClusterCache,
    framework: Framework,
    members: Sequence[PodInfo],
    need: int,
    topology_key: str = "",
    pinned: set[str] | None = None,
) -> GangPlan:
    """Place at least `need` of `members` (all that fit), or none; see the module docstring.
    `pinned`: the topology values of members already placed (the gang must stay there)."""
    order = sorted(members, key=lambda p: (-p.gpus, p.key))
    smallest = sorted(p.gpus for p in order)[:need]
    domains = _domains(cache, topology_key, pinned or set(), smallest[0] if smallest else 0)
    if len(domains) > 1:  # skip values that cannot hold even the `need` smallest members
        least = sum(smallest)
        domains = [d for d in domains if _may_hold(d, least, need, smallest)] or domains[:1]
    if not domains:
        reason = f"no node has the label {clip(topology_key)} (PodGroup topology constraint)"
        return GangPlan(False, unplaced={p.key: reason for p in order}, plugins={"PodGroup"})
    best: GangPlan | None = None
    for domain in domains:
        value = domain.value
        where = f"{clip(topology_key)}={clip(value)}: " if topology_key else ""
        placed, unplaced, plugins = _fill(cache, framework, order, domain.mask(), where)
        if len(placed) >= need:
            return GangPlan(True, placed, unplaced, len(placed), plugins, value)
        for member in placed:
            cache.forget(member.pod.key)
        if best is None or len(placed) > best.best:
            best = GangPlan(False, [], unplaced, len(placed), plugins, value)
    assert best is not None
    return best


def gang_priority(group_priority: int | None, member_priorities: Iterable[int]) -> int:
    """The priority a gang preempts with: its PodGroup's `spec.priority` when set, else the
    lowest of its pods' priorities (a gang is no more important than its least important
    member); 0 for a gang without either."""
    if group_priority is not None:
        return group_priority
    return min(member_priorities, default=0)
