"""PodTopologySpread: spec.topologySpreadConstraints, with kube-scheduler's semantics.

Counting: the pods counted are every pod the cache holds on a node (bound by any scheduler,
assumed, or a reservation), in the incoming pod's namespace, not terminating, matching the
constraint's selector, except the incoming pod itself (and room reserved for it). An empty
selector (`{}`) counts no pod, as kube-scheduler's countPodsMatchSelector. `per_row` (rows,)
holds the matches per node, read from the cache's count tables (`scheduler.state.pod_counts`,
kept current as pods come and go: no walk over pods); a constraint's domain counts are one
`np.bincount` over the label column's codes, weighted by `per_row` of the eligible nodes.
`scheduler.plugins.pod_walk` keeps the plain walk over pods as the reference.

Eligible nodes of a constraint (the ones whose pods and domains count): valid, carrying every
topologyKey of the constraints of the same kind (hard or soft), and, per its policies, matching
the pod's nodeSelector/required node affinity (nodeAffinityPolicy Honor, the default) and
tolerating the node's NoSchedule/NoExecute taints (nodeTaintsPolicy Honor; Ignore is the
default).

Filter (whenUnsatisfiable DoNotSchedule), for each constraint in order:

    skew(row) = count[domain(row)] + self_match - global_min  must be <= maxSkew

where self_match is 1 when the selector matches the pod's own labels, and global_min the
smallest count over eligible domains, or 0 when there are fewer eligible domains than
minDomains. A node without the topologyKey fails with REASON_MISSING (not resolvable);
a node over the skew fails with REASON_SKEW (resolvable: evicting matching pods could help).
Each node is described by its first failing constraint, as kube-scheduler returns on it.

Score (whenUnsatisfiable ScheduleAnyway), kube-scheduler's formula: over the feasible nodes that
carry every soft topologyKey (the others get 0), each constraint adds

    count * log(domains + 2) + (maxSkew - 1)

where count is the matching pods in the node's domain (on the node itself for
kubernetes.io/hostname) and domains the number of domains among those feasible nodes (for
hostname: the nodes). The sum is rounded, then normalized so the fewest matching pods score
100: `100 * (max + min - s) // max` (all 100 when max is 0).

Cluster default constraints (kube-scheduler's "System" defaulting for pods of Services and
controllers) are not applied; see docs/scoring.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.spread import HONOR, PodSelector, SpreadConstraint
from scheduler.plugins.node_affinity import required_matches
from scheduler.plugins.taints import first_untolerated
from scheduler.state.cache import own_keys
from scheduler.state.pod_counts import spread_match

NAME = "PodTopologySpread"
REASON_SKEW = "node(s) didn't match pod topology spread constraints"
REASON_MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
MAX_POINTS = 100
DEFAULT_WEIGHT = 2.0
"""kube-scheduler's default weight for PodTopologySpread in its scoring profile."""

IntArray = npt.NDArray[np.int32] | npt.NDArray[np.int64]


def _all_keys(snapshot: Snapshot, constraints: Sequence[SpreadConstraint]) -> BoolArray:
    """(rows,) valid nodes carrying every topologyKey of `constraints`."""
    present = snapshot.valid.copy()  # present: (rows,)
    for constraint in constraints:
        present &= snapshot.label(constraint.topology_key).codes >= 0
    return present


def _tolerated(pod: PodInfo, snapshot: Snapshot) -> BoolArray:
    """(rows,) nodes whose NoSchedule/NoExecute taints the pod tolerates."""
    ok = [
        group
        for group, taints in enumerate(snapshot.taint_groups)
        if first_untolerated(taints, pod.tolerations) is None
    ]
    return np.isin(snapshot.taint_group, ok)  # (rows,)


class _Policies:
    """The policy masks, each computed at most once per cycle."""

    def __init__(self, pod: PodInfo, snapshot: Snapshot) -> None:
        self.pod = pod
        self.snapshot = snapshot
        self._affinity: BoolArray | None = None
        self._taints: BoolArray | None = None

    def eligible(self, constraint: SpreadConstraint, base: BoolArray) -> BoolArray:
        """(rows,) `base` narrowed by the constraint's node inclusion policies."""
        mask = base
        if constraint.node_affinity_policy == HONOR and (
            self.pod.node_selector or self.pod.required_terms
        ):
            if self._affinity is None:
                self._affinity = required_matches(self.snapshot, self.pod)
            mask = mask & self._affinity
        if constraint.node_taints_policy == HONOR:
            if self._taints is None:
                self._taints = _tolerated(self.pod, self.snapshot)
            mask = mask & self._taints
        return mask


def domain_counts(
    codes: npt.NDArray[np.int32], eligible: BoolArray, per_row: IntArray, domains: int
) -> tuple[IntArray, BoolArray]:
    """Matching pods per domain over the eligible rows, and which domains have an eligible node.

    codes: (rows,) label codes (-1: no label); eligible: (rows,); per_row: (rows,).
    Returns counts (max(domains, 1),) and present (same shape)."""
    picked = codes[eligible & (codes >= 0)]  # picked: (eligible rows,)
    weights = per_row[eligible & (codes >= 0)]
    width = max(domains, 1)  # a key no node carries still indexes one (empty) domain
    counts = np.bincount(picked, weights=weights, minlength=width).astype(np.int64)
    present = np.bincount(picked, minlength=width) > 0
    return counts, present


def _global_min(by_domain: IntArray, present: BoolArray, min_domains: int) -> int:
    """Smallest count over the eligible domains; 0 when fewer than `min_domains` exist.
    by_domain, present: (domains,)."""
    if int(present.sum()) < min_domains:
        return 0
    return int(by_domain[present].min())


class PodTopologySpread:
    name = NAME

    def __init__(self, weight: float = DEFAULT_WEIGHT) -> None:
        self.weight = weight

    def matching_per_row(
        self, pod: PodInfo, selector: PodSelector, snapshot: Snapshot
    ) -> IntArray:  # (rows,)
        """Counted pods matching `selector` on each node row (0 everywhere for an empty or
        absent selector), from the cache's count tables."""
        if selector.empty or selector.nothing:
            return np.zeros(snapshot.rows, dtype=np.int32)
        counts = snapshot.cache.pod_counts
        return counts.matching(spread_match(pod.namespace, selector), own_keys(pod.key))

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        hard = [c for c in pod.spread_constraints if c.hard]
        if not hard:
            return []
        policies = _Policies(pod, snapshot)
        base = _all_keys(snapshot, hard)  # base: (rows,)
        rows = snapshot.rows
        decided = np.zeros(rows, dtype=bool)  # decided: (rows,)
        missing = np.zeros(rows, dtype=bool)  # missing: (rows,)
        skewed = np.zeros(rows, dtype=bool)  # skewed: (rows,)
        for constraint in hard:
            column = snapshot.label(constraint.topology_key)
            codes = column.codes  # codes: (rows,)
            per_row = self.matching_per_row(pod, constraint.selector, snapshot)  # (rows,)
            eligible = policies.eligible(constraint, base)  # eligible: (rows,)
            by_domain, present = domain_counts(codes, eligible, per_row, len(column.values))
            global_min = _global_min(by_domain, present, constraint.min_domains)
            self_match = int(constraint.selector.matches(pod.labels))
            has = codes >= 0  # has: (rows,)
            node_count = np.where(has, by_domain[np.maximum(codes, 0)], 0)  # (rows,)
            over = has & (node_count + self_match - global_min > constraint.max_skew)
            missing |= ~has & ~decided
            skewed |= over & ~decided
            decided |= ~has | over
        rejections = []
        if missing.any():
            rejections.append(Rejection(REASON_MISSING, missing, False, NAME))
        if skewed.any():
            rejections.append(Rejection(REASON_SKEW, skewed, True, NAME))
        return rejections

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        soft = [c for c in pod.spread_constraints if not c.hard]
        if not soft:
            return None
        policies = _Policies(pod, snapshot)
        rows = snapshot.rows
        base = _all_keys(snapshot, soft)  # base: (rows,)
        scored = feasible & base  # scored: (rows,) feasible nodes not ignored
        raw = np.zeros(rows, dtype=np.float64)  # raw: (rows,)
        for constraint in soft:
            column = snapshot.label(constraint.topology_key)
            codes = column.codes  # codes: (rows,)
            per_row = self.matching_per_row(pod, constraint.selector, snapshot)  # (rows,)
            if constraint.topology_key == HOSTNAME:
                node_count = per_row.astype(np.float64)  # (rows,)
                size = int(scored.sum())
            else:
                eligible = policies.eligible(constraint, base)  # eligible: (rows,)
                by_domain, _ = domain_counts(codes, eligible, per_row, len(column.values))
                candidate_domains = np.unique(codes[scored])
                size = int(candidate_domains.size)
                node_count = np.where(scored, by_domain[np.maximum(codes, 0)], 0).astype(np.float64)
            raw += node_count * np.log(size + 2) + (constraint.max_skew - 1)
        if not scored.any():
            return np.zeros(rows, dtype=np.float64)
        points = np.floor(raw + 0.5).astype(np.int64)  # points: (rows,) Go's math.Round (>= 0)
        low = int(points[scored].min())
        high = int(points[scored].max())
        if high == 0:
            normalized = np.full(rows, MAX_POINTS, dtype=np.int64)  # normalized: (rows,)
        else:
            normalized = MAX_POINTS * (high + low - points) // high
        return np.where(scored, normalized, 0).astype(np.float64)  # (rows,)
