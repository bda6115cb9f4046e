"""The cache's count tables against the plain walk over pods, on seeded random histories.

Each history starts from a random cluster and applies random cache operations (bound pods
added, pods assumed, forgotten, confirmed, deleted, relabelled, marked terminating, reservations
made and dropped, nodes removed, added and relabelled, namespace labels changed, what-if
removals); after each step InterPodAffinity and PodTopologySpread must reject the same nodes for
the same reasons and score them the same as their walked twins (`scheduler.plugins.pod_walk`),
for random incoming pods, including pods that are themselves in the cache or have room reserved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from scheduler.framework.interface import BoolArray, CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo, parse_node, parse_pod
from scheduler.model.pod_affinity import REQUIRED_ANTI_AFFINITY, PodAffinityTerm
from scheduler.model.spread import PodSelector
from scheduler.plugins.inter_pod_affinity import InterPodAffinity
from scheduler.plugins.pod_walk import WalkedInterPodAffinity, WalkedPodTopologySpread
from scheduler.plugins.topology_spread import PodTopologySpread
from scheduler.state import pod_counts
from scheduler.state.cache import ClusterCache
from scheduler.state.pod_counts import PodMatch, affinity_match, spread_match
from tests.unit.scheduler.builders import Json, make_node, make_pod, taint

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
KEYS = (ZONE, RACK, HOST, "example.com/nowhere")
NAMESPACES = ("a", "b", "c")
LABELS = {"app": ("web", "db", "cache"), "tier": ("gold", "silver"), "version": ("v1", "v2")}
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class History:
    """A random cluster and the pods it holds, as JSON, for one seed."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.cache = ClusterCache()
        self.serial = 0
        self.bound: dict[str, Json] = {}  # informer-confirmed pods by key
        self.assumed: dict[str, Json] = {}  # assumed pods (pending JSON) by key, with their node
        self.assumed_on: dict[str, str] = {}
        self.reserved: dict[str, Json] = {}
        self.removed_nodes: list[Json] = []
        for _ in range(int(self.rng.integers(4, 10))):
            self.add_node()
        for _ in range(int(self.rng.integers(5, 25))):
            self.bind()

    # -- random objects ------------------------------------------------------------------------

    def pick(self, items: Any) -> Any:
        items = list(items)
        return items[int(self.rng.integers(len(items)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def labels(self) -> dict[str, str]:
        return {key: self.pick(values) for key, values in LABELS.items() if self.chance(0.6)}

    def selector(self) -> Json | None:
        if self.chance(0.08):
            return None
        found: Json = {}
        if self.chance(0.75):
            found["matchLabels"] = {
                key: self.pick(LABELS[key])
                for key in self.pick([["app"], ["tier"], ["app", "tier"]])
            }
        if self.chance(0.35):
            key = self.pick(LABELS)
            operator = self.pick(OPERATORS)
            expression: Json = {"key": key, "operator": operator}
            if operator in ("In", "NotIn"):
                expression["values"] = sorted({self.pick(LABELS[key]) for _ in range(2)})
            found["matchExpressions"] = [expression]
        return found

    def term(self) -> Json:
        raw: Json = {"topologyKey": self.pick(KEYS)}
        selector = self.selector()
        if selector is not None:
            raw["labelSelector"] = selector
        where = self.rng.random()
        if where < 0.2:
            raw["namespaces"] = sorted({self.pick(NAMESPACES) for _ in range(2)})
        elif where < 0.3:
            raw["namespaceSelector"] = {}
        elif where < 0.4:
            raw["namespaceSelector"] = {"matchLabels": {"team": self.pick("xy")}}
        if self.chance(0.1):
            raw["matchLabelKeys"] = ["version"]
        return raw

    def affinity(self) -> Json:
        found: Json = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            part: Json = {}
            if self.chance(0.35):
                part["requiredDuringSchedulingIgnoredDuringExecution"] = [
                    self.term() for _ in range(int(self.rng.integers(1, 3)))
                ]
            if self.chance(0.4):
                part["preferredDuringSchedulingIgnoredDuringExecution"] = [
                    {"weight": int(self.rng.integers(1, 101)), "podAffinityTerm": self.term()}
                    for _ in range(int(self.rng.integers(1, 3)))
                ]
            if part:
                found[kind] = part
        return found

    def constraints(self) -> list[Json]:
        found = []
        for key in KEYS[:3]:
            for when in ("DoNotSchedule", "ScheduleAnyway"):
                if not self.chance(0.2):
                    continue
                raw: Json = {
                    "maxSkew": int(self.rng.integers(1, 4)),
                    "topologyKey": key,
                    "whenUnsatisfiable": when,
                }
                selector = self.selector()
                if selector is not None:
                    raw["labelSelector"] = selector
                if when == "DoNotSchedule" and self.chance(0.3):
                    raw["minDomains"] = int(self.rng.integers(1, 5))
                if self.chance(0.3):
                    raw["nodeAffinityPolicy"] = self.pick(("Honor", "Ignore"))
                if self.chance(0.3):
                    raw["nodeTaintsPolicy"] = self.pick(("Honor", "Ignore"))
                found.append(raw)
        return found

    def pod(self, node: str | None = None) -> Json:
        self.serial += 1
        raw = make_pod(
            f"p{self.serial}",
            gpus=0,
            node=node,
            namespace=self.pick(NAMESPACES),
            affinity=self.affinity() if self.chance(0.4) else None,
            node_selector={ZONE: self.pick(("z0", "z1"))} if self.chance(0.15) else None,
        )
        raw["metadata"]["labels"] = self.labels()
        if self.chance(0.3):
            raw["spec"]["topologySpreadConstraints"] = self.constraints()
        if self.chance(0.05):
            raw["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
        return raw

    def add_node(self, name: str = "") -> None:
        """A new node (or `name`, new or not) with random zone, rack and taints."""
        self.serial += 1
        labels = {RACK: f"r{self.serial % 4}"}
        if self.chance(0.85):
            labels[ZONE] = f"z{self.serial % 3}"
        taints = [taint("dedicated", "x")] if self.chance(0.15) else []
        node = make_node(name or f"n{self.serial}", gpus=0, labels=labels, taints=taints)
        self.cache.add_or_update_node(parse_node(node))

    def relabel_node(self) -> None:
        """An existing node moves to another zone or rack; or the node bound pods named before
        it existed appears."""
        if self.chance(0.3) and "unknown-node" not in self.cache.nodes:
            self.add_node("unknown-node")
        elif self.node_names:
            self.add_node(self.pick(self.node_names))

    @property
    def node_names(self) -> list[str]:
        return list(self.cache.nodes)

    # -- operations ----------------------------------------------------------------------------

    def bind(self) -> None:
        if not self.node_names:
            return
        raw = self.pod(self.pick([*self.node_names, "unknown-node"]))
        self.bound[f"{raw['metadata']['namespace']}/{raw['metadata']['name']}"] = raw
        self.cache.add_pod(parse_pod(raw))

    def assume(self) -> None:
        if not self.node_names:
            return
        raw = self.pod()
        pod = parse_pod(raw)
        node = self.pick(self.node_names)
        self.cache.assume(pod, node, ())
        self.assumed[pod.key], self.assumed_on[pod.key] = raw, node

    def forget(self) -> None:
        if self.assumed:
            key = self.pick(self.assumed)
            self.cache.forget(key)
            del self.assumed[key], self.assumed_on[key]

    def confirm(self) -> None:
        if self.assumed:
            key = self.pick(self.assumed)
            raw = self.assumed.pop(key)
            raw["spec"]["nodeName"] = self.assumed_on.pop(key)
            if self.chance(0.5):
                raw["metadata"]["labels"] = self.labels()  # relabelled while in flight
            self.bound[key] = raw
            self.cache.add_pod(parse_pod(raw))

    def delete(self) -> None:
        if self.bound:
            key = self.pick(self.bound)
            del self.bound[key]
            self.cache.remove_pod(key)

    def relabel(self) -> None:
        if self.bound:
            raw = self.bound[self.pick(self.bound)]
            raw["metadata"]["labels"] = self.labels()
            self.cache.add_pod(parse_pod(raw))

    def terminate(self) -> None:
        if self.bound:
            raw = self.bound[self.pick(self.bound)]
            raw["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
            self.cache.add_pod(parse_pod(raw))

    def reserve(self) -> None:
        if self.node_names:
            raw = self.pod()
            pod = parse_pod(raw)
            self.cache.reserve(pod, self.pick(self.node_names), (), now=0.0)
            self.reserved[pod.key] = raw

    def unreserve(self) -> None:
        if self.reserved:
            key = self.pick(self.reserved)
            self.cache.drop_reservation(key)
            del self.reserved[key]

    def remove_node(self) -> None:
        if len(self.node_names) > 1:
            name = self.pick(self.node_names)
            node = self.cache.nodes[name]
            self.cache.remove_node(name)
            self.removed_nodes.append(
                make_node(name, gpus=0, labels={k: v for k, v in node.labels.items() if k != HOST})
            )

    def restore_node(self) -> None:
        if self.removed_nodes:
            raw = self.removed_nodes.pop(int(self.rng.integers(len(self.removed_nodes))))
            self.cache.add_or_update_node(parse_node(raw))
        else:
            self.add_node()

    def namespace_labels(self) -> None:
        namespace = self.pick(NAMESPACES)
        if self.chance(0.3):
            self.cache.namespace_labels.pop(namespace, None)
        else:
            self.cache.namespace_labels[namespace] = {"team": self.pick("xy")}

    def step(self) -> None:
        operation = self.pick(
            [
                self.bind,
                self.bind,
                self.assume,
                self.forget,
                self.confirm,
                self.delete,
                self.relabel,
                self.terminate,
                self.reserve,
                self.unreserve,
                self.remove_node,
                self.restore_node,
                self.add_node,
                self.relabel_node,
                self.namespace_labels,
            ]
        )
        operation()

    def incoming(self) -> Iterator[PodInfo]:
        """A fresh pod, a pod the cache counts, and a pod with room reserved (when any)."""
        yield parse_pod(self.pod())
        if self.bound:
            yield parse_pod(self.bound[self.pick(self.bound)])
        if self.reserved:
            yield parse_pod(self.reserved[self.pick(self.reserved)])

    @contextmanager
    def what_if(self) -> Iterator[None]:
        """A what-if removal of a few counted pods, as victim selection does."""
        keys = [key for key in self.cache.pods if self.chance(0.2)]
        with self.cache.without(keys):
            yield


def same_rejections(ours: list[Rejection], walked: list[Rejection]) -> None:
    assert [(r.reason, r.resolvable) for r in ours] == [(r.reason, r.resolvable) for r in walked]
    for mine, theirs in zip(ours, walked, strict=True):
        assert np.array_equal(mine.failed, theirs.failed), mine.reason


def same_scores(ours: Any, walked: Any) -> None:
    assert (ours is None) == (walked is None)
    if ours is not None:
        assert np.array_equal(ours, walked)


PAIRS = (
    (InterPodAffinity(), WalkedInterPodAffinity()),
    (PodTopologySpread(), WalkedPodTopologySpread()),
)


def check(history: History) -> None:
    snapshot = Snapshot(history.cache)
    feasible: BoolArray = snapshot.valid & (history.rng.random(snapshot.rows) < 0.8)
    for pod in history.incoming():
        for plugin, walked in PAIRS:
            ours = plugin.filter(pod, snapshot, CycleState())
            same_rejections(ours, walked.filter(pod, snapshot, CycleState()))
            for mask in (snapshot.valid.copy(), feasible):
                same_scores(
                    plugin.score(pod, snapshot, CycleState(), mask),
                    walked.score(pod, snapshot, CycleState(), mask),
                )


def walk_count(cache: ClusterCache, match: PodMatch) -> np.ndarray:
    """(rows,) pods `match` selects per node row, by walking the cache."""
    found = np.zeros(cache.rows, dtype=np.int64)
    for state in cache.pods.values():
        row = cache.row_of.get(state.node)
        if row is not None and match.test(state.info, cache.namespace_labels):
            found[row] += 1
    return found


def check_tables(history: History) -> None:
    """Every selection a random pod's terms and constraints ask for, and every held term, equal
    the walk."""
    cache = history.cache
    pod = parse_pod(history.pod())
    matches = [spread_match(pod.namespace, c.selector) for c in pod.spread_constraints]
    affinity = pod.pod_affinity
    for terms in affinity.held_terms if affinity else ():
        match = affinity_match((terms[2],))
        if match is not None:
            matches.append(match)
    for match in matches:
        assert np.array_equal(cache.pod_counts.matching(match), walk_count(cache, match))
    for role in {role for state in cache.pods.values() for role, _, _ in _held(state.info)}:
        for term in cache.pod_counts.held_terms(role):
            expected = np.zeros(cache.rows, dtype=np.int64)
            for state in cache.pods.values():
                row = cache.row_of.get(state.node)
                for held_role, weight, held in _held(state.info):
                    if row is not None and held_role == role and held == term:
                        expected[row] += weight
            assert np.array_equal(cache.pod_counts.held_weights(role, term), expected)


def _held(pod: PodInfo) -> tuple[tuple[str, int, Any], ...]:
    return pod.pod_affinity.held_terms if pod.pod_affinity else ()


@pytest.mark.parametrize("seed", range(40))
def test_counts_and_verdicts_equal_the_walk(seed: int) -> None:
    history = History(seed)
    check(history)
    for _ in range(40):
        history.step()
        check(history)
        check_tables(history)
        if history.chance(0.1):
            with history.what_if():
                check(history)


@pytest.mark.parametrize("seed", range(5))
def test_equal_with_few_selections_kept(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_counts, "MAX_SELECTIONS", 2)
    history = History(100 + seed)
    for _ in range(30):
        history.step()
        check(history)
        assert history.cache.pod_counts.live_selections <= 2


@pytest.mark.parametrize(("rows", "kept"), [(1, 256), (1000, 256), (100_000, 40), (10**7, 16)])
def test_fewer_selections_are_kept_on_larger_clusters(rows: int, kept: int) -> None:
    assert pod_counts.selections_kept(rows) == kept


# -- what the tables save ----------------------------------------------------------------------


def zone_cluster(pods: int) -> ClusterCache:
    cache = ClusterCache()
    for index in range(6):
        labels = {ZONE: f"z{index % 3}"}
        cache.add_or_update_node(parse_node(make_node(f"n{index}", gpus=0, labels=labels)))
    for index in range(pods):
        raw = make_pod(f"w{index}", gpus=0, node=f"n{index % 2}", namespace="a")
        raw["metadata"]["labels"] = {"app": "web"}
        raw["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "db"}}}
                ]
            }
        }
        cache.add_pod(parse_pod(raw))
    return cache


def workload_pod(name: str) -> PodInfo:
    term: Json = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "web"}}}
    raw = make_pod(name, gpus=0, namespace="a")
    raw["metadata"]["labels"] = {"app": "web"}
    raw["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": term}
            ],
        }
    }
    raw["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
        for when in ("DoNotSchedule", "ScheduleAnyway")
    ]
    return parse_pod(raw)


def test_a_registered_selection_answers_without_walking_the_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = zone_cluster(30)
    snapshot = Snapshot(cache)
    first = workload_pod("first")
    for plugin, _ in PAIRS:
        plugin.filter(first, snapshot, CycleState())  # registers the workload's selections
        plugin.score(first, snapshot, CycleState(), snapshot.valid.copy())
    second = workload_pod("second")  # another pod of the same workload: same terms
    for plugin, walked in PAIRS:
        matched = count_matching(monkeypatch)
        ours = plugin.filter(second, snapshot, CycleState())
        points = plugin.score(second, snapshot, CycleState(), snapshot.valid.copy())
        assert sum(matched.values()) <= 4  # the held terms, not the 30 pods
        assert ours and points is not None
        same_rejections(ours, walked.filter(second, snapshot, CycleState()))
        same_scores(points, walked.score(second, snapshot, CycleState(), snapshot.valid.copy()))
        assert sum(matched.values()) >= 30  # the walk visits every pod


def count_matching(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of the label matchers of affinity terms and spread selectors, by class."""
    counted: Counter[str] = Counter()
    for cls in (PodAffinityTerm, PodSelector):
        original = cls.matches

        def counting(self: Any, *args: Any, original: Any = original) -> bool:
            counted[type(self).__name__] += 1
            return bool(original(self, *args))

        monkeypatch.setattr(cls, "matches", counting)
    return counted


def test_a_pod_event_looks_only_at_selections_of_its_namespace_and_labels() -> None:
    cache = zone_cluster(0)
    tested: list[str] = []

    def counting(name: str, match: PodMatch) -> PodMatch:
        def test(pod: PodInfo, labels: Mapping[str, Mapping[str, str]]) -> bool:
            tested.append(name)
            return match.test(pod, labels)

        return PodMatch(match.key, test, match.namespaces, match.anchor, False)

    web = workload_pod("in-a").spread_constraints[0].selector
    for name, match in (
        ("web in a", spread_match("a", web)),
        ("web in b", spread_match("b", web)),
    ):
        cache.pod_counts.matching(counting(name, match))
    tested.clear()
    raw = make_pod("db", gpus=0, node="n0", namespace="a")
    raw["metadata"]["labels"] = {"app": "db"}
    cache.add_pod(parse_pod(raw))
    assert tested == []  # app=db never meets the anchor app In (web)
    raw = make_pod("web", gpus=0, node="n0", namespace="a")
    raw["metadata"]["labels"] = {"app": "web"}
    cache.add_pod(parse_pod(raw))
    assert tested == ["web in a"]


def test_a_held_term_goes_with_its_last_holder() -> None:
    cache = zone_cluster(3)
    (term,) = cache.pod_counts.held_terms(REQUIRED_ANTI_AFFINITY)
    assert cache.pod_counts.held_weights(REQUIRED_ANTI_AFFINITY, term).sum() == 3
    for index in range(3):
        cache.remove_pod(f"a/w{index}")
    assert cache.pod_counts.held_terms(REQUIRED_ANTI_AFFINITY) == []
    assert cache.pod_counts.held_weights(REQUIRED_ANTI_AFFINITY, term).sum() == 0


def test_tables_grow_with_the_node_rows() -> None:
    cache = zone_cluster(12)
    pod = workload_pod("in")
    match = spread_match("a", pod.spread_constraints[0].selector)
    assert cache.pod_counts.matching(match).sum() == 12
    for index in range(6, 200):
        cache.add_or_update_node(parse_node(make_node(f"n{index}", gpus=0)))
        raw = make_pod(f"late{index}", gpus=0, node=f"n{index}", namespace="a")
        raw["metadata"]["labels"] = {"app": "web"}
        cache.add_pod(parse_pod(raw))
    counted = cache.pod_counts.matching(match)
    assert counted.shape == (cache.rows,)
    assert np.array_equal(counted, walk_count(cache, match))
    assert counted.sum() == 12 + 194
