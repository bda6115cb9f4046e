"""Allocation tracking: GPU indices observed by dcgm-exporter replace the cache's, all pods of a
node at once, so swaps and rotations converge in one round."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from reclaim.prometheus import PodKey, PrometheusClient
from scheduler.config import config_from_data
from scheduler.core.allocation import AllocationTracker, allocation_tracker
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info
from tests.unit.scheduler.cache_model import check_consistent


class Holders:
    """A scripted `gpu_holders` answer: (node, GPU) -> pods."""

    def __init__(self, held: Mapping[tuple[str, int], str]) -> None:
        self.held = held

    async def gpu_holders(self) -> Mapping[tuple[str, int], set[PodKey]]:
        return {where: {("default", pod)} for where, pod in self.held.items()}


def four_pods(*, node: str = "n", gpus: int = 4) -> ClusterCache:
    """A 4-GPU node with pods p0..p3 recorded on GPUs 0..3 (as another scheduler placed them)."""
    pods = [make_pod(f"p{i}", gpus=1, node=node, gpu_indices=str(i)) for i in range(4)]
    return cluster(make_node(node, gpus=gpus, domains="0-1,2-3"), pods=pods)


def held(cache: ClusterCache) -> dict[str, tuple[int, ...]]:
    return {key.split("/")[1]: cache.gpus_of(key) for key in sorted(cache.pods)}


@pytest.mark.parametrize(
    ("name", "truth"),
    [
        ("swap", {"p0": 1, "p1": 0, "p2": 2, "p3": 3}),
        ("swap-two-pairs", {"p0": 1, "p1": 0, "p2": 3, "p3": 2}),
        ("rotation", {"p0": 1, "p1": 2, "p2": 3, "p3": 0}),
        ("reverse", {"p0": 3, "p1": 2, "p2": 1, "p3": 0}),
        ("three-cycle", {"p0": 2, "p1": 0, "p2": 1, "p3": 3}),
    ],
)
async def test_tracker_converges_in_one_round(name: str, truth: dict[str, int]) -> None:
    cache = four_pods()
    tracker = AllocationTracker(cache, Holders({("n", g): pod for pod, g in truth.items()}))
    changed = await tracker.refresh()
    moved = sum(1 for pod, g in truth.items() if int(pod[1:]) != g)
    assert changed == moved, name
    assert held(cache) == {pod: (g,) for pod, g in truth.items()}
    assert all(
        cache.pods[f"default/{pod}"].observed for pod, g in truth.items() if int(pod[1:]) != g
    )
    check_consistent(cache)
    assert await tracker.refresh() == 0  # converged: nothing left to correct
    assert tracker.corrections == moved


def test_correct_node_gpus_swaps_multi_gpu_pods() -> None:
    pods = [
        make_pod("a", gpus=2, node="n", gpu_indices="0,1"),
        make_pod("b", gpus=2, node="n", gpu_indices="2,3"),
    ]
    cache = cluster(make_node("n", gpus=4, domains="0-1,2-3"), pods=pods)
    changed = cache.correct_node_gpus("n", {"default/a": (3, 2), "default/b": (0, 1)})
    assert changed == ["default/a", "default/b"]
    assert cache.gpus_of("default/a") == (2, 3)
    assert cache.gpus_of("default/b") == (0, 1)
    check_consistent(cache)


def test_correct_node_gpus_keeps_unaffected_pods_and_marks_observed() -> None:
    cache = four_pods()
    changed = cache.correct_node_gpus("n", {"default/p0": (1,), "default/p1": (0,)})
    assert changed == ["default/p0", "default/p1"]
    assert held(cache) == {"p0": (1,), "p1": (0,), "p2": (2,), "p3": (3,)}
    assert not cache.pods["default/p2"].observed
    # Already observed and unchanged: nothing to do.
    assert cache.correct_node_gpus("n", {"default/p0": (1,)}) == []
    # A later informer update that re-announces the stale annotation keeps the observed GPUs.
    cache.add_pod(pod_info("p0", gpus=1, node="n", gpu_indices="0"))
    assert cache.gpus_of("default/p0") == (1,)
    check_consistent(cache)


@pytest.mark.parametrize(
    ("observed", "why"),
    [
        ({"default/p0": (4,)}, "index the node does not have"),
        ({"default/p0": (-1,)}, "negative index"),
        ({"default/p0": (1, 2)}, "more GPUs than the pod asks for"),
        ({"default/p0": ()}, "fewer GPUs than the pod asks for"),
        ({"default/p0": (1,), "default/p1": (1,)}, "two pods claim one GPU"),
        ({"default/nobody": (1,)}, "unknown pod"),
        ({"reservation:default/waiting": (1,)}, "reservation"),
    ],
)
def test_correct_node_gpus_rejects_impossible_observations(
    observed: dict[str, tuple[int, ...]], why: str
) -> None:
    cache = four_pods()
    cache.reserve(pod_info("waiting", gpus=1), "n", (1,), now=0.0)
    before = held(cache)
    assert cache.correct_node_gpus("n", observed) == [], why
    assert held(cache) == before
    check_consistent(cache)


def test_correct_node_gpus_on_another_node_or_unknown_node_changes_nothing() -> None:
    cache = four_pods()
    cache.add_or_update_node(cluster(make_node("m", gpus=4)).nodes["m"])
    assert cache.correct_node_gpus("m", {"default/p0": (1,)}) == []
    assert cache.correct_node_gpus("gone", {"default/p0": (1,)}) == []
    assert held(cache)["p0"] == (0,)


def test_assumed_pods_are_not_corrected() -> None:
    cache = cluster(make_node("n", gpus=4, domains="0-1,2-3"))
    cache.assume(pod_info("mine", gpus=1), "n", (0,))
    assert cache.correct_node_gpus("n", {"default/mine": (3,)}) == []
    assert cache.gpus_of("default/mine") == (0,)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (
            {
                "reclaim": {"prometheusUrl": "http://p:9090"},
                "allocationTracking": {"enabled": False},
            },
            "off",
        ),
        ({"allocationTracking": {"enabled": True}}, "no Prometheus"),
    ],
)
def test_no_tracker_when_off_or_without_prometheus(data: dict[str, Any], why: str) -> None:
    settings = config_from_data(data, "<test>", {})
    with capture_logs() as logs:
        assert allocation_tracker(settings, ClusterCache()) is None, why
    assert [e["event"] for e in logs] == ["gpu_allocation_tracking_off"]


async def test_the_tracker_runs_every_period_whatever_the_reclaim_mode_and_closes_its_session() -> (
    None
):
    settings = config_from_data(
        {
            "reclaim": {"mode": "off", "prometheusUrl": "http://127.0.0.1:1"},
            "allocationTracking": {"periodSeconds": 45},
        },
        "<test>",
        {},
    )
    tracker = allocation_tracker(settings, ClusterCache())
    assert tracker is not None
    assert tracker.interval == 45.0
    assert isinstance(tracker.prometheus, PrometheusClient)
    closed: list[bool] = []
    assert tracker.close is not None
    close_source = tracker.close

    async def close() -> None:
        closed.append(True)
        await close_source()

    tracker.close = close
    task = asyncio.create_task(tracker.run())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]
