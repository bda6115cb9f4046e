"""NodeAffinity: nodeSelector, required terms (filter) and preferred terms (score)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.plugins.node_affinity import REASON, NodeAffinity
from tests.unit.scheduler.builders import (
    cluster,
    expr,
    make_node,
    node_affinity,
    node_info,
    pod_info,
    rejected,
    snapshot_of,
    term,
)

NODES = (
    make_node("a100-r2", labels={"gpu": "a100", "rack": "2", "zone": "east"}),
    make_node("a100-r10", labels={"gpu": "a100", "rack": "10", "zone": "west"}),
    make_node("h100-r5", labels={"gpu": "h100", "rack": "5", "spot": "true"}),
    make_node("bare", labels={"rack": "x"}),
)
ALL = {"a100-r2", "a100-r10", "h100-r5", "bare"}


def matching(pod: Any) -> set[str]:
    return ALL - rejected(NodeAffinity(), pod, snapshot_of(*NODES)).get(REASON, set())


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"gpu": "a100"}, {"a100-r2", "a100-r10"}),
        ({"gpu": "a100", "zone": "west"}, {"a100-r10"}),
        ({"gpu": "v100"}, set()),
        ({"kubernetes.io/hostname": "bare"}, {"bare"}),
        ({}, ALL),
    ],
)
def test_node_selector(selector: dict[str, str], expected: set[str]) -> None:
    assert matching(pod_info(node_selector=selector)) == expected


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        pytest.param(
            expr("gpu", "In", "a100", "h100"), {"a100-r2", "a100-r10", "h100-r5"}, id="in"
        ),
        pytest.param(expr("gpu", "In", "v100"), set(), id="in-unknown-value"),
        pytest.param(
            expr("gpu", "NotIn", "a100"), {"h100-r5", "bare"}, id="not-in-includes-missing"
        ),
        pytest.param(expr("spot", "Exists"), {"h100-r5"}, id="exists"),
        pytest.param(
            expr("spot", "DoesNotExist"), {"a100-r2", "a100-r10", "bare"}, id="does-not-exist"
        ),
        pytest.param(expr("rack", "Gt", "4"), {"a100-r10", "h100-r5"}, id="gt-numeric-not-lexical"),
        pytest.param(expr("rack", "Lt", "5"), {"a100-r2"}, id="lt-strict"),
        pytest.param(
            expr("rack", "Gt", "-1"), {"a100-r2", "a100-r10", "h100-r5"}, id="gt-negative"
        ),
        pytest.param(expr("missing", "Lt", "100"), set(), id="lt-missing-label"),
        pytest.param(expr("gpu", "Gt", "0"), set(), id="gt-non-integer-label"),
    ],
)
def test_required_operators(requirement: dict[str, Any], expected: set[str]) -> None:
    pod = pod_info(affinity=node_affinity(required=[term(requirement)]))
    assert pod.errors == ()
    assert matching(pod) == expected


def test_requirements_of_a_term_are_anded() -> None:
    affinity = node_affinity(required=[term(expr("gpu", "In", "a100"), expr("rack", "Gt", "3"))])
    assert matching(pod_info(affinity=affinity)) == {"a100-r10"}


def test_terms_are_ored() -> None:
    affinity = node_affinity(
        required=[term(expr("gpu", "In", "h100")), term(expr("zone", "In", "east"))]
    )
    assert matching(pod_info(affinity=affinity)) == {"h100-r5", "a100-r2"}


def test_empty_term_matches_nothing() -> None:
    assert matching(pod_info(affinity=node_affinity(required=[term()]))) == set()
    either = node_affinity(required=[term(), term(expr("spot", "Exists"))])
    assert matching(pod_info(affinity=either)) == {"h100-r5"}


def test_empty_required_terms_do_not_filter() -> None:
    assert matching(pod_info(affinity=node_affinity(required=[]))) == ALL


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param(expr("metadata.name", "In", "bare", "h100-r5"), {"bare", "h100-r5"}, id="in"),
        pytest.param(expr("metadata.name", "NotIn", "bare"), ALL - {"bare"}, id="not-in"),
        pytest.param(expr("metadata.name", "Exists"), set(), id="unsupported-operator"),
        pytest.param(expr("metadata.uid", "In", "bare"), set(), id="unsupported-field"),
    ],
)
def test_match_fields(field: dict[str, Any], expected: set[str]) -> None:
    pod = pod_info(affinity=node_affinity(required=[term(fields=[field])]))
    assert matching(pod) == expected


def test_selector_and_required_terms_must_both_match() -> None:
    pod = pod_info(
        node_selector={"gpu": "a100"},
        affinity=node_affinity(required=[term(expr("zone", "In", "west", "nowhere"))]),
    )
    assert matching(pod) == {"a100-r10"}


def test_filter_rejection_is_unresolvable() -> None:
    pod = pod_info(node_selector={"gpu": "a100"})
    rejections = NodeAffinity().filter(pod, snapshot_of(*NODES), CycleState())
    assert [(r.reason, r.resolvable, r.plugin) for r in rejections] == [
        ("node(s) didn't match Pod's node affinity/selector", False, "NodeAffinity")
    ]


def test_no_constraints_no_rejection() -> None:
    assert NodeAffinity().filter(pod_info(), snapshot_of(*NODES), CycleState()) == []


def test_labels_seen_after_a_node_update() -> None:
    cache = cluster(*NODES)
    pod = pod_info(node_selector={"gpu": "v100"})
    assert rejected(NodeAffinity(), pod, Snapshot(cache)) == {REASON: ALL}
    cache.add_or_update_node(node_info("bare", labels={"gpu": "v100"}))
    assert rejected(NodeAffinity(), pod, Snapshot(cache)) == {REASON: ALL - {"bare"}}


# -- preferred score ------------------------------------------------------------------------------


def scores(pod: Any, feasible: list[bool] | None = None) -> dict[str, float]:
    snapshot = snapshot_of(*NODES)
    mask = np.ones(snapshot.rows, dtype=bool) if feasible is None else np.array(feasible)
    points = NodeAffinity().score(pod, snapshot, CycleState(), mask)
    assert points.shape == (snapshot.rows,)
    return {name: float(points[row]) for row, name in enumerate(snapshot.names)}


def test_preferred_scores_normalized_to_100_for_the_best() -> None:
    pod = pod_info(
        affinity=node_affinity(
            preferred=[
                (20, term(expr("gpu", "In", "a100"))),
                (60, term(expr("zone", "In", "east"))),
            ]
        )
    )
    assert scores(pod) == {"a100-r2": 100.0, "a100-r10": 25.0, "h100-r5": 0.0, "bare": 0.0}


def test_preferred_scores_normalized_over_feasible_nodes_only() -> None:
    pod = pod_info(
        affinity=node_affinity(
            preferred=[
                (20, term(expr("gpu", "In", "a100"))),
                (60, term(expr("zone", "In", "east"))),
            ]
        )
    )
    got = scores(pod, feasible=[False, True, True, True])
    assert got["a100-r10"] == 100.0
    assert got["h100-r5"] == 0.0


def test_preferred_empty_term_scores_nothing() -> None:
    pod = pod_info(affinity=node_affinity(preferred=[(50, term())]))
    assert set(scores(pod).values()) == {0.0}


def test_no_preference_abstains_and_no_match_scores_zero() -> None:
    snapshot = snapshot_of(*NODES)
    mask = np.ones(snapshot.rows, dtype=bool)
    assert NodeAffinity().score(pod_info(), snapshot, CycleState(), mask) is None
    pod = pod_info(affinity=node_affinity(preferred=[(10, term(expr("gpu", "In", "v100")))]))
    assert set(scores(pod).values()) == {0.0}
    assert set(scores(pod, feasible=[False] * 4).values()) == {0.0}


def test_preferred_terms_do_not_filter() -> None:
    pod = pod_info(affinity=node_affinity(preferred=[(10, term(expr("gpu", "In", "v100")))]))
    assert matching(pod) == ALL
