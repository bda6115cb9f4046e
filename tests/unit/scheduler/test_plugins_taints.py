"""TaintToleration and NodeUnschedulable filters."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.fields import Taint, Toleration
from scheduler.plugins.taints import (
    NodeUnschedulable,
    TaintToleration,
    first_untolerated,
    tolerates,
)
from tests.unit.scheduler.builders import (
    cluster,
    make_node,
    pod_info,
    rejected,
    snapshot_of,
    taint,
    toleration,
)

DEDICATED = Taint("dedicated", "infra", "NoSchedule")


@pytest.mark.parametrize(
    ("tol", "taint_", "expected"),
    [
        pytest.param(
            Toleration("dedicated", "Equal", "infra", "NoSchedule"), DEDICATED, True, id="equal"
        ),
        pytest.param(
            Toleration("dedicated", "Equal", "other", "NoSchedule"),
            DEDICATED,
            False,
            id="equal-other-value",
        ),
        pytest.param(
            Toleration("dedicated", "", "infra", ""), DEDICATED, True, id="empty-operator-is-equal"
        ),
        pytest.param(
            Toleration("dedicated", "Exists", "", ""), DEDICATED, True, id="exists-any-value"
        ),
        pytest.param(
            Toleration("other", "Exists", "", ""), DEDICATED, False, id="exists-other-key"
        ),
        pytest.param(Toleration("", "Exists", "", ""), DEDICATED, True, id="empty-key-exists-all"),
        pytest.param(
            Toleration("", "Exists", "", "NoExecute"), DEDICATED, False, id="empty-key-other-effect"
        ),
        pytest.param(
            Toleration("dedicated", "Equal", "infra", "NoExecute"),
            DEDICATED,
            False,
            id="effect-mismatch",
        ),
        pytest.param(
            Toleration("dedicated", "Equal", "infra", ""), DEDICATED, True, id="empty-effect-all"
        ),
        pytest.param(
            Toleration("dedicated", "Lt", "infra", ""), DEDICATED, False, id="unknown-operator"
        ),
        pytest.param(
            Toleration("gpu", "Equal", "", ""),
            Taint("gpu", "", "NoSchedule"),
            True,
            id="empty-values",
        ),
    ],
)
def test_tolerates(tol: Toleration, taint_: Taint, expected: bool) -> None:
    assert tolerates(tol, taint_) is expected


def test_first_untolerated_skips_prefer_no_schedule_and_tolerated() -> None:
    taints = (
        Taint("soft", "", "PreferNoSchedule"),
        Taint("a", "1", "NoSchedule"),
        Taint("b", "2", "NoExecute"),
    )
    assert first_untolerated(taints, ()) == taints[1]
    assert first_untolerated(taints, (Toleration("a", "Exists", "", ""),)) == taints[2]
    assert first_untolerated(taints, (Toleration("", "Exists", "", ""),)) is None


NODES = (
    make_node("plain"),
    make_node("infra", taints=[taint("dedicated", "infra")]),
    make_node("evict", taints=[taint("gpu", "bad", "NoExecute")]),
    make_node("soft", taints=[taint("spot", "yes", "PreferNoSchedule")]),
    make_node("infra2", taints=[taint("dedicated", "infra")]),
    make_node(
        "two",
        taints=[
            taint("spot", "yes", "PreferNoSchedule"),
            taint("x", "y"),
            taint("dedicated", "infra"),
        ],
    ),
)


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param(
            [],
            {
                "node(s) had untolerated taint {dedicated: infra}": {"infra", "infra2"},
                "node(s) had untolerated taint {gpu: bad}": {"evict"},
                "node(s) had untolerated taint {x: y}": {"two"},
            },
            id="none",
        ),
        pytest.param(
            [toleration("dedicated", "infra", "NoSchedule"), toleration("x", operator="Exists")],
            {"node(s) had untolerated taint {gpu: bad}": {"evict"}},
            id="some",
        ),
        pytest.param([toleration(operator="Exists")], {}, id="all"),
        pytest.param(
            [toleration(operator="Exists", effect="NoExecute")],
            {
                "node(s) had untolerated taint {dedicated: infra}": {"infra", "infra2"},
                "node(s) had untolerated taint {x: y}": {"two"},
            },
            id="all-no-execute",
        ),
    ],
)
def test_taint_toleration_filter(
    tolerations: list[dict[str, Any]], expected: dict[str, set[str]]
) -> None:
    pod = pod_info(tolerations=tolerations)
    assert rejected(TaintToleration(), pod, snapshot_of(*NODES)) == expected


def test_taint_rejections_are_unresolvable() -> None:
    rejections = TaintToleration().filter(pod_info(), snapshot_of(*NODES), CycleState())
    assert rejections
    assert not any(r.resolvable for r in rejections)
    assert {r.plugin for r in rejections} == {"TaintToleration"}


def test_taint_group_of_deleted_node_is_not_reported() -> None:
    cache = cluster(make_node("gone", taints=[taint("k", "v")]), make_node("here"))
    cache.remove_node("gone")
    assert rejected(TaintToleration(), pod_info(), Snapshot(cache)) == {}


def test_node_unschedulable() -> None:
    snapshot = snapshot_of(make_node("cordoned", unschedulable=True), make_node("open"))
    assert rejected(NodeUnschedulable(), pod_info(), snapshot) == {
        "node(s) were unschedulable": {"cordoned"}
    }
    rejections = NodeUnschedulable().filter(pod_info(), snapshot, CycleState())
    assert [r.resolvable for r in rejections] == [False]


@pytest.mark.parametrize(
    "tol",
    [
        toleration("node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", operator="Exists"),
        toleration(operator="Exists"),
    ],
)
def test_node_unschedulable_tolerated(tol: dict[str, Any]) -> None:
    snapshot = snapshot_of(make_node("cordoned", unschedulable=True))
    assert rejected(NodeUnschedulable(), pod_info(tolerations=[tol]), snapshot) == {}


def test_node_unschedulable_not_tolerated_by_other_effect() -> None:
    tol = toleration("node.kubernetes.io/unschedulable", operator="Exists", effect="NoExecute")
    snapshot = snapshot_of(make_node("cordoned", unschedulable=True))
    assert rejected(NodeUnschedulable(), pod_info(tolerations=[tol]), snapshot) == {
        "node(s) were unschedulable": {"cordoned"}
    }


def test_no_cordoned_nodes_no_rejection() -> None:
    assert NodeUnschedulable().filter(pod_info(), snapshot_of(make_node("a")), CycleState()) == []
