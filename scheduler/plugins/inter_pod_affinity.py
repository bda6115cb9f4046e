"""InterPodAffinity: required pod (anti-)affinity (filter) and preferred terms (score).

kube-scheduler's rules, over topology domains: a term with topologyKey K puts a node in the
domain "value of label K on the node" (a node without K is in no domain of that key). Domains
are the integer codes of the cache's label column for K.

Filter, in kube-scheduler's order (each node gets the first failing rule's reason):

1. required affinity: for every term the node has label K, and its domain holds an existing pod
   that matches *all* the pod's required affinity terms ("node(s) didn't match pod affinity
   rules", not resolvable by eviction). Exception: when no such pod exists anywhere and the pod
   matches all its own terms (the first pod of a group), every node with all the keys passes.
2. required anti-affinity: no term's domain of the node holds a pod matching that term
   ("node(s) didn't match pod anti-affinity rules").
3. existing pods' required anti-affinity: no pod in the node's domain has a required
   anti-affinity term (with that domain's key) that matches the incoming pod ("node(s) didn't
   satisfy existing pods anti-affinity rules").

As in kube-scheduler, counts are kept per (topology key, value), shared by the terms with the
same key. Every pod the cache counts on a known node takes part, whoever scheduled it, except
the incoming pod itself (and room reserved for it).

Score (kube-scheduler's): per (key, value), + weight of each preferred affinity term of the pod
matched by an existing pod there, - weight for preferred anti-affinity; + weight of existing
pods' preferred affinity terms that match the pod, - for their preferred anti-affinity, + 1
(hardPodAffinityWeight) for their required affinity terms that match it. A node scores the sum
over its labels; the feasible nodes are scaled min..max to 0..100. The plugin abstains (None)
when no term touches any domain.

Cost: no walk over pods. The cache keeps, per node row, the pods each selector matches and the
pods holding each distinct term (`scheduler.state.pod_counts`): the pod's own terms are one table
read each, existing pods' terms are matched against the pod once per distinct term, and a rule's
domains are one scatter and one gather over the term's label column. A pod without terms pays
two set lookups while no counted pod has required anti-affinity (`with_required_anti_affinity`).
`scheduler.plugins.pod_walk` keeps the plain walk over pods as the reference.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.pod_affinity import (
    PREFERRED_AFFINITY,
    PREFERRED_ANTI_AFFINITY,
    REQUIRED_AFFINITY,
    REQUIRED_ANTI_AFFINITY,
    PodAffinityTerm,
)
from scheduler.state.cache import own_keys
from scheduler.state.pod_counts import PodCounts, affinity_match

NAME = "InterPodAffinity"
AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX_POINTS = 100.0
HARD_POD_AFFINITY_WEIGHT = 1
"""kube-scheduler's default hardPodAffinityWeight: what an existing pod's required affinity term
matching the incoming pod adds to its domain's score."""

HELD_FACTORS = {
    REQUIRED_AFFINITY: HARD_POD_AFFINITY_WEIGHT,
    PREFERRED_AFFINITY: 1,
    PREFERRED_ANTI_AFFINITY: -1,
}
"""Per unit of weight (a required term weighs 1), what an existing pod's term that matches the
incoming pod adds to the score of its domain, by role; required anti-affinity only filters."""

IntArray = npt.NDArray[np.int32]
Masks = tuple[BoolArray | None, BoolArray | None, BoolArray | None]
"""(rows,) nodes failing each filter rule in order (required affinity, required anti-affinity,
existing pods' anti-affinity); None where the rule does not apply to the pod."""


def domains_holding(snapshot: Snapshot, key: str, per_row: IntArray) -> tuple[BoolArray, bool]:
    """(rows,) nodes whose domain of label `key` holds a row with `per_row` > 0, and whether
    there is such a domain. per_row: (rows,)."""
    column = snapshot.label(key)
    codes = column.codes  # codes: (rows,)
    hits = (codes >= 0) & (per_row > 0)  # hits: (rows,)
    if not hits.any():
        return np.zeros(codes.shape[0], dtype=bool), False
    held = np.zeros(len(column.values) + 1, dtype=bool)  # held: (values + 1,) last: no label
    held[codes[hits]] = True
    return held[codes], True


def matches_all(
    terms: tuple[PodAffinityTerm, ...],
    pod: PodInfo,
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> bool:
    return bool(terms) and all(
        term.matches(pod.namespace, pod.labels, namespace_labels) for term in terms
    )


def _selected(counts: PodCounts, terms: tuple[PodAffinityTerm, ...], pod: PodInfo) -> IntArray:
    """(rows,) pods matching all `terms` per node row, the pod's own entries left out."""
    match = affinity_match(terms)
    if match is None:
        return np.zeros(counts.rows, dtype=np.int32)
    return counts.matching(match, own_keys(pod.key))


def first_failures(snapshot: Snapshot, masks: Masks) -> list[Rejection]:
    """Each valid node under the first rule it fails, as kube-scheduler reports it."""
    taken = ~snapshot.valid  # taken: (rows,) nodes already described by an earlier rule
    rejections: list[Rejection] = []
    for reason, failed, resolvable in zip(
        (AFFINITY_REASON, ANTI_AFFINITY_REASON, EXISTING_ANTI_AFFINITY_REASON),
        masks,
        (False, True, True),
        strict=True,
    ):
        if failed is None:
            continue
        mine = failed & ~taken  # mine: (rows,)
        if mine.any():
            rejections.append(Rejection(reason, mine, resolvable, NAME))
            taken |= mine
    return rejections


def scaled(points: FloatArray, feasible: BoolArray) -> FloatArray:
    """(rows,) `points` mapped min..max over `feasible` to 0..100 (all 0 when equal)."""
    if not feasible.any():
        return np.zeros(points.shape[0], dtype=np.float64)
    low, high = points[feasible].min(), points[feasible].max()
    if high <= low:
        return np.zeros(points.shape[0], dtype=np.float64)
    result: FloatArray = (points - low) * (MAX_POINTS / (high - low))  # result: (rows,)
    return result


class _Points:
    """Weighted matches collected per topology key, summed per domain at the end."""

    def __init__(self) -> None:
        self.sums: dict[str, FloatArray] = {}  # key -> (rows,) summed weight per node row
        self.hits: dict[str, BoolArray] = {}  # key -> (rows,) rows with any match

    def add(self, key: str, per_row: IntArray, weight: float) -> None:
        if key in self.sums:
            self.sums[key] += weight * per_row
            self.hits[key] |= per_row > 0
        else:
            self.sums[key] = weight * per_row.astype(np.float64)
            self.hits[key] = per_row > 0

    def per_node(self, snapshot: Snapshot) -> FloatArray | None:
        """(rows,) each node's points summed over its domains; None when no match is in a
        domain."""
        points = np.zeros(snapshot.rows, dtype=np.float64)  # points: (rows,)
        touched = False
        for key, sums in self.sums.items():
            column = snapshot.label(key)
            codes = column.codes  # codes: (rows,)
            present = codes >= 0  # present: (rows,)
            if not (self.hits[key] & present).any():
                continue
            touched = True
            table = np.bincount(  # table: (values + 1,) summed weight per domain; last: none
                codes[present], weights=sums[present], minlength=len(column.values) + 1
            )
            points += table[codes]  # code -1 (no label) reads the last entry, 0
        return points if touched else None


class InterPodAffinity:
    name = NAME

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        affinity = pod.pod_affinity
        if (affinity is None or not affinity.has_required) and not (
            snapshot.cache.with_required_anti_affinity
        ):
            return []
        return first_failures(snapshot, self.failures(pod, snapshot))

    def failures(self, pod: PodInfo, snapshot: Snapshot) -> Masks:
        """The nodes failing each rule, from the cache's count tables."""
        cache = snapshot.cache
        counts = cache.pod_counts
        labels = cache.namespace_labels
        affinity = pod.pod_affinity
        affinity_failed = anti_failed = existing_failed = None
        if affinity is not None and affinity.required_affinity:
            terms = affinity.required_affinity
            selected = _selected(counts, terms, pod)  # selected: (rows,)
            has_keys = np.ones(snapshot.rows, dtype=bool)  # has_keys: (rows,)
            pods_exist = np.ones(snapshot.rows, dtype=bool)  # pods_exist: (rows,)
            anywhere = False
            for term in terms:
                has_keys &= snapshot.label(term.topology_key).codes >= 0
                domains, found = domains_holding(snapshot, term.topology_key, selected)
                pods_exist &= domains
                anywhere |= found
            first_of_group = not anywhere and matches_all(terms, pod, labels)
            affinity_failed = ~has_keys if first_of_group else ~(has_keys & pods_exist)
        if affinity is not None and affinity.required_anti_affinity:
            anti_failed = np.zeros(snapshot.rows, dtype=bool)  # anti_failed: (rows,)
            for term in affinity.required_anti_affinity:
                selected = _selected(counts, (term,), pod)
                anti_failed |= domains_holding(snapshot, term.topology_key, selected)[0]
        for term in counts.held_terms(REQUIRED_ANTI_AFFINITY):
            if term.matches(pod.namespace, pod.labels, labels):
                weights = counts.held_weights(REQUIRED_ANTI_AFFINITY, term, own_keys(pod.key))
                domains, found = domains_holding(snapshot, term.topology_key, weights)
                if found:
                    existing_failed = (
                        domains if existing_failed is None else existing_failed | domains
                    )
        return affinity_failed, anti_failed, existing_failed

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        """kube-scheduler's InterPodAffinity score scaled min..max to 0..100 over `feasible`;
        None when no term touches any domain."""
        affinity = pod.pod_affinity
        own_preferred = affinity is not None and affinity.has_preferred
        if not own_preferred and not snapshot.cache.with_pod_affinity:
            return None
        points = self.points(pod, snapshot)
        return None if points is None else scaled(points, feasible)

    def points(self, pod: PodInfo, snapshot: Snapshot) -> FloatArray | None:
        """(rows,) raw points per node from the cache's count tables; None when no term
        touches any domain."""
        cache = snapshot.cache
        counts = cache.pod_counts
        labels = cache.namespace_labels
        collected = _Points()
        affinity = pod.pod_affinity
        if affinity is not None:
            for sign, weighted in (
                (1, affinity.preferred_affinity),
                (-1, affinity.preferred_anti_affinity),
            ):
                for weight, term in weighted:
                    collected.add(term.topology_key, _selected(counts, (term,), pod), sign * weight)
        for role, factor in HELD_FACTORS.items():
            for term in counts.held_terms(role):
                if term.matches(pod.namespace, pod.labels, labels):
                    weights = counts.held_weights(role, term, own_keys(pod.key))  # weights: (rows,)
                    collected.add(term.topology_key, weights, factor)
        return collected.per_node(snapshot)
