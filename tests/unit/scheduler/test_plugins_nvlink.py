"""NVLink: the one-domain filter for `nvlink-policy: required` pods and the domain score."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.plugins.nvlink import NVLink, one_domain_feasible
from tests.unit.scheduler.builders import (
    cluster,
    make_node,
    make_pod,
    pod_info,
    rejected,
    snapshot_of,
)
from topology.scoring import normalize, score_nodes


def used(node: str, indices: str) -> dict[str, Any]:
    return make_pod(
        f"on-{node}-{indices}", gpus=len(indices.split(",")), node=node, gpu_indices=indices
    )


# Free GPUs per domain: "whole" [4, 4]; "split" [3, 3]; "pairs" [2, 0, 1, 2]; "small" [2];
# "cpu" none; "quarter" [1, 4] (domain 0 of size 4 partly used).
NODES = (
    make_node("whole"),
    make_node("split"),
    make_node("pairs", domains="0-1,2-3,4-5,6-7"),
    make_node("small", gpus=2, domains="0-1"),
    make_node("cpu", gpus=0),
    make_node("quarter"),
)
USED = [
    used("split", "0"),
    used("split", "4"),
    used("pairs", "2,3"),
    used("pairs", "4"),
    used("quarter", "0,1,2"),
]
NAMES = [n["metadata"]["name"] for n in NODES]


@pytest.mark.parametrize(
    ("gpus", "feasible"),
    [
        pytest.param(1, {"whole", "split", "pairs", "small", "quarter"}, id="one"),
        pytest.param(2, {"whole", "split", "pairs", "small", "quarter"}, id="two"),
        pytest.param(3, {"whole", "split", "quarter", "pairs"}, id="three-two-whole-pairs"),
        pytest.param(4, {"whole", "quarter", "pairs"}, id="four-pairs-whole-domains"),
        pytest.param(5, {"whole"}, id="five-two-whole-quads"),
        pytest.param(8, {"whole"}, id="eight-two-whole-domains"),
        pytest.param(9, set(), id="nine"),
    ],
)
def test_one_domain_feasible(gpus: int, feasible: set[str]) -> None:
    snapshot = snapshot_of(*NODES, pods=USED)
    mask = one_domain_feasible(snapshot, gpus)
    assert mask.shape == (snapshot.rows,)
    assert {NAMES[r] for r in np.flatnonzero(mask)} == feasible


def test_larger_than_any_domain_needs_whole_free_domains() -> None:
    nodes = (
        make_node("pairs", domains="0-1,2-3,4-5,6-7"),
        make_node("pairs-used", domains="0-1,2-3,4-5,6-7"),
    )
    snapshot = snapshot_of(*nodes, pods=[used("pairs-used", "0"), used("pairs-used", "2")])
    # pairs-used has 6 free GPUs but only two whole pairs free.
    assert list(one_domain_feasible(snapshot, 4)) == [True, True]
    assert list(one_domain_feasible(snapshot, 6)) == [True, False]


def test_no_gpu_nodes_at_all() -> None:
    snapshot = snapshot_of(make_node("a", gpus=0), make_node("b", gpus=0))
    assert list(one_domain_feasible(snapshot, 1)) == [False, False]


def test_required_policy_filters() -> None:
    snapshot = snapshot_of(*NODES, pods=USED)
    pod = pod_info(gpus=4, nvlink_policy="required")
    assert rejected(NVLink(), pod, snapshot) == {
        "node(s) had no NVLink domain with 4 free GPUs": {"split", "small", "cpu"}
    }
    rejections = NVLink().filter(pod, snapshot, CycleState())
    assert [(r.resolvable, r.plugin) for r in rejections] == [(True, "NVLink")]


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(pod_info(gpus=3), id="preferred-default"),
        pytest.param(pod_info(gpus=3, nvlink_policy="preferred"), id="preferred"),
        pytest.param(pod_info(gpus=0, nvlink_policy="required"), id="no-gpus"),
    ],
)
def test_filter_skips_pods_without_required_policy(pod: Any) -> None:
    assert NVLink().filter(pod, snapshot_of(*NODES, pods=USED), CycleState()) == []


def seed_snapshot(*extra: dict[str, Any]) -> Any:
    return snapshot_of(
        make_node("g1", gpus=2, domains="0-1"),
        make_node("g2x", gpus=8, domains="0-3,4-7"),
        make_node("cpu", gpus=0),
        *extra,
        pods=[used("g1", "0")],
    )


def test_score_keeps_breakdown_and_normalizes() -> None:
    snapshot = seed_snapshot()
    state = CycleState()
    feasible = np.ones(snapshot.rows, dtype=bool)
    points = NVLink().score(pod_info(gpus=1), snapshot, state, feasible)
    breakdown = state.data["NVLink"].per_row()
    assert list(breakdown.raw[:2]) == [250.0, 40.0]
    assert np.isnan(breakdown.raw[2])
    assert list(breakdown.feasible) == [True, True, False]
    assert list(points) == [92.0, 31.0, 0.0]


def test_nodes_in_the_same_gpu_state_score_the_same() -> None:
    snapshot = seed_snapshot(make_node("g2x-twin", gpus=8, domains="0-3,4-7"))
    points = NVLink().score(pod_info(gpus=1), snapshot, CycleState(), np.ones(4, dtype=bool))
    assert list(points) == [92.0, 31.0, 0.0, 31.0]
    assert snapshot.gpu_state[1] == snapshot.gpu_state[3]


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_scores_match_score_nodes_on_the_rows(gpus: int) -> None:
    snapshot = snapshot_of(*NODES, pods=USED)
    state = CycleState()
    points = NVLink().score(pod_info(gpus=gpus), snapshot, state, np.ones(len(NODES), dtype=bool))
    expected = score_nodes(
        gpus,
        snapshot.free_per_domain,
        snapshot.domain_size,
        snapshot.gpu_total,
        snapshot.gpu_used,
    )
    assert np.array_equal(state.data["NVLink"].per_row().raw, expected.raw, equal_nan=True)
    assert np.array_equal(points, np.nan_to_num(normalize(expected.raw), nan=0.0))


def test_scores_follow_cluster_changes_with_one_plugin() -> None:
    plugin = NVLink()
    cache = cluster(make_node("g1", gpus=2, domains="0-1"), make_node("g2x"))
    pod = pod_info("one", gpus=1)
    feasible = np.ones(2, dtype=bool)
    first = plugin.score(pod, Snapshot(cache), CycleState(), feasible)
    cache.add_pod(pod_info("a", gpus=1, node="g1"))
    second = plugin.score(pod, Snapshot(cache), CycleState(), feasible)
    cache.add_pod(pod_info("b", gpus=1, node="g1"))
    third = plugin.score(pod, Snapshot(cache), CycleState(), feasible)
    other = cluster(make_node("g2x"), make_node("g1", gpus=2, domains="0-1"))
    fourth = plugin.score(pod, Snapshot(other), CycleState(), feasible)
    assert [list(first), list(second), list(third), list(fourth)] == [
        list(normalize([180.0, 40.0])),
        [92.0, 31.0],
        [0.0, 31.0],
        list(normalize([40.0, 180.0])),
    ]


def test_score_abstains_for_pods_without_gpus() -> None:
    snapshot = snapshot_of(*NODES, pods=USED)
    state = CycleState()
    points = NVLink().score(pod_info(gpus=0), snapshot, state, np.ones(snapshot.rows, dtype=bool))
    assert points is None
    assert "NVLink" not in state.data
