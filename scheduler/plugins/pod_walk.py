"""A plain walk over the cache's pods: the reference for InterPodAffinity and PodTopologySpread.

The plugins read their counts from the cache's count tables (`scheduler.state.pod_counts`). The
classes here are the same plugins with those counts computed the direct way instead, by visiting
every counted pod on every question, as the plugins did before the tables: `WalkedInterPodAffinity`
collects, per topology key, the label codes that hold a matching pod (and the weights for the
score), `WalkedPodTopologySpread` matches the namespace's pods against the selector. Everything
else (the rules' order, eligibility, normalization) is the plugins' own code, so a difference
between a plugin and its walked twin is a difference in counting.

Used by the equivalence tests and by `hack.bench.affinity` as the baseline; not by the daemon.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from scheduler.framework.interface import BoolArray, FloatArray
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.spread import PodSelector
from scheduler.plugins.inter_pod_affinity import (
    HELD_FACTORS,
    InterPodAffinity,
    Masks,
    matches_all,
)
from scheduler.plugins.topology_spread import IntArray, PodTopologySpread
from scheduler.state.cache import PodState, own_keys

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


def counted_pods(
    snapshot: Snapshot, pod: PodInfo, keys: Iterable[str] | None = None
) -> Iterator[tuple[PodState, int]]:
    """The counted entries among `keys` (None: all) on known nodes, with their node row; never
    the pod's own entries."""
    cache = snapshot.cache
    own = own_keys(pod.key)
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


class WalkedInterPodAffinity(InterPodAffinity):
    """InterPodAffinity counting by a walk over the pods (see the module docstring)."""

    def failures(self, pod: PodInfo, snapshot: Snapshot) -> Masks:
        cache = snapshot.cache
        labels = cache.namespace_labels
        barred_by_others = _Rows()
        for state, row in counted_pods(snapshot, pod, cache.with_required_anti_affinity):
            affinity = state.info.pod_affinity
            assert affinity is not None
            for term in affinity.required_anti_affinity:
                if term.matches(pod.namespace, pod.labels, labels):
                    barred_by_others.add(term.topology_key, row)
        existing = barred_by_others.domains(snapshot)
        existing_failed = _any_domain(snapshot, existing) if existing else None
        affinity = pod.pod_affinity
        if affinity is None or not affinity.has_required:
            return None, None, existing_failed
        required = affinity.required_affinity
        anti = affinity.required_anti_affinity
        wanted_rows = _Rows()
        barred_rows = _Rows()
        for state, row in counted_pods(snapshot, pod):
            other = state.info
            if required and matches_all(required, other, labels):
                for term in required:
                    wanted_rows.add(term.topology_key, row)
            for term in anti:
                if term.matches(other.namespace, other.labels, labels):
                    barred_rows.add(term.topology_key, row)
        wanted = wanted_rows.domains(snapshot)
        affinity_failed = None
        if required:
            has_keys = np.ones(snapshot.rows, dtype=bool)  # has_keys: (rows,)
            pods_exist = np.ones(snapshot.rows, dtype=bool)  # pods_exist: (rows,)
            for term in required:
                has_keys &= snapshot.label(term.topology_key).codes >= 0
                pods_exist &= _in_domains(snapshot, term.topology_key, wanted)
            first_of_group = not wanted and matches_all(required, pod, labels)
            affinity_failed = ~has_keys if first_of_group else ~(has_keys & pods_exist)
        anti_failed = _any_domain(snapshot, barred_rows.domains(snapshot)) if anti else None
        return affinity_failed, anti_failed, existing_failed

    def points(self, pod: PodInfo, snapshot: Snapshot) -> FloatArray | None:
        cache = snapshot.cache
        labels = cache.namespace_labels
        affinity = pod.pod_affinity
        rows: dict[str, list[int]] = {}  # topology key -> node rows of the weighted matches
        weights: dict[str, list[float]] = {}  # topology key -> the weights, in step

        def add(key: str, row: int, weight: float) -> None:
            rows.setdefault(key, []).append(row)
            weights.setdefault(key, []).append(weight)

        own_preferred = affinity is not None and affinity.has_preferred
        keys = None if own_preferred else cache.with_pod_affinity
        own_weighted = (
            ((1, affinity.preferred_affinity), (-1, affinity.preferred_anti_affinity))
            if affinity is not None
            else ()
        )
        for other_state, row in counted_pods(snapshot, pod, keys):
            other = other_state.info
            for sign, weighted in own_weighted:
                for weight, term in weighted:
                    if term.matches(other.namespace, other.labels, labels):
                        add(term.topology_key, row, sign * weight)
            theirs = other.pod_affinity
            for role, weight, term in theirs.held_terms if theirs is not None else ():
                factor = HELD_FACTORS.get(role)
                if factor is not None and term.matches(pod.namespace, pod.labels, labels):
                    add(term.topology_key, row, factor * weight)
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
        return points if touched else None


class WalkedPodTopologySpread(PodTopologySpread):
    """PodTopologySpread counting by a walk over the namespace's pods."""

    def matching_per_row(self, pod: PodInfo, selector: PodSelector, snapshot: Snapshot) -> IntArray:
        rows = snapshot.rows
        if selector.empty or selector.nothing:
            return np.zeros(rows, dtype=np.int64)
        cache = snapshot.cache
        row_of = cache.row_of
        hits = [
            row
            for state in cache.pods.values()
            if (info := state.info).namespace == pod.namespace
            and not info.terminating
            and info.key != pod.key
            and (row := row_of.get(state.node)) is not None
            and selector.matches(info.labels)
        ]
        return np.bincount(np.asarray(hits, dtype=np.int64), minlength=rows)[:rows]
