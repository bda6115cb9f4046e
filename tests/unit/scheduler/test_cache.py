"""ClusterCache: node rows, pod accounting, GPU indices, the assume/forget/expire state machine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from scheduler.framework.snapshot import Snapshot
from scheduler.model.resources import CPU, GPU, MEMORY, PODS
from scheduler.state.cache import ClusterCache
from scheduler.state.node_table import INITIAL_ROWS
from tests.unit.scheduler.builders import cluster, make_node, make_pod, node_info, pod_info, taint
from tests.unit.scheduler.cache_model import Op, apply, check_consistent, ops


def usage(cache: ClusterCache, node: str) -> list[int]:
    return [int(x) for x in cache.requested[cache.row_of[node]]]


def free_domains(cache: ClusterCache, node: str) -> list[int]:
    row = cache.row_of[node]
    width = cache.nodes[node].topology.domain_count
    return [int(x) for x in cache.free_per_domain[row, :width]]


def used_gpus(cache: ClusterCache, node: str) -> list[int]:
    return [int(g) for g in cache.node_gpus_used(node).nonzero()[0]]


# -- nodes --------------------------------------------------------------------------------------


def test_added_nodes_get_rows_in_order_with_domain_arrays() -> None:
    cache = cluster(
        make_node("big", gpus=8),
        make_node("small", gpus=2, domains="0-1"),
        make_node("cpu", gpus=0),
    )
    assert cache.names == ["big", "small", "cpu"]
    assert cache.row_of == {"big": 0, "small": 1, "cpu": 2}
    assert cache.valid[:3].all() and not cache.valid[3:].any()
    assert [list(r) for r in cache.free_per_domain[:3]] == [[4, 4], [2, 0], [0, 0]]
    assert [list(r) for r in cache.domain_size[:3]] == [[4, 4], [2, 0], [0, 0]]
    assert list(cache.allocatable[1]) == [64000, 512 * 2**30, 0, 110, 2]
    assert list(cache.gpu_domain[0, :8]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert list(cache.gpu_domain[1, :8]) == [0, 0, -1, -1, -1, -1, -1, -1]


def test_update_node_keeps_pods_and_refreshes_attributes() -> None:
    cache = cluster(make_node("n", gpus=8), pods=[make_pod("a", gpus=2, node="n", cpu="1")])
    before = cache.generation
    cache.add_or_update_node(
        node_info("n", gpus=8, cpu="8", unschedulable=True, taints=[taint("k", "v")])
    )
    assert cache.generation > before
    assert cache.row_of == {"n": 0}
    assert usage(cache, "n") == [1000, 0, 0, 1, 2]
    assert cache.allocatable[0, CPU] == 8000
    assert cache.unschedulable[0]
    assert cache.taint_groups[cache.taint_group[0]] == cache.nodes["n"].taints
    assert cache.gpus_of("default/a") == (0, 1)
    assert free_domains(cache, "n") == [2, 4]


def test_update_node_changing_domains_recounts_them() -> None:
    cache = cluster(make_node("n", gpus=8), pods=[make_pod("a", gpus=3, node="n")])
    cache.add_or_update_node(node_info("n", gpus=8, domains="0-1,2-3,4-5,6-7"))
    assert free_domains(cache, "n") == [0, 1, 2, 2]
    assert [int(x) for x in cache.domain_size[0, :4]] == [2, 2, 2, 2]


def test_nodes_sharing_taints_share_a_group() -> None:
    cache = cluster(
        make_node("a", taints=[taint("k", "v")]),
        make_node("b"),
        make_node("c", taints=[taint("k", "v")]),
    )
    groups = [int(g) for g in cache.taint_group[:3]]
    assert groups[0] == groups[2] != groups[1]
    assert len(cache.taint_groups) == 2


def test_label_column_follows_node_changes() -> None:
    cache = cluster(make_node("a", labels={"gpu": "a100"}), make_node("b"))
    column = cache.label_column("gpu")
    assert [int(c) for c in column.codes[:2]] == [column.index["a100"], -1]
    cache.add_or_update_node(node_info("b", labels={"gpu": "h100"}))
    cache.add_or_update_node(node_info("a"))
    column = cache.label_column("gpu")
    assert [int(c) for c in column.codes[:2]] == [-1, column.index["h100"]]


def test_removed_node_row_is_invalid_and_reused() -> None:
    cache = cluster(make_node("a"), make_node("b"), make_node("c"))
    cache.remove_node("b")
    assert not cache.valid[1]
    assert "b" not in cache.row_of and "b" not in cache.nodes
    assert cache.names[1] == ""
    assert Snapshot(cache).node_count == 2
    cache.add_or_update_node(node_info("d", gpus=2, domains="0-1"))
    assert cache.row_of["d"] == 1
    assert cache.names == ["a", "d", "c"]
    assert cache.valid[1]
    assert free_domains(cache, "d") == [2]
    assert [int(x) for x in cache.domain_size[1]] == [2, 0]


def test_reused_row_does_not_inherit_the_old_usage() -> None:
    cache = cluster(make_node("a"), pods=[make_pod("p", gpus=4, node="a", cpu="2")])
    cache.remove_node("a")
    cache.add_or_update_node(node_info("b"))
    assert cache.row_of["b"] == 0
    assert usage(cache, "b") == [0, 0, 0, 0, 0]
    assert free_domains(cache, "b") == [4, 4]


def test_removing_an_unknown_node_is_a_no_op() -> None:
    cache = cluster(make_node("a"))
    before = cache.generation
    cache.remove_node("ghost")
    assert cache.generation == before


def test_removed_node_pods_count_again_when_it_returns() -> None:
    cache = cluster(make_node("a"), pods=[make_pod("p", gpus=2, node="a", gpu_indices="6,7")])
    cache.remove_node("a")
    cache.add_or_update_node(node_info("a"))
    assert usage(cache, "a")[GPU] == 2
    assert used_gpus(cache, "a") == [6, 7]


def test_rows_grow_past_the_initial_capacity() -> None:
    cache = ClusterCache()
    count = INITIAL_ROWS + 3
    for i in range(count):
        cache.add_or_update_node(node_info(f"n{i}", gpus=2, domains="0-1"))
    cache.add_pod(pod_info("p", gpus=1, node=f"n{count - 1}"))
    assert cache.rows == count
    assert cache.valid[:count].all()
    assert usage(cache, f"n{count - 1}")[GPU] == 1
    assert free_domains(cache, f"n{count - 1}") == [1]
    assert free_domains(cache, "n0") == [2]


def test_wider_node_pads_existing_rows() -> None:
    cache = cluster(make_node("two", gpus=2, domains="0-1"))
    cache.add_or_update_node(node_info("sixteen", gpus=16, domains="0-3,4-7,8-11,12-15"))
    assert cache.gpu_used.shape[1] >= 16
    assert [int(x) for x in cache.free_per_domain[0, :4]] == [2, 0, 0, 0]
    assert free_domains(cache, "sixteen") == [4, 4, 4, 4]


# -- pods ---------------------------------------------------------------------------------------


def test_pod_add_counts_requests_and_gpus() -> None:
    cache = cluster(make_node("n"))
    cache.add_pod(pod_info("a", gpus=2, cpu="500m", memory="1Gi", node="n"))
    cache.add_pod(pod_info("b", gpus=1, cpu="250m", node="n"))
    assert usage(cache, "n") == [750, 2**30, 0, 2, 3]
    assert cache.gpus_of("default/a") == (0, 1)
    assert cache.gpus_of("default/b") == (2,)
    assert free_domains(cache, "n") == [1, 4]


@pytest.mark.parametrize(
    ("pod_gpus", "annotation", "expected"),
    [
        pytest.param(2, "4,5", (4, 5), id="honoured"),
        pytest.param(2, "7, 1", (1, 7), id="spanning-honoured"),
        pytest.param(2, "4", (0, 1), id="count-mismatch-fill-order"),
        pytest.param(1, "9", (0,), id="out-of-range-fill-order"),
    ],
)
def test_gpu_annotation(pod_gpus: int, annotation: str, expected: tuple[int, ...]) -> None:
    cache = cluster(make_node("n"))
    cache.add_pod(pod_info("a", gpus=pod_gpus, node="n", gpu_indices=annotation))
    assert cache.gpus_of("default/a") == expected


def test_gpu_annotation_taken_falls_back_to_fill_order() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", gpus=2, node="n", gpu_indices="4,5")])
    cache.add_pod(pod_info("b", gpus=1, node="n", gpu_indices="5"))
    assert cache.gpus_of("default/b") == (6,)
    assert used_gpus(cache, "n") == [4, 5, 6]


@pytest.mark.parametrize(
    ("taken", "gpus", "expected"),
    [
        pytest.param(None, 1, (0,), id="empty-node-first-domain"),
        pytest.param("4", 1, (5,), id="most-used-domain-first"),
        pytest.param("4", 3, (5, 6, 7), id="fills-partly-used-domain"),
        pytest.param("4", 4, (0, 1, 2, 3), id="whole-free-domain"),
        pytest.param("0,4", 4, (1, 2, 3, 5), id="spans-when-needed"),
    ],
)
def test_pods_without_annotation_follow_the_fill_order(
    taken: str | None, gpus: int, expected: tuple[int, ...]
) -> None:
    pods = []
    if taken is not None:
        pods.append(make_pod("t", gpus=len(taken.split(",")), node="n", gpu_indices=taken))
    cache = cluster(make_node("n"), pods=pods)
    cache.add_pod(pod_info("a", gpus=gpus, node="n"))
    assert cache.gpus_of("default/a") == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(make_pod("a", gpus=1), id="unbound"),
        pytest.param(make_pod("a", gpus=1, node="n", phase="Succeeded"), id="succeeded"),
        pytest.param(make_pod("a", gpus=1, node="n", phase="Failed"), id="failed"),
    ],
)
def test_pods_not_holding_resources_are_not_counted(raw: dict[str, object]) -> None:
    cache = cluster(make_node("n"), pods=[raw])
    assert cache.pods == {}
    assert usage(cache, "n") == [0, 0, 0, 0, 0]
    assert free_domains(cache, "n") == [4, 4]


def test_pod_finishing_gives_back_its_resources() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", gpus=4, node="n", phase="Running")])
    cache.update_pod(pod_info("a", gpus=4, node="n", phase="Succeeded"))
    assert "default/a" not in cache.pods
    assert usage(cache, "n") == [0, 0, 0, 0, 0]
    assert free_domains(cache, "n") == [4, 4]


def test_terminating_pods_still_count() -> None:
    raw = make_pod("a", gpus=2, node="n")
    raw["metadata"]["deletionTimestamp"] = "2024-05-01T10:05:00Z"
    cache = cluster(make_node("n"), pods=[raw])
    assert usage(cache, "n")[GPU] == 2


def test_remove_pod_gives_back_resources() -> None:
    cache = cluster(
        make_node("n"),
        pods=[make_pod("a", gpus=2, cpu="1", node="n"), make_pod("b", gpus=1, node="n")],
    )
    cache.remove_pod("default/a")
    assert usage(cache, "n") == [100, 0, 0, 1, 1]
    assert used_gpus(cache, "n") == [2]
    assert free_domains(cache, "n") == [3, 4]
    assert cache.gpus_of("default/a") == ()
    cache.remove_pod("default/missing")
    assert usage(cache, "n") == [100, 0, 0, 1, 1]


def test_update_with_same_gpus_changes_only_requests() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", gpus=1, cpu="1", node="n")])
    before = cache.generation
    cache.update_pod(pod_info("a", gpus=1, cpu="3", memory="1Gi", node="n"))
    assert usage(cache, "n")[:2] == [3000, 2**30]
    assert cache.gpus_of("default/a") == (0,)
    assert cache.generation > before
    same = cache.generation
    cache.update_pod(pod_info("a", gpus=1, cpu="3", memory="1Gi", node="n"))
    assert cache.generation == same
    assert usage(cache, "n") == [3000, 2**30, 0, 1, 1]


def test_update_with_other_annotation_moves_the_gpus() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", gpus=1, node="n")])
    cache.update_pod(pod_info("a", gpus=1, node="n", gpu_indices="7"))
    assert cache.gpus_of("default/a") == (7,)
    assert used_gpus(cache, "n") == [7]
    assert usage(cache, "n")[GPU] == 1


def test_pod_moving_to_another_node_leaves_the_first() -> None:
    cache = cluster(make_node("a"), make_node("b"), pods=[make_pod("p", gpus=2, node="a")])
    cache.update_pod(pod_info("p", gpus=2, node="b"))
    assert usage(cache, "a") == [0, 0, 0, 0, 0]
    assert usage(cache, "b")[GPU] == 2
    assert free_domains(cache, "a") == [4, 4]


def test_pod_added_before_its_node_is_counted_when_the_node_arrives() -> None:
    cache = ClusterCache()
    cache.add_pod(pod_info("a", gpus=2, cpu="1", node="late", gpu_indices="6,7"))
    cache.add_pod(pod_info("b", gpus=1, node="late"))
    assert cache.rows == 0
    cache.add_or_update_node(node_info("late"))
    assert usage(cache, "late") == [1100, 0, 0, 2, 3]
    assert cache.gpus_of("default/a") == (6, 7)
    assert cache.gpus_of("default/b") == (4,)
    assert free_domains(cache, "late") == [4, 1]


def test_overcommit_is_reported() -> None:
    cache = cluster(make_node("n", gpus=2, domains="0-1"))
    cache.add_pod(pod_info("a", gpus=2, node="n"))
    cache.add_pod(pod_info("b", gpus=1, node="n"))
    assert cache.overcommitted_gpus() == {"n": 1}
    assert free_domains(cache, "n") == [0]


# -- assume / forget / expire -------------------------------------------------------------------


def test_assume_takes_resources_at_once() -> None:
    cache = cluster(make_node("n"))
    pod = pod_info("a", gpus=2, cpu="1")
    cache.assume(pod, "n", (5, 6))
    assert cache.is_assumed("default/a")
    assert usage(cache, "n") == [1000, 0, 0, 1, 2]
    assert used_gpus(cache, "n") == [5, 6]
    assert free_domains(cache, "n") == [4, 2]
    with pytest.raises(ValueError, match="already in the cache"):
        cache.assume(pod, "n", (0, 1))


def test_forget_gives_back_an_assumed_pod() -> None:
    cache = cluster(make_node("n"))
    cache.assume(pod_info("a", gpus=2), "n", (0, 1))
    cache.forget("default/a")
    assert "default/a" not in cache.pods
    assert usage(cache, "n") == [0, 0, 0, 0, 0]
    assert free_domains(cache, "n") == [4, 4]


def test_forget_ignores_confirmed_pods() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", gpus=1, node="n")])
    cache.forget("default/a")
    cache.forget("default/unknown")
    assert usage(cache, "n")[GPU] == 1


def test_confirming_an_assumed_pod_keeps_its_gpus() -> None:
    cache = cluster(make_node("n"))
    cache.assume(pod_info("a", gpus=2), "n", (4, 5))
    cache.finish_binding("default/a", now=100.0)
    cache.add_pod(pod_info("a", gpus=2, node="n"))
    assert not cache.is_assumed("default/a")
    assert cache.gpus_of("default/a") == (4, 5)
    assert usage(cache, "n")[GPU] == 2


def test_informer_seeing_the_pod_unbound_keeps_the_assumption() -> None:
    cache = cluster(make_node("n"))
    cache.assume(pod_info("a", gpus=1), "n", (3,))
    cache.add_pod(pod_info("a", gpus=1))
    assert cache.is_assumed("default/a")
    assert used_gpus(cache, "n") == [3]


def test_pod_bound_elsewhere_replaces_the_assumption() -> None:
    cache = cluster(make_node("a"), make_node("b"))
    cache.assume(pod_info("p", gpus=2), "a", (0, 1))
    cache.add_pod(pod_info("p", gpus=2, node="b"))
    assert not cache.is_assumed("default/p")
    assert usage(cache, "a") == [0, 0, 0, 0, 0]
    assert usage(cache, "b")[GPU] == 2


def test_finish_binding_ignores_confirmed_pods() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", node="n")])
    cache.finish_binding("default/a", now=0.0)
    assert cache.pods["default/a"].binding_finished_at is None


def test_assume_on_unknown_node_counts_when_it_appears() -> None:
    cache = ClusterCache()
    cache.assume(pod_info("a", gpus=2), "soon", (2, 3))
    cache.add_or_update_node(node_info("soon"))
    assert used_gpus(cache, "soon") == [2, 3]
    assert usage(cache, "soon")[PODS] == 1


def test_generation_grows_on_every_change() -> None:
    cache = ClusterCache()
    seen = [cache.generation]
    cache.add_or_update_node(node_info("n"))
    seen.append(cache.generation)
    cache.add_pod(pod_info("a", node="n"))
    seen.append(cache.generation)
    cache.assume(pod_info("b"), "n", (1,))
    seen.append(cache.generation)
    cache.forget("default/b")
    seen.append(cache.generation)
    cache.remove_pod("default/a")
    seen.append(cache.generation)
    cache.remove_node("n")
    seen.append(cache.generation)
    assert seen == sorted(set(seen))


def test_memory_is_tracked() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("a", memory="3Gi", node="n")])
    assert cache.requested[0, MEMORY] == 3 * 2**30


# -- consistency ----------------------------------------------------------------------------------


def test_fixed_sequence_stays_consistent() -> None:
    cache = ClusterCache()
    for op in [
        Op("add_pod", pod="p0", node="n0", gpus=3),
        Op("add_node", node="n0"),
        Op("assume", pod="p1", node="n0", gpus=4),
        Op("add_pod", pod="p2", node="n0", gpus=1, indices=(4,)),
        Op("confirm", pod="p1"),
        Op("remove_pod", pod="p0"),
        Op("remove_node", node="n0"),
        Op("add_node", node="n0"),
    ]:
        apply(cache, op, overcommit=False)
        check_consistent(cache)


@settings(max_examples=300, deadline=None)
@given(ops())
def test_random_operations_match_a_recount_without_overcommit(sequence: list[Op]) -> None:
    cache = ClusterCache()
    for op in sequence:
        apply(cache, op, overcommit=False)
    check_consistent(cache)
