"""InterPodAffinity: parsing of the terms, the filter's three rules, and the score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from scheduler.config import SchedulerConfig
from scheduler.core.handlers import PodHandler
from scheduler.core.namespaces import NAMESPACE_EVENT, NamespaceLabels
from scheduler.core.profile import default_framework
from scheduler.core.queue import UNSCHEDULABLE
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo, parse_pod
from scheduler.plugins.inter_pod_affinity import (
    AFFINITY_REASON,
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
    InterPodAffinity,
)
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import Json, cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import harness

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def pod_term(
    key: str = HOST,
    match: Mapping[str, str] | None = None,
    *,
    expressions: Sequence[Json] = (),
    namespaces: Sequence[str] | None = None,
    namespace_selector: Json | None = None,
    selector: bool = True,
    **extra: Any,
) -> Json:
    raw: Json = {"topologyKey": key, **extra}
    if selector:
        sel: Json = {}
        if match is not None:
            sel["matchLabels"] = dict(match)
        if expressions:
            sel["matchExpressions"] = list(expressions)
        raw["labelSelector"] = sel
    if namespaces is not None:
        raw["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        raw["namespaceSelector"] = namespace_selector
    return raw


def pod_affinity(
    required: Sequence[Json] = (),
    anti: Sequence[Json] = (),
    preferred: Sequence[tuple[int, Json]] = (),
    anti_preferred: Sequence[tuple[int, Json]] = (),
) -> Json:
    def weighted(items: Sequence[tuple[int, Json]]) -> list[Json]:
        return [{"weight": w, "podAffinityTerm": t} for w, t in items]

    affinity: Json = {}
    for name, req, pref in (
        ("podAffinity", required, preferred),
        ("podAntiAffinity", anti, anti_preferred),
    ):
        part: Json = {}
        if req:
            part["requiredDuringSchedulingIgnoredDuringExecution"] = list(req)
        if pref:
            part["preferredDuringSchedulingIgnoredDuringExecution"] = weighted(pref)
        if part:
            affinity[name] = part
    return affinity


def labelled_pod(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    node: str | None = None,
    namespace: str = "default",
    affinity: Json | None = None,
) -> Json:
    raw = make_pod(name, gpus=0, node=node, namespace=namespace, affinity=affinity)
    if labels:
        raw["metadata"]["labels"] = dict(labels)
    return raw


def zone_nodes() -> list[Json]:
    """n1, n2 in zone a (rack r1, r2); n3 in zone b (rack r3); n4 without zone or rack."""
    return [
        make_node("n1", labels={ZONE: "a", RACK: "r1"}),
        make_node("n2", labels={ZONE: "a", RACK: "r2"}),
        make_node("n3", labels={ZONE: "b", RACK: "r3"}),
        make_node("n4"),
    ]


def run_filter(cache: ClusterCache, pod: PodInfo) -> dict[str, list[str]]:
    """Reason -> names of the nodes it describes."""
    snapshot = Snapshot(cache)
    found: dict[str, list[str]] = {}
    for rejection in InterPodAffinity().filter(pod, snapshot, CycleState()):
        found[rejection.reason] = [snapshot.names[r] for r in np.flatnonzero(rejection.failed)]
    return found


def feasible(cache: ClusterCache, pod: PodInfo) -> list[str]:
    rejected = {name for names in run_filter(cache, pod).values() for name in names}
    return [name for name in Snapshot(cache).names if name not in rejected]


@dataclass
class Case:
    name: str
    incoming: Json
    existing: list[Json] = field(default_factory=list)
    feasible: list[str] = field(default_factory=list)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)


WEB = {"app": "web"}
DB = {"app": "db"}

CASES = [
    Case(
        "hostname affinity: only the node with a matching pod",
        labelled_pod("in", affinity=pod_affinity(required=[pod_term(HOST, DB)])),
        [labelled_pod("db", DB, node="n2")],
        ["n2"],
        {AFFINITY_REASON: ["n1", "n3", "n4"]},
    ),
    Case(
        "zone affinity: the whole zone of the matching pod, never a node without the key",
        labelled_pod("in", affinity=pod_affinity(required=[pod_term(ZONE, DB)])),
        [labelled_pod("db", DB, node="n2")],
        ["n1", "n2"],
    ),
    Case(
        "rack affinity (a custom key): only the rack of the matching pod",
        labelled_pod("in", affinity=pod_affinity(required=[pod_term(RACK, DB)])),
        [labelled_pod("db", DB, node="n3")],
        ["n3"],
    ),
    Case(
        "affinity to a pod of another namespace does not count by default",
        labelled_pod("in", affinity=pod_affinity(required=[pod_term(ZONE, DB)])),
        [labelled_pod("db", DB, node="n3", namespace="other")],
        [],
    ),
    Case(
        "namespaces lists the other namespace",
        labelled_pod(
            "in", affinity=pod_affinity(required=[pod_term(ZONE, DB, namespaces=["other"])])
        ),
        [labelled_pod("db", DB, node="n3", namespace="other")],
        ["n3"],
    ),
    Case(
        "an empty namespaceSelector selects every namespace",
        labelled_pod(
            "in", affinity=pod_affinity(required=[pod_term(ZONE, DB, namespace_selector={})])
        ),
        [labelled_pod("db", DB, node="n3", namespace="other")],
        ["n3"],
    ),
    Case(
        "namespaceSelector matches the namespace's labels",
        labelled_pod(
            "in",
            affinity=pod_affinity(
                required=[pod_term(ZONE, DB, namespace_selector={"matchLabels": {"team": "x"}})]
            ),
        ),
        [
            labelled_pod("db-x", DB, node="n3", namespace="team-x"),
            labelled_pod("db-y", DB, node="n1", namespace="team-y"),
        ],
        ["n3"],
        namespace_labels={"team-x": {"team": "x"}, "team-y": {"team": "y"}},
    ),
    Case(
        "first pod of a group: no pod matches anywhere, the pod matches its own term",
        labelled_pod("in", WEB, affinity=pod_affinity(required=[pod_term(ZONE, WEB)])),
        [],
        ["n1", "n2", "n3"],
        {AFFINITY_REASON: ["n4"]},
    ),
    Case(
        "no pod matches and the pod does not match its own term: nowhere",
        labelled_pod("in", WEB, affinity=pod_affinity(required=[pod_term(ZONE, DB)])),
        [],
        [],
    ),
    Case(
        "affinity counts only pods matching all the terms",
        labelled_pod(
            "in",
            affinity=pod_affinity(required=[pod_term(ZONE, DB), pod_term(HOST, {"tier": "gold"})]),
        ),
        [
            labelled_pod("db", DB, node="n1"),
            labelled_pod("gold", {"tier": "gold"}, node="n1"),
            labelled_pod("both", {"app": "db", "tier": "gold"}, node="n2"),
        ],
        ["n2"],
    ),
    Case(
        "hostname anti-affinity: not beside a matching pod",
        labelled_pod("in", WEB, affinity=pod_affinity(anti=[pod_term(HOST, WEB)])),
        [labelled_pod("web", WEB, node="n1")],
        ["n2", "n3", "n4"],
        {ANTI_AFFINITY_REASON: ["n1"]},
    ),
    Case(
        "zone anti-affinity: not in the zone; a node without the key is fine",
        labelled_pod("in", WEB, affinity=pod_affinity(anti=[pod_term(ZONE, WEB)])),
        [labelled_pod("web", WEB, node="n1")],
        ["n3", "n4"],
    ),
    Case(
        "anti-affinity with a NotIn expression",
        labelled_pod(
            "in",
            affinity=pod_affinity(
                anti=[
                    pod_term(
                        HOST, expressions=[{"key": "app", "operator": "NotIn", "values": ["web"]}]
                    )
                ]
            ),
        ),
        [labelled_pod("web", WEB, node="n1"), labelled_pod("db", DB, node="n2")],
        ["n1", "n3", "n4"],
    ),
    Case(
        "a term without labelSelector matches no pod",
        labelled_pod("in", affinity=pod_affinity(anti=[pod_term(HOST, selector=False)])),
        [labelled_pod("web", WEB, node="n1")],
        ["n1", "n2", "n3", "n4"],
    ),
    Case(
        "symmetric: an existing pod's anti-affinity keeps a matching newcomer off its zone",
        labelled_pod("in", WEB),
        [labelled_pod("loner", DB, node="n1", affinity=pod_affinity(anti=[pod_term(ZONE, WEB)]))],
        ["n3", "n4"],
        {EXISTING_ANTI_AFFINITY_REASON: ["n1", "n2"]},
    ),
    Case(
        "symmetric: a newcomer the existing term does not match goes anywhere",
        labelled_pod("in", DB),
        [labelled_pod("loner", DB, node="n1", affinity=pod_affinity(anti=[pod_term(ZONE, WEB)]))],
        ["n1", "n2", "n3", "n4"],
    ),
    Case(
        "symmetric: the existing term's namespace is its own pod's",
        labelled_pod("in", WEB, namespace="other"),
        [labelled_pod("loner", DB, node="n1", affinity=pod_affinity(anti=[pod_term(HOST, WEB)]))],
        ["n1", "n2", "n3", "n4"],
    ),
    Case(
        "each node is described by the first failing rule",
        labelled_pod(
            "in",
            WEB,
            affinity=pod_affinity(required=[pod_term(ZONE, DB)], anti=[pod_term(HOST, WEB)]),
        ),
        [
            labelled_pod("db", DB, node="n1"),
            labelled_pod("web", WEB, node="n1"),
            labelled_pod("loner", DB, node="n2", affinity=pod_affinity(anti=[pod_term(ZONE, WEB)])),
        ],
        [],
        {
            AFFINITY_REASON: ["n3", "n4"],
            ANTI_AFFINITY_REASON: ["n1"],
            EXISTING_ANTI_AFFINITY_REASON: ["n2"],
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_filter(case: Case) -> None:
    cache = cluster(*zone_nodes(), pods=case.existing)
    cache.namespace_labels.update(case.namespace_labels)
    pod = parse_pod(case.incoming)
    assert pod.errors == ()
    assert feasible(cache, pod) == case.feasible
    if case.reasons:
        assert run_filter(cache, pod) == case.reasons


def test_anti_affinity_ignores_the_pods_own_reservation() -> None:
    cache = cluster(*zone_nodes())
    pod = parse_pod(labelled_pod("in", WEB, affinity=pod_affinity(anti=[pod_term(HOST, WEB)])))
    cache.reserve(pod, "n1", (), now=0.0)
    assert feasible(cache, pod) == ["n1", "n2", "n3", "n4"]


def test_index_follows_pods_in_and_out() -> None:
    loner = labelled_pod("loner", DB, node="n1", affinity=pod_affinity(anti=[pod_term(ZONE, WEB)]))
    cache = cluster(*zone_nodes(), pods=[loner, labelled_pod("plain", WEB, node="n2")])
    assert cache.with_required_anti_affinity == {"default/loner"}
    assert cache.with_pod_affinity == {"default/loner"}
    newcomer = parse_pod(labelled_pod("in", WEB))
    with cache.without(["default/loner"]):
        assert cache.with_required_anti_affinity == set()
        assert feasible(cache, newcomer) == ["n1", "n2", "n3", "n4"]
    assert feasible(cache, newcomer) == ["n3", "n4"]
    cache.remove_pod("default/loner")
    assert cache.with_required_anti_affinity == set()
    assert feasible(cache, newcomer) == ["n1", "n2", "n3", "n4"]


def test_pod_without_terms_pays_nothing_when_no_pod_has_required_anti_affinity() -> None:
    cache = cluster(*zone_nodes(), pods=[labelled_pod("web", WEB, node="n1")])
    cache.pods = _Exploding(cache.pods)  # type: ignore[assignment]
    pod = parse_pod(labelled_pod("in", WEB))
    plugin = InterPodAffinity()
    snapshot = Snapshot(cache)
    assert plugin.filter(pod, snapshot, CycleState()) == []
    assert plugin.score(pod, snapshot, CycleState(), snapshot.valid.copy()) is None


class _Exploding(dict[str, Any]):
    """A pod table that fails the test when anything looks into it."""

    def _fail(self, *args: object, **kwargs: object) -> Any:
        raise AssertionError("the pod table was read")

    __iter__ = _fail
    __getitem__ = _fail
    get = _fail
    values = _fail
    items = _fail
    keys = _fail


# -- score ---------------------------------------------------------------------------------------


def scores(cache: ClusterCache, pod: PodInfo) -> dict[str, float] | None:
    snapshot = Snapshot(cache)
    points = InterPodAffinity().score(pod, snapshot, CycleState(), snapshot.valid.copy())
    if points is None:
        return None
    return {name: round(float(points[row]), 3) for row, name in enumerate(snapshot.names)}


def test_preferred_weights_sum_per_domain_and_scale_to_100() -> None:
    incoming = labelled_pod(
        "in",
        affinity=pod_affinity(
            preferred=[(10, pod_term(ZONE, DB)), (30, pod_term(HOST, {"tier": "gold"}))],
            anti_preferred=[(20, pod_term(HOST, WEB))],
        ),
    )
    existing = [
        labelled_pod("db", DB, node="n1"),
        labelled_pod("gold", {"tier": "gold"}, node="n2"),
        labelled_pod("web", WEB, node="n3"),
    ]
    cache = cluster(*zone_nodes(), pods=existing)
    # raw: n1 10 (zone a), n2 10 + 30, n3 -20, n4 0 -> (raw + 20) / 60 * 100
    assert scores(cache, parse_pod(incoming)) == {
        "n1": 50.0,
        "n2": 100.0,
        "n3": 0.0,
        "n4": 33.333,
    }


def test_existing_pods_terms_toward_the_incoming_pod_count() -> None:
    existing = [
        labelled_pod(
            "friend", DB, node="n1", affinity=pod_affinity(preferred=[(50, pod_term(ZONE, WEB))])
        ),
        labelled_pod(
            "leader", DB, node="n3", affinity=pod_affinity(required=[pod_term(HOST, WEB)])
        ),
        labelled_pod(
            "foe", DB, node="n4", affinity=pod_affinity(anti_preferred=[(40, pod_term(HOST, WEB))])
        ),
    ]
    cache = cluster(*zone_nodes(), pods=existing)
    # raw: n1 50, n2 50 (zone a), n3 1 (hard affinity weight), n4 -40
    result = scores(cache, parse_pod(labelled_pod("in", WEB)))
    assert result == {"n1": 100.0, "n2": 100.0, "n3": round(41 / 90 * 100, 3), "n4": 0.0}
    assert scores(cache, parse_pod(labelled_pod("in", DB))) is None


def test_equal_scores_give_zero() -> None:
    incoming = labelled_pod("in", affinity=pod_affinity(preferred=[(10, pod_term(HOST, DB))]))
    cache = cluster(*zone_nodes())
    assert scores(cache, parse_pod(incoming)) is None


# -- parsing -------------------------------------------------------------------------------------

ANTI = "spec.affinity.podAntiAffinity"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("affinity", "field"),
    [
        (pod_affinity(anti=[pod_term("", WEB)]), f"{ANTI}.{REQ}[0].topologyKey"),
        (
            pod_affinity(
                anti=[pod_term(expressions=[{"key": "a", "operator": "Gt", "values": ["1"]}])]
            ),
            f"{ANTI}.{REQ}[0].labelSelector.matchExpressions[0].operator",
        ),
        (
            pod_affinity(required=[pod_term(expressions=[{"key": "a", "operator": "In"}])]),
            f"spec.affinity.podAffinity.{REQ}[0].labelSelector.matchExpressions[0].values",
        ),
        (
            pod_affinity(
                required=[
                    pod_term(
                        namespace_selector={"matchExpressions": [{"key": "t", "operator": "Bad"}]}
                    )
                ]
            ),
            f"spec.affinity.podAffinity.{REQ}[0].namespaceSelector.matchExpressions[0].operator",
        ),
        (pod_affinity(anti_preferred=[(0, pod_term())]), f"{ANTI}.{PREF}[0].weight"),
        ({"podAntiAffinity": {REQ: "x"}}, f"{ANTI}.{REQ}"),
    ],
)
def test_invalid_terms_name_the_field(affinity: Json, field: str) -> None:
    pod = parse_pod(labelled_pod("bad", affinity=affinity))
    assert [error.field for error in pod.errors] == [field]


def test_bad_operator_message_is_bounded() -> None:
    operator = "X" * 5000
    affinity = pod_affinity(anti=[pod_term(expressions=[{"key": "a", "operator": operator}])])
    pod = parse_pod(labelled_pod("bad", affinity=affinity))
    assert len(pod.errors) == 1
    assert len(pod.errors[0].message) < 200


def test_pod_without_pod_affinity_has_none() -> None:
    raw = labelled_pod("plain", WEB)
    raw["spec"]["affinity"] = {"nodeAffinity": {}}
    assert parse_pod(raw).pod_affinity is None
    assert parse_pod(labelled_pod("plain", WEB)).pod_affinity is None


def test_match_label_keys_add_the_pods_own_values() -> None:
    term = pod_term(HOST, WEB, matchLabelKeys=["version"], mismatchLabelKeys=["track"])
    raw = labelled_pod(
        "in", {"app": "web", "version": "v2", "track": "canary"}, affinity=pod_affinity(anti=[term])
    )
    pod = parse_pod(raw)
    assert pod.pod_affinity is not None
    (parsed,) = pod.pod_affinity.required_anti_affinity
    labels: dict[str, dict[str, str]] = {}
    assert parsed.matches("default", {"app": "web", "version": "v2", "track": "stable"}, labels)
    assert not parsed.matches("default", {"app": "web", "version": "v1", "track": "stable"}, labels)
    assert not parsed.matches("default", {"app": "web", "version": "v2", "track": "canary"}, labels)


def test_default_namespace_is_the_pods_own() -> None:
    pod = parse_pod(
        labelled_pod("in", namespace="team", affinity=pod_affinity(anti=[pod_term(HOST, WEB)]))
    )
    assert pod.pod_affinity is not None
    (parsed,) = pod.pod_affinity.required_anti_affinity
    assert parsed.namespaces == frozenset({"team"})
    assert parsed.namespace_selector is None


# -- namespace labels ----------------------------------------------------------------------------


class _Queue:
    def __init__(self) -> None:
        self.events: list[str] = []

    def move_all_to_active_or_backoff(self, event: str) -> int:
        self.events.append(event)
        return 0


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Json:
    metadata: Json = {"name": name}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def test_namespace_labels_follow_the_informer_and_steer_the_selector() -> None:
    cache = cluster(*zone_nodes(), pods=[labelled_pod("db", DB, node="n3", namespace="team-x")])
    queue = _Queue()
    store = NamespaceLabels(cache, queue)
    term = pod_term(ZONE, DB, namespace_selector={"matchLabels": {"team": "x"}})
    pod = parse_pod(labelled_pod("in", affinity=pod_affinity(required=[term])))
    store.on_add(namespace("team-x", {"team": "y"}))
    assert feasible(cache, pod) == []
    store.on_update(namespace("team-x", {"team": "y"}), namespace("team-x", {"team": "x"}))
    assert cache.namespace_labels == {"team-x": {"team": "x"}}
    assert feasible(cache, pod) == ["n3"]
    store.on_update(namespace("team-x", {"team": "x"}), namespace("team-x", {"team": "x"}))
    store.on_delete(namespace("team-x", {"team": "x"}))
    assert cache.namespace_labels == {}
    assert queue.events == [NAMESPACE_EVENT] * 3
    store.on_add({"metadata": "not an object"})
    assert cache.namespace_labels == {}


# -- through the daemon's profile ----------------------------------------------------------------


def test_profile_reports_the_first_failing_rule_per_node() -> None:
    cache = cluster(
        *zone_nodes(),
        pods=[
            labelled_pod("web", WEB, node="n1"),
            labelled_pod("loner", DB, node="n3", affinity=pod_affinity(anti=[pod_term(ZONE, WEB)])),
        ],
    )
    pod = parse_pod(labelled_pod("in", WEB, affinity=pod_affinity(anti=[pod_term(ZONE, WEB)])))
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    evaluation = framework.evaluate(pod, snapshot)
    assert [snapshot.names[r] for r in np.flatnonzero(evaluation.diagnosis.feasible)] == ["n4"]
    assert evaluation.diagnosis.message(snapshot.valid) == (
        "0/4 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "2 node(s) didn't match pod anti-affinity rules."
    )
    assert snapshot.names[evaluation.chosen] == "n4"


def test_profile_follows_preferred_anti_affinity() -> None:
    cache = cluster(*zone_nodes(), pods=[labelled_pod("web", WEB, node="n1")])
    pod = parse_pod(
        labelled_pod("in", WEB, affinity=pod_affinity(anti_preferred=[(100, pod_term(ZONE, WEB))]))
    )
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    for _ in range(5):
        evaluation = framework.evaluate(pod, snapshot)
        assert evaluation.scores["InterPodAffinity"].tolist() == [0.0, 0.0, 100.0, 100.0]
        assert snapshot.names[evaluation.chosen] in ("n3", "n4")


# -- waking pods that wait for an affinity partner ---------------------------------------------


async def test_a_pod_bound_by_anyone_wakes_pods_waiting_for_affinity() -> None:
    h = harness(cluster(*zone_nodes()))
    handler = PodHandler(h.context, h.queue)
    follower = labelled_pod("follower", affinity=pod_affinity(required=[pod_term(ZONE, DB)]))
    handler.on_add(follower)
    handler.on_add(make_pod("plain", gpus=16))  # unschedulable for want of GPUs, no affinity
    for _ in range(2):
        await h.cycle()
    assert h.queue.where("default/follower") == UNSCHEDULABLE
    assert h.queue.where("default/plain") == UNSCHEDULABLE
    handler.on_add(labelled_pod("web", WEB, node="n2"))  # any arrival may be the partner
    assert h.queue.where("default/follower") != UNSCHEDULABLE
    h.after_backoff(1)
    await h.cycle()
    await h.cycle()
    assert h.queue.where("default/follower") == UNSCHEDULABLE  # web is not db
    db = labelled_pod("db", DB, node="n3")
    db["spec"]["schedulerName"] = "default-scheduler"
    handler.on_add(db)
    h.after_backoff(2)
    assert await h.cycle() == "default/follower"
    assert h.cache.pods["default/follower"].node == "n3"


async def test_without_waiting_pods_an_arrival_moves_nothing() -> None:
    h = harness(cluster(*zone_nodes()))
    handler = PodHandler(h.context, h.queue)
    handler.on_add(make_pod("plain", gpus=16))
    await h.cycle()
    handler.on_add(labelled_pod("web", WEB, node="n2"))
    assert h.queue.where("default/plain") == UNSCHEDULABLE
    assert handler.affinity_waiters == set()


async def test_our_own_pod_confirmed_bound_wakes_pods_waiting_for_it() -> None:
    h = harness(cluster(*zone_nodes()))
    handler = PodHandler(h.context, h.queue)
    handler.on_add(labelled_pod("follower", affinity=pod_affinity(required=[pod_term(ZONE, DB)])))
    await h.cycle()
    assert h.queue.where("default/follower") == UNSCHEDULABLE
    db = labelled_pod("db", DB)
    db["spec"]["nodeSelector"] = {ZONE: "b"}
    handler.on_add(db)
    assert await h.cycle() == "default/db"
    assert h.cache.is_assumed("default/db")
    db["spec"]["nodeName"] = h.cache.pods["default/db"].node
    handler.on_update(labelled_pod("db", DB), db)  # the informer shows the binding
    assert h.queue.where("default/follower") != UNSCHEDULABLE
    h.after_backoff(1)
    assert await h.cycle() == "default/follower"
    assert h.cache.pods["default/follower"].node == "n3"
