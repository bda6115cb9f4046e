"""Counted pods per node row, by what selects them, kept current as the cache changes.

Pod affinity and topology spread ask two questions about the pods the cache counts: how many
pods a selector matches on each node (the incoming pod's own terms and spread constraints), and
where the pods are whose own pod (anti-)affinity terms might match the incoming pod. Walking every
counted pod for each question made a pod's cost grow with the pods in the cluster. Here both
answers are (rows,) int32 arrays that the cache's hooks keep up to date; a plugin turns one into
domain counts with one `np.bincount` over a label column and reads it per node with one gather.

Two kinds of table:

- **Selections** (`matching`): per `PodMatch` (a label selector with its namespaces or namespace
  selector, whether terminating pods count, and for required affinity the conjunction of the
  pod's terms), the pods it matches on each row. A selection is registered on first use with one
  walk over the cache's pods and from then on follows every pod event. Pods of one workload carry
  the same terms, so few selections are live at a time; at most `selections_kept` are kept (256,
  fewer on clusters of more than 15,625 nodes), the least recently used dropped first. A pod
  event looks only at the selections indexed under its namespace (or any namespace) and under
  one of its own labels: `PodMatch.anchor` is an `In` requirement every matching pod meets;
  selections without one are checked for every pod of the namespace.
- **Held terms** (`held_terms`, `held_weights`): per role
  (`scheduler.model.pod_affinity.PodAffinity.held_terms`) and term of the counted pods' pod
  (anti-)affinity, the sum of the weights (1 for a required term) of the pods on each row that
  hold it. A held term is matched against the incoming pod once, not once per pod that holds
  it. A table lives while a counted pod holds its term.

What counts: every entry of the cache's pod table (bound pods, assumed pods, reservations) on a
node the cache knows, exactly the entries the plain walk visited. A table knows nothing of the
incoming pod: `exclude` takes out the entries of the given keys (the pod itself and its
reservation), which the walk skipped.

The cache calls `add` / `remove` for an entry counted on (or leaving) a known row, `replace` when
an entry's pod record changes in place, and `add` / `remove` for each entry of a node that appears
or goes away. Selections that read namespace labels (a namespaceSelector) are rebuilt on their next
use after the labels changed (`NamespaceLabelStore.version`). Everything runs on the event loop
thread, like the cache; the arrays returned are read-only views valid until the next cache change.

Memory: 4 bytes per node row per table: at most 16 MB of selections (`SELECTION_CELLS`; at least
`MIN_SELECTIONS` of them), plus one table per distinct held term.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import (
    Callable,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from scheduler.model.objects import PodInfo
from scheduler.model.pod_affinity import PodAffinityTerm
from scheduler.model.spread import PodSelector

Int32Array = npt.NDArray[np.int32]
NamespaceLabels = Mapping[str, Mapping[str, str]]

MAX_SELECTIONS = 256
"""Selections kept at most; the least recently used one goes when another is registered."""
SELECTION_CELLS = 4_000_000
"""Node rows times selections kept, at most (16 MB of counts): on a cluster of more than
`SELECTION_CELLS / MAX_SELECTIONS` nodes fewer selections are kept, but never fewer than
`MIN_SELECTIONS`."""
MIN_SELECTIONS = 16


def selections_kept(rows: int) -> int:
    """How many selections are kept with `rows` node rows."""
    return min(MAX_SELECTIONS, max(MIN_SELECTIONS, SELECTION_CELLS // max(rows, 1)))


class NamespaceLabelStore(MutableMapping[str, dict[str, str]]):
    """Namespace name -> labels, with a `version` that grows on every change, so tables built on
    the labels know when to rebuild."""

    def __init__(self) -> None:
        self._labels: dict[str, dict[str, str]] = {}
        self.version = 0

    def __getitem__(self, name: str) -> dict[str, str]:
        return self._labels[name]

    def __setitem__(self, name: str, labels: dict[str, str]) -> None:
        self._labels[name] = labels
        self.version += 1

    def __delitem__(self, name: str) -> None:
        del self._labels[name]
        self.version += 1

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __contains__(self, name: object) -> bool:
        return name in self._labels


class CountedPod(Protocol):
    """An entry of the cache's pod table (`scheduler.state.cache.PodState`)."""

    @property
    def info(self) -> PodInfo: ...

    @property
    def node(self) -> str: ...


class CountedPods(Protocol):
    """What the tables read from the cache: its pod entries and node rows."""

    @property
    def pods(self) -> Mapping[str, CountedPod]: ...

    @property
    def row_of(self) -> Mapping[str, int]: ...

    @property
    def rows(self) -> int: ...

    @property
    def namespace_labels(self) -> NamespaceLabelStore: ...


@dataclass(frozen=True, eq=False)
class PodMatch:
    """Which pods a selection counts. `key` is its identity (equal keys select the same pods);
    `test` decides for one pod; `namespaces` (None: any) and `anchor` (an `In` requirement as
    (label key, values) that every matching pod meets, or None) only narrow which selections a
    pod event looks at."""

    key: Hashable
    test: Callable[[PodInfo, NamespaceLabels], bool]
    namespaces: frozenset[str] | None
    anchor: tuple[str, tuple[str, ...]] | None
    reads_namespace_labels: bool


class _Requirement(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def operator(self) -> str: ...

    @property
    def values(self) -> tuple[str, ...]: ...


def _anchor(requirements: Sequence[_Requirement]) -> tuple[str, tuple[str, ...]] | None:
    for requirement in requirements:
        if requirement.operator == "In":
            return requirement.key, requirement.values
    return None


def affinity_match(terms: tuple[PodAffinityTerm, ...]) -> PodMatch | None:
    """The pods matching every one of `terms` (namespaces and label selector; the topology key
    plays no part); None when one of them selects no pod (no labelSelector)."""
    if not terms or any(term.selector is None for term in terms):
        return None
    first = terms[0]
    assert first.selector is not None

    def test(pod: PodInfo, namespace_labels: NamespaceLabels) -> bool:
        return all(term.matches(pod.namespace, pod.labels, namespace_labels) for term in terms)

    return PodMatch(
        key=("affinity", tuple((t.selector, t.namespaces, t.namespace_selector) for t in terms)),
        test=test,
        namespaces=first.namespaces if first.namespace_selector is None else None,
        anchor=_anchor(first.selector.requirements),
        reads_namespace_labels=any(term.namespace_selector is not None for term in terms),
    )


def spread_match(namespace: str, selector: PodSelector) -> PodMatch:
    """The pods topology spread counts for `selector`: in `namespace`, not terminating, matching
    it."""

    def test(pod: PodInfo, namespace_labels: NamespaceLabels) -> bool:
        return pod.namespace == namespace and not pod.terminating and selector.matches(pod.labels)

    return PodMatch(
        key=("spread", namespace, selector),
        test=test,
        namespaces=frozenset((namespace,)),
        anchor=_anchor(selector.requirements),
        reads_namespace_labels=False,
    )


def _grown(counts: Int32Array, rows: int) -> Int32Array:
    """`counts` with room for at least `rows` rows (new rows 0)."""
    if counts.shape[0] >= rows:
        return counts
    grown = np.zeros(max(rows, 2 * counts.shape[0]), dtype=np.int32)  # grown: (capacity,)
    grown[: counts.shape[0]] = counts
    return grown


def _read_only(counts: Int32Array) -> Int32Array:
    view = counts.view()
    view.flags.writeable = False
    return view


class _Selection:
    __slots__ = ("counts", "match", "version")

    def __init__(self, match: PodMatch, counts: Int32Array, version: int) -> None:
        self.match = match
        self.counts = counts  # counts: (capacity,) matching pods per row
        self.version = version


class _Held:
    __slots__ = ("holders", "weights")

    def __init__(self, rows: int) -> None:
        self.weights = np.zeros(max(rows, 1), dtype=np.int32)  # weights: (capacity,)
        self.holders = 0
        """Entries counted in `weights`; the table goes when it drops to 0."""


_Bucket = dict[tuple[str, str] | None, set[Hashable]]
"""Anchor label (key, value), or None for selections without an anchor -> selection keys."""


class PodCounts:
    """The count tables of one cache (see the module docstring)."""

    def __init__(self, source: CountedPods) -> None:
        self._source = source
        self._selections: OrderedDict[Hashable, _Selection] = OrderedDict()
        self._index: dict[str | None, _Bucket] = {}
        """Namespace (None: any namespace) -> anchor -> selection keys."""
        self._held: dict[str, dict[PodAffinityTerm, _Held]] = {}

    # -- reads ---------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        """Node rows of the cache (the length of every array returned)."""
        return self._source.rows

    def matching(self, match: PodMatch, exclude: Iterable[str] = ()) -> Int32Array:
        """(rows,) pods `match` selects on each node row, without the entries of `exclude`."""
        source = self._source
        version = source.namespace_labels.version
        selection = self._selections.get(match.key)
        if selection is None or (match.reads_namespace_labels and selection.version != version):
            if selection is not None:
                self._drop(match.key)
            selection = self._register(match, version)
        else:
            self._selections.move_to_end(match.key)
        rows = source.rows
        selection.counts = _grown(selection.counts, rows)
        counts = selection.counts[:rows]  # counts: (rows,)
        found: Int32Array | None = None
        for row, info in self._entries(exclude):
            if selection.match.test(info, source.namespace_labels):
                if found is None:
                    found = counts.copy()
                found[row] -= 1
        return found if found is not None else _read_only(counts)

    @property
    def live_selections(self) -> int:
        """Selections kept now (at most `selections_kept`)."""
        return len(self._selections)

    def held_terms(self, role: str) -> list[PodAffinityTerm]:
        """The distinct terms counted pods hold in `role` (see `held_weights`)."""
        return list(self._held.get(role, ()))

    def held_weights(
        self, role: str, term: PodAffinityTerm, exclude: Iterable[str] = ()
    ) -> Int32Array:
        """(rows,) the summed weights of the counted pods holding `term` in `role` per node row
        (0 everywhere for a term no pod holds), without the entries of `exclude`."""
        rows = self._source.rows
        table = self._held.get(role, {}).get(term)
        if table is None:
            return _read_only(np.zeros(rows, dtype=np.int32))
        table.weights = _grown(table.weights, rows)
        weights = table.weights[:rows]  # weights: (rows,)
        found: Int32Array | None = None
        for row, info in self._entries(exclude):
            affinity = info.pod_affinity
            for held_role, weight, held_term in affinity.held_terms if affinity else ():
                if held_role == role and held_term == term:
                    if found is None:
                        found = weights.copy()
                    found[row] -= weight
        return found if found is not None else _read_only(weights)

    def _entries(self, keys: Iterable[str]) -> Iterator[tuple[int, PodInfo]]:
        """(row, pod) of the entries of `keys` counted on a known row."""
        source = self._source
        for key in keys:
            state = source.pods.get(key)
            if state is not None:
                row = source.row_of.get(state.node)
                if row is not None:
                    yield row, state.info

    # -- selections ----------------------------------------------------------------------------

    def _register(self, match: PodMatch, version: int) -> _Selection:
        source = self._source
        labels = source.namespace_labels
        rows = []
        for state in source.pods.values():
            row = source.row_of.get(state.node)
            if row is not None and match.test(state.info, labels):
                rows.append(row)
        capacity = max(source.rows, 1)
        counts = np.bincount(np.asarray(rows, dtype=np.intp), minlength=capacity)  # (capacity,)
        selection = _Selection(match, counts.astype(np.int32), version)
        self._selections[match.key] = selection
        for namespace in match.namespaces if match.namespaces is not None else (None,):
            bucket = self._index.setdefault(namespace, {})
            for anchor in self._anchors(match):
                bucket.setdefault(anchor, set()).add(match.key)
        while len(self._selections) > selections_kept(source.rows):
            self._drop(next(iter(self._selections)))
        return selection

    @staticmethod
    def _anchors(match: PodMatch) -> list[tuple[str, str] | None]:
        if match.anchor is None:
            return [None]
        key, values = match.anchor
        return [(key, value) for value in values]

    def _drop(self, key: Hashable) -> None:
        match = self._selections.pop(key).match
        for namespace in match.namespaces if match.namespaces is not None else (None,):
            bucket = self._index.get(namespace, {})
            for anchor in self._anchors(match):
                keys = bucket.get(anchor)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del bucket[anchor]
            if not bucket:
                self._index.pop(namespace, None)

    def _candidates(self, pod: PodInfo) -> Iterator[_Selection]:
        """The selections that may match `pod`: each at most once."""
        for namespace in (pod.namespace, None):
            bucket = self._index.get(namespace)
            if not bucket:
                continue
            for key in bucket.get(None, ()):
                yield self._selections[key]
            for label in pod.labels.items():
                for key in bucket.get(label, ()):
                    yield self._selections[key]

    # -- hooks ---------------------------------------------------------------------------------

    def add(self, pod: PodInfo, row: int) -> None:
        """An entry for `pod` is now counted on node row `row`."""
        self._count(pod, row, 1)

    def remove(self, pod: PodInfo, row: int) -> None:
        """The entry for `pod` on node row `row` is no longer counted."""
        self._count(pod, row, -1)

    def replace(self, old: PodInfo, new: PodInfo, row: int) -> None:
        """An entry counted on `row` now holds `new` instead of `old` (same pod, updated)."""
        if old is new or (
            old.namespace == new.namespace
            and old.terminating == new.terminating
            and old.labels == new.labels
            and old.pod_affinity == new.pod_affinity
        ):
            return
        self._count(old, row, -1)
        self._count(new, row, 1)

    def _count(self, pod: PodInfo, row: int, sign: int) -> None:
        labels = self._source.namespace_labels
        for selection in self._candidates(pod):
            if selection.match.test(pod, labels):
                if row >= selection.counts.shape[0]:
                    selection.counts = _grown(selection.counts, row + 1)
                selection.counts[row] += sign
        affinity = pod.pod_affinity
        if affinity is None:
            return
        rows = self._source.rows
        for role, weight, term in affinity.held_terms:
            tables = self._held.setdefault(role, {})
            table = tables.get(term)
            if table is None:
                table = tables[term] = _Held(rows)
            if row >= table.weights.shape[0]:
                table.weights = _grown(table.weights, row + 1)
            table.weights[row] += sign * weight
            table.holders += sign
            if table.holders <= 0:
                del tables[term]
                if not tables:
                    del self._held[role]
