"""InterPodAffinity: required pod (anti-)affinity (filter) and preferred terms (score).

kube-scheduler's rules, over topology domains: a term with topologyKey K puts a node in the
domain "value of label K on the node" (a node without K is in no domain of that key). Domains
are the integer codes of the cache's label column for K, so after one pass over the relevant
pods (collecting, per key, the set of codes that hold a matching pod) each rule is one
`np.isin` over all node rows.

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
the incoming pod itself (and room reserved for it). Pods with pod (anti-)affinity are indexed by
the cache (`with_pod_affinity`, `with_required_anti_affinity`), so a pod without such terms costs
two set lookups while no counted pod has required anti-affinity.

Score (kube-scheduler's): per (key, value), + weight of each preferred affinity term of the pod
matched by an existing pod there, - weight for preferred anti-affinity; + weight of existing
pods' preferred affinity terms that match the pod, - for their preferred anti-affinity, + 1
(hardPodAffinityWeight) for their required affinity terms that match it. A node scores the sum
over its labels; the feasible nodes are scaled min..max to 0..100.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from scheduler.framework.interface import BoolArray, CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.pod_affinity import PodAffinityTerm
from scheduler.state.cache import RESERVATION_PREFIX, PodState

NAME = "InterPodAffinity"
AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX_POINTS = 100.0
HARD_POD_AFFINITY_WEIGHT = 1
"""kube-scheduler's default hardPodAffinityWeight: what an existing pod's required affinity term
matching the incoming pod adds to its domain's score."""

Domains = dict[str, set[int]]
"""Topology key -> label codes (of the cache's column for that key) holding a matching pod."""


class _Rows:
    """Node rows of matching pods collected per topology key, turned into domains at the end
    with one array operation per key."""

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}

    def add(self, key: str, row: int) -> None:
        self.rows.setdefault(key, []).append(row)

    def domains(self, snapshot: Snapshot) -> Domains:
        found: Domains = {}
        for key, rows in self.rows.items():
            codes = snapshot.label(key).codes[np.asarray(rows, dtype=np.intp)]  # (matches,)
            present = codes[codes >= 0]  # present: (matches in a domain,)
            if present.size:
                found[key] = set(np.unique(present).tolist())
        return found


def _others(
    snapshot: Snapshot, pod: PodInfo, keys: Iterable[str] | None = None
) -> Iterator[tuple[PodState, int]]:
    """The counted pods among `keys` (None: all) on known nodes, with their node row; never
    `pod` itself."""
    cache = snapshot.cache
    own = (pod.key, RESERVATION_PREFIX + pod.key)
    row_of = cache.row_of
    if keys is None:
        states: Iterable[tuple[str, PodState]] = list(cache.pods.items())
    else:
        states = [(key, cache.pods[key]) for key in keys if key in cache.pods]
    for key, state in states:
        if key in own:
            continue
        row = row_of.get(state.node)
        if row is not None:
            yield state, row


def _in_domains(snapshot: Snapshot, key: str, domains: Domains) -> BoolArray:
    """(rows,) nodes whose domain of `key` is one of `domains[key]`."""
    codes = snapshot.label(key).codes  # codes: (rows,)
    wanted = domains.get(key)
    if not wanted:
        return np.zeros(codes.shape[0], dtype=bool)
    return np.isin(codes, np.fromiter(wanted, dtype=np.int32, count=len(wanted)))


def _any_domain(snapshot: Snapshot, domains: Domains) -> BoolArray:
    failed = np.zeros(snapshot.rows, dtype=bool)  # failed: (rows,)
    for key in domains:
        failed |= _in_domains(snapshot, key, domains)
    return failed


def existing_anti_affinity_domains(snapshot: Snapshot, pod: PodInfo) -> Domains:
    """Domains barred to `pod` by existing pods' required anti-affinity terms that match it."""
    cache = snapshot.cache
    barred = _Rows()
    for state, row in _others(snapshot, pod, cache.with_required_anti_affinity):
        affinity = state.info.pod_affinity
        assert affinity is not None
        for term in affinity.required_anti_affinity:
            if term.matches(pod.namespace, pod.labels, cache.namespace_labels):
                barred.add(term.topology_key, row)
    return barred.domains(snapshot)


def _matches_all(
    terms: tuple[PodAffinityTerm, ...],
    pod: PodInfo,
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> bool:
    return bool(terms) and all(
        term.matches(pod.namespace, pod.labels, namespace_labels) for term in terms
    )


def _required_domains(snapshot: Snapshot, pod: PodInfo) -> tuple[Domains, Domains]:
    """(affinity, anti-affinity) domains of the pod's required terms: one pass over every
    counted pod."""
    affinity = pod.pod_affinity
    assert affinity is not None
    cache = snapshot.cache
    labels = cache.namespace_labels
    required = affinity.required_affinity
    anti = affinity.required_anti_affinity
    wanted = _Rows()
    barred = _Rows()
    for state, row in _others(snapshot, pod):
        other = state.info
        if required and _matches_all(required, other, labels):
            for term in required:
                wanted.add(term.topology_key, row)
        for term in anti:
            if term.matches(other.namespace, other.labels, labels):
                barred.add(term.topology_key, row)
    return wanted.domains(snapshot), barred.domains(snapshot)


def _required_rejections(
    snapshot: Snapshot, pod: PodInfo
) -> tuple[BoolArray | None, BoolArray | None]:
    """(rows,) masks of nodes failing the pod's own required affinity and anti-affinity."""
    affinity = pod.pod_affinity
    if affinity is None or not affinity.has_required:
        return None, None
    wanted, barred = _required_domains(snapshot, pod)
    affinity_failed = None
    terms = affinity.required_affinity
    if terms:
        has_keys = np.ones(snapshot.rows, dtype=bool)  # has_keys: (rows,)
        pods_exist = np.ones(snapshot.rows, dtype=bool)  # pods_exist: (rows,)
        for term in terms:
            has_keys &= snapshot.label(term.topology_key).codes >= 0
            pods_exist &= _in_domains(snapshot, term.topology_key, wanted)
        first_of_group = not wanted and _matches_all(terms, pod, snapshot.cache.namespace_labels)
        affinity_failed = ~has_keys if first_of_group else ~(has_keys & pods_exist)
    anti_failed = None
    if affinity.required_anti_affinity:
        anti_failed = _any_domain(snapshot, barred)
    return affinity_failed, anti_failed


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
        valid = snapshot.valid  # valid: (rows,)
        taken = ~valid  # taken: (rows,) nodes already described by an earlier rule
        rejections: list[Rejection] = []
        affinity_failed, anti_failed = _required_rejections(snapshot, pod)
        existing = existing_anti_affinity_domains(snapshot, pod)
        existing_failed = _any_domain(snapshot, existing) if existing else None
        for reason, failed, resolvable in (
            (AFFINITY_REASON, affinity_failed, False),
            (ANTI_AFFINITY_REASON, anti_failed, True),
            (EXISTING_ANTI_AFFINITY_REASON, existing_failed, True),
        ):
            if failed is None:
                continue
            mine = failed & ~taken  # mine: (rows,)
            if mine.any():
                rejections.append(Rejection(reason, mine, resolvable, NAME))
                taken |= mine
        return rejections

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        """kube-scheduler's InterPodAffinity score scaled min..max to 0..100 over `feasible`;
        None when no term touches any domain."""
        cache = snapshot.cache
        affinity = pod.pod_affinity
        own_preferred = affinity is not None and affinity.has_preferred
        if not own_preferred and not cache.with_pod_affinity:
            return None
        labels = cache.namespace_labels
        rows: dict[str, list[int]] = {}  # topology key -> node rows of the weighted matches
        weights: dict[str, list[float]] = {}  # topology key -> the weights, in step

        def add(key: str, row: int, weight: float) -> None:
            rows.setdefault(key, []).append(row)
            weights.setdefault(key, []).append(weight)

        keys = None if own_preferred else cache.with_pod_affinity
        for other_state, row in _others(snapshot, pod, keys):
            other = other_state.info
            if affinity is not None:
                for weight, term in affinity.preferred_affinity:
                    if term.matches(other.namespace, other.labels, labels):
                        add(term.topology_key, row, weight)
                for weight, term in affinity.preferred_anti_affinity:
                    if term.matches(other.namespace, other.labels, labels):
                        add(term.topology_key, row, -weight)
            theirs = other.pod_affinity
            if theirs is None:
                continue
            for term in theirs.required_affinity:
                if term.matches(pod.namespace, pod.labels, labels):
                    add(term.topology_key, row, HARD_POD_AFFINITY_WEIGHT)
            for weight, term in theirs.preferred_affinity:
                if term.matches(pod.namespace, pod.labels, labels):
                    add(term.topology_key, row, weight)
            for weight, term in theirs.preferred_anti_affinity:
                if term.matches(pod.namespace, pod.labels, labels):
                    add(term.topology_key, row, -weight)
        points = np.zeros(snapshot.rows, dtype=np.float64)  # points: (rows,)
        touched = False
        for key, key_rows in rows.items():
            column = snapshot.label(key)
            codes = column.codes[np.asarray(key_rows, dtype=np.intp)]  # codes: (matches,)
            present = codes >= 0  # present: (matches,)
            if not present.any():
                continue
            touched = True
            table = np.bincount(  # table: (values + 1,) summed weight per domain; last: none
                codes[present],
                weights=np.asarray(weights[key], dtype=np.float64)[present],
                minlength=len(column.values) + 1,
            )
            points += table[column.codes]  # code -1 (no label) reads the last entry, 0
        if not touched:
            return None
        if not feasible.any():
            return np.zeros(snapshot.rows, dtype=np.float64)
        low, high = points[feasible].min(), points[feasible].max()
        if high <= low:
            return np.zeros(snapshot.rows, dtype=np.float64)
        scaled: FloatArray = (points - low) * (MAX_POINTS / (high - low))  # scaled: (rows,)
        return scaled
