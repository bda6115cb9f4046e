"""PodTopologySpread: filter verdicts and scores against hand-computed skews, and parsing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_pod
from scheduler.model.spread import HONOR, IGNORE, PodSelector, SpreadConstraint
from scheduler.plugins.topology_spread import (
    REASON_MISSING,
    REASON_SKEW,
    PodTopologySpread,
)
from tests.unit.scheduler.builders import (
    Json,
    make_node,
    make_pod,
    rejected,
    snapshot_of,
    taint,
    toleration,
)

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
WEB = {"app": "web"}


def constraint(
    key: str = ZONE,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    selector: Json | None = None,
    **extra: Any,
) -> Json:
    raw: Json = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    raw["labelSelector"] = {"matchLabels": dict(WEB)} if selector is None else selector
    raw.update(extra)
    return raw


def spread_pod(
    name: str,
    *,
    labels: Mapping[str, str] = WEB,
    constraints: Sequence[Json] = (),
    node: str | None = None,
    namespace: str = "default",
    terminating: bool = False,
    **kwargs: Any,
) -> Json:
    pod = make_pod(name, node=node, namespace=namespace, gpus=0, **kwargs)
    pod["metadata"]["labels"] = dict(labels)
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
    if constraints:
        pod["spec"]["topologySpreadConstraints"] = list(constraints)
    return pod


def placed(node: str, count: int, **kwargs: Any) -> list[Json]:
    """`count` bound pods on `node`."""
    return [spread_pod(f"{node}-p{i}-{id(kwargs)}", node=node, **kwargs) for i in range(count)]


def zone_nodes(**per_node: Mapping[str, Any]) -> list[Json]:
    """a1, a2 in zone a; b1 in zone b; c1 in zone c (extra node kwargs per name)."""
    zones = {"a1": "a", "a2": "a", "b1": "b", "c1": "c"}
    nodes = []
    for name, zone in zones.items():
        extra = dict(per_node.get(name, {}))
        labels = {ZONE: zone, RACK: f"r-{name}", **extra.pop("labels", {})}
        nodes.append(make_node(name, gpus=0, labels=labels, **extra))
    return nodes


@dataclass
class Case:
    constraints: list[Json]
    pods: list[Json]
    expected: dict[str, set[str]]
    nodes: list[Json] = field(default_factory=zone_nodes)
    labels: Mapping[str, str] = field(default_factory=lambda: dict(WEB))
    pod_kwargs: dict[str, Any] = field(default_factory=dict)


# Counts a=2 (on a1), b=1, c=0 unless said otherwise; the incoming pod carries app=web.
BASE_PODS = placed("a1", 2) + placed("b1", 1)
GOLD = {"labels": {"tier": "gold"}}
TIERED = zone_nodes(a1=GOLD, a2=GOLD, b1=GOLD, c1={"labels": {"tier": "silver"}})

CASES = {
    # skew = count + 1 - min(0): a 3, b 2, c 1 -> only c passes maxSkew 1.
    "zones": Case([constraint()], BASE_PODS, {REASON_SKEW: {"a1", "a2", "b1"}}),
    # maxSkew 2: a 3 > 2 fails; b 2 passes.
    "zones_max_skew_2": Case([constraint(max_skew=2)], BASE_PODS, {REASON_SKEW: {"a1", "a2"}}),
    # Racks are one node each: r-a1 2, r-b1 1, others 0 -> r-a1 3, r-b1 2 fail maxSkew 1.
    "racks": Case([constraint(RACK)], BASE_PODS, {REASON_SKEW: {"a1", "b1"}}),
    # Hostname behaves as racks here.
    "hostnames": Case([constraint(HOST)], BASE_PODS, {REASON_SKEW: {"a1", "b1"}}),
    # Pods of another namespace and terminating pods are not counted: c stays 0.
    "namespace_and_terminating": Case(
        [constraint()],
        BASE_PODS + placed("c1", 3, namespace="other") + placed("c1", 2, terminating=True),
        {REASON_SKEW: {"a1", "a2", "b1"}},
    ),
    # Without the new pod matching its own selector: a 2 - 0 > 1 fails, b 1 passes.
    "no_self_match": Case(
        [constraint()], BASE_PODS, {REASON_SKEW: {"a1", "a2"}}, labels={"app": "db"}
    ),
    # Counts a=1, b=1 (no node in c): min 1, skew 1 everywhere.
    "two_domains": Case(
        [constraint()], placed("a1", 1) + placed("b1", 1), {}, nodes=zone_nodes()[:3]
    ),
    # minDomains 3 with 2 domains: the global minimum is 0, so skew 2 everywhere.
    "min_domains_unmet": Case(
        [constraint(minDomains=3)],
        placed("a1", 1) + placed("b1", 1),
        {REASON_SKEW: {"a1", "a2", "b1"}},
        nodes=zone_nodes()[:3],
    ),
    # minDomains 2 with 2 domains: met, min 1.
    "min_domains_met": Case(
        [constraint(minDomains=2)], placed("a1", 1) + placed("b1", 1), {}, nodes=zone_nodes()[:3]
    ),
    # A node without the key fails with its own reason.
    "missing_label": Case(
        [constraint()],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2", "b1"}, REASON_MISSING: {"x1"}},
        nodes=[*zone_nodes(), make_node("x1", gpus=0)],
    ),
    # nodeAffinityPolicy Honor (default): c1 (tier silver) is out; min over a=2, b=1 is 1.
    "affinity_honor": Case(
        [constraint()],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2"}},
        nodes=TIERED,
        pod_kwargs={"node_selector": {"tier": "gold"}},
    ),
    # nodeAffinityPolicy Ignore: c counts, min 0.
    "affinity_ignore": Case(
        [constraint(nodeAffinityPolicy=IGNORE)],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2", "b1"}},
        nodes=TIERED,
        pod_kwargs={"node_selector": {"tier": "gold"}},
    ),
    # nodeTaintsPolicy Ignore (default): tainted c1 counts, min 0.
    "taints_ignore": Case(
        [constraint()],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2", "b1"}},
        nodes=zone_nodes(c1={"taints": [taint("dedicated", "x")]}),
    ),
    # nodeTaintsPolicy Honor: c1's taint is not tolerated, min over a, b is 1.
    "taints_honor": Case(
        [constraint(nodeTaintsPolicy=HONOR)],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2"}},
        nodes=zone_nodes(c1={"taints": [taint("dedicated", "x")]}),
    ),
    # ... unless tolerated.
    "taints_honor_tolerated": Case(
        [constraint(nodeTaintsPolicy=HONOR)],
        BASE_PODS,
        {REASON_SKEW: {"a1", "a2", "b1"}},
        nodes=zone_nodes(c1={"taints": [taint("dedicated", "x")]}),
        pod_kwargs={"tolerations": [toleration("dedicated", "x", "NoSchedule")]},
    ),
    # matchLabelKeys: only version=v2 counts: a 0, b 1, c 0 -> b fails.
    "match_label_keys": Case(
        [constraint(matchLabelKeys=["version"])],
        placed("a1", 2, labels={"app": "web", "version": "v1"})
        + placed("b1", 1, labels={"app": "web", "version": "v2"}),
        {REASON_SKEW: {"b1"}},
        labels={"app": "web", "version": "v2"},
    ),
    # Zones a=1, b=1, c=1 (min 1, all pass); hosts a1 1, a2 0 (min 0): a1, b1, c1 fail.
    "zone_and_host": Case(
        [constraint(), constraint(HOST)],
        placed("a1", 1) + placed("b1", 1) + placed("c1", 1),
        {REASON_SKEW: {"a1", "b1", "c1"}},
    ),
    # A node is described by its first failing constraint: x1 lacks the zone (first).
    "first_constraint_names_the_node": Case(
        [constraint(), constraint(HOST)],
        placed("x1", 2),
        {REASON_MISSING: {"x1"}},
        nodes=[*zone_nodes(), make_node("x1", gpus=0)],
    ),
    # A key no node carries: every node lacks it.
    "key_on_no_node": Case(
        [constraint("example.com/nowhere")],
        BASE_PODS,
        {REASON_MISSING: {"a1", "a2", "b1", "c1"}},
    ),
    # An empty selector counts no pod (kube-scheduler's rule): skew 1 everywhere.
    "empty_selector": Case([constraint(selector={})], BASE_PODS, {}),
    # No labelSelector selects nothing, the pod itself included.
    "absent_selector": Case([{**constraint(), "labelSelector": None}], BASE_PODS, {}),
    # matchExpressions: app In (web, api) counts the api pod on c1 too: a 2, b 1, c 1, min 1.
    "match_expressions": Case(
        [
            constraint(
                selector={
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]
                }
            )
        ],
        BASE_PODS + placed("c1", 1, labels={"app": "api"}),
        {REASON_SKEW: {"a1", "a2"}},
    ),
    # ScheduleAnyway never filters.
    "soft_only": Case([constraint(when="ScheduleAnyway")], BASE_PODS, {}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_filter_against_hand_computed_skews(case: Case) -> None:
    snapshot = snapshot_of(*case.nodes, pods=case.pods)
    pod = parse_pod(
        spread_pod("new", labels=case.labels, constraints=case.constraints, **case.pod_kwargs)
    )
    assert pod.errors == ()
    assert rejected(PodTopologySpread(), pod, snapshot) == case.expected


def test_assumed_pods_count() -> None:
    snapshot = snapshot_of(*zone_nodes())
    first = parse_pod(spread_pod("first", constraints=[constraint()]))
    snapshot.cache.assume(first, "c1", ())
    pod = parse_pod(spread_pod("new", constraints=[constraint()]))
    # c=1 now, min 0: c fails, a and b pass.
    assert rejected(PodTopologySpread(), pod, snapshot) == {REASON_SKEW: {"c1"}}


def test_pod_without_constraints_costs_nothing() -> None:
    snapshot = snapshot_of(*zone_nodes(), pods=BASE_PODS)
    pod = parse_pod(spread_pod("plain"))
    plugin = PodTopologySpread()
    state = CycleState()
    assert plugin.filter(pod, snapshot, state) == []
    assert plugin.score(pod, snapshot, state, snapshot.valid.copy()) is None
    assert state.data == {}


def test_failed_scheduling_message_names_the_constraint() -> None:
    snapshot = snapshot_of(*zone_nodes()[:3], pods=placed("a1", 1) + placed("b1", 1))
    pod = parse_pod(spread_pod("new", constraints=[constraint(minDomains=3)]))
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, snapshot)
    assert evaluation.chosen == -1
    message = evaluation.diagnosis.message(snapshot.valid)
    assert message == f"0/3 nodes are available: 3 {REASON_SKEW}."


def test_framework_places_the_pod_in_the_emptiest_zone() -> None:
    snapshot = snapshot_of(*zone_nodes(), pods=BASE_PODS)
    pod = parse_pod(spread_pod("new", constraints=[constraint()]))
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, snapshot)
    assert snapshot.names[evaluation.chosen] == "c1"


# -- score -------------------------------------------------------------------------------------


def scores(snapshot: Snapshot, pod_json: Json) -> dict[str, float]:
    pod = parse_pod(pod_json)
    points = PodTopologySpread().score(pod, snapshot, CycleState(), snapshot.valid.copy())
    assert points is not None
    return {snapshot.names[r]: float(points[r]) for r in range(snapshot.rows)}


def test_score_zones_fewer_matching_pods_score_higher() -> None:
    # Zones a (2 pods) and b (0); x1 lacks the zone and is ignored (0 points).
    # raw: a = round(2 * log(2 + 2)) = 3, b = 0; normalized 100 * (3 + 0 - s) // 3.
    nodes = [*zone_nodes()[:3], make_node("x1", gpus=0)]
    snapshot = snapshot_of(*nodes, pods=placed("a1", 2))
    got = scores(snapshot, spread_pod("new", constraints=[constraint(when="ScheduleAnyway")]))
    assert round(2 * math.log(4)) == 3
    assert got == {"a1": 0.0, "a2": 0.0, "b1": 100.0, "x1": 0.0}


def test_score_hostname_uses_node_counts_and_max_skew() -> None:
    # Hosts n1 3 pods, n2 1, n3 0, maxSkew 2: raw = count * log(3 + 2) + 1
    # -> round(5.83) 6, round(2.61) 3, 1; normalized 100 * (6 + 1 - s) // 6 -> 16, 66, 100.
    nodes = [make_node(f"n{i}", gpus=0) for i in (1, 2, 3)]
    snapshot = snapshot_of(*nodes, pods=placed("n1", 3) + placed("n2", 1))
    got = scores(snapshot, spread_pod("new", constraints=[constraint(HOST, 2, "ScheduleAnyway")]))
    assert got == {"n1": 16.0, "n2": 66.0, "n3": 100.0}


def test_score_with_a_key_no_node_carries_gives_no_points() -> None:
    snapshot = snapshot_of(*zone_nodes(), pods=BASE_PODS)
    soft = constraint("example.com/nowhere", when="ScheduleAnyway")
    got = scores(snapshot, spread_pod("new", constraints=[soft]))
    assert got == {"a1": 0.0, "a2": 0.0, "b1": 0.0, "c1": 0.0}


def test_score_all_equal_gives_everyone_full_points() -> None:
    snapshot = snapshot_of(*zone_nodes())
    got = scores(snapshot, spread_pod("new", constraints=[constraint(when="ScheduleAnyway")]))
    assert got == {"a1": 100.0, "a2": 100.0, "b1": 100.0, "c1": 100.0}


def test_score_counts_only_feasible_domains_for_the_weight() -> None:
    # Only a1 and b1 are feasible: 2 domains (weight log 4) although c exists.
    snapshot = snapshot_of(*zone_nodes(), pods=placed("a1", 1) + placed("c1", 5))
    pod = parse_pod(spread_pod("new", constraints=[constraint(when="ScheduleAnyway")]))
    feasible = np.array([name in ("a1", "b1") for name in snapshot.names])
    points = PodTopologySpread().score(pod, snapshot, CycleState(), feasible)
    assert points is not None
    # raw a = round(1 * log 4) = 1, b = 0: a 100 * (1 + 0 - 1) // 1 = 0, b 100.
    assert points[snapshot.cache.row_of["a1"]] == 0.0
    assert points[snapshot.cache.row_of["b1"]] == 100.0


# -- parsing -----------------------------------------------------------------------------------


def test_parse_defaults_and_match_label_keys() -> None:
    pod = parse_pod(
        spread_pod(
            "p",
            labels={"app": "web", "version": "v2"},
            constraints=[constraint(matchLabelKeys=["version", "absent"])],
        )
    )
    assert pod.errors == ()
    (parsed,) = pod.spread_constraints
    assert parsed == SpreadConstraint(
        max_skew=1,
        topology_key=ZONE,
        when_unsatisfiable="DoNotSchedule",
        selector=parsed.selector,
        min_domains=1,
        node_affinity_policy=HONOR,
        node_taints_policy=IGNORE,
    )
    assert parsed.selector.matches({"app": "web", "version": "v2"})
    assert not parsed.selector.matches({"app": "web", "version": "v1"})
    assert PodSelector(nothing=True).matches({}) is False


BAD = "spec.topologySpreadConstraints"


@pytest.mark.parametrize(
    ("raw", "field_", "words"),
    [
        (constraint(max_skew=0), f"{BAD}[0].maxSkew", "must be > 0, got 0"),
        ({**constraint(), "maxSkew": "1"}, f"{BAD}[0].maxSkew", "must be > 0"),
        ({**constraint(), "maxSkew": True}, f"{BAD}[0].maxSkew", "must be > 0"),
        ({**constraint(), "topologyKey": ""}, f"{BAD}[0].topologyKey", "label key"),
        (constraint(when="Sometimes"), f"{BAD}[0].whenUnsatisfiable", "'Sometimes'"),
        (constraint(minDomains=0), f"{BAD}[0].minDomains", "must be > 0"),
        (
            constraint(when="ScheduleAnyway", minDomains=2),
            f"{BAD}[0].minDomains",
            "only be set with DoNotSchedule",
        ),
        (constraint(nodeAffinityPolicy="Always"), f"{BAD}[0].nodeAffinityPolicy", "Honor"),
        (constraint(nodeTaintsPolicy="x" * 500), f"{BAD}[0].nodeTaintsPolicy", "..."),
        (
            constraint(selector={"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
            f"{BAD}[0].labelSelector.matchExpressions[0].operator",
            "unknown operator",
        ),
        (
            constraint(selector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
            f"{BAD}[0].labelSelector.matchExpressions[0].values",
            "needs values",
        ),
        (constraint(selector=[]), f"{BAD}[0].labelSelector", "must be an object"),
        (constraint(matchLabelKeys="app"), f"{BAD}[0].matchLabelKeys", "list of label keys"),
        (
            {**constraint(matchLabelKeys=["app"]), "labelSelector": None},
            f"{BAD}[0].matchLabelKeys",
            "needs a labelSelector",
        ),
        ("zone", f"{BAD}[0]", "must be an object"),
    ],
)
def test_parse_rejects_invalid_constraints(raw: Any, field_: str, words: str) -> None:
    pod = parse_pod(spread_pod("p", constraints=[raw]))
    assert pod.spread_constraints == ()
    assert [e.field for e in pod.errors] == [field_]
    assert words in pod.errors[0].message
    assert len(pod.errors[0].message) < 200


def test_parse_rejects_a_duplicate_key_and_a_non_list() -> None:
    pod = parse_pod(spread_pod("p", constraints=[constraint(), constraint(max_skew=2)]))
    assert [e.field for e in pod.errors] == [f"{BAD}[1].topologyKey"]
    assert len(pod.spread_constraints) == 1
    raw = spread_pod("q")
    raw["spec"]["topologySpreadConstraints"] = {"maxSkew": 1}
    assert [e.field for e in parse_pod(raw).errors] == [BAD]
