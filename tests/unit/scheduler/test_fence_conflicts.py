"""Detection and reporting of GPU conflicts among bound pods (what a stale leader leaves)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from scheduler.core.conflicts import MAX_LISTED, ConflictMonitor, GpuConflict, find_conflicts
from scheduler.kube.leader import AlwaysLeader
from scheduler.model.objects import parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def emit(self, ref: Any, type_: str, reason: str, action: str, note: str) -> bool:
        self.events.append((ref.kind, ref.name, reason, note))
        return True


def test_a_clean_cluster_has_no_conflict() -> None:
    cache = cluster(
        make_node("n1", gpus=8),
        pods=[
            make_pod("a", gpus=2, node="n1", gpu_indices="0,1"),
            make_pod("b", gpus=2, node="n1", gpu_indices="2,3"),
            make_pod("c", gpus=1, node="n1"),  # no annotation: counted, indices unknown
        ],
    )
    assert find_conflicts(cache) == []


def test_two_pods_sharing_an_index_are_found_with_the_indices_they_share() -> None:
    cache = cluster(
        make_node("n1", gpus=8),
        make_node("n2", gpus=8),
        pods=[
            make_pod("a", gpus=2, node="n1", gpu_indices="0,1"),
            make_pod("b", gpus=2, node="n1", gpu_indices="1,2"),
            make_pod("c", gpus=2, node="n2", gpu_indices="1,2"),  # other node: fine
        ],
    )
    assert find_conflicts(cache) == [
        GpuConflict("n1", ((1, ("default/a", "default/b")),), bound=4, allocatable=8)
    ]


def test_more_gpus_bound_than_allocatable_is_a_conflict_even_without_annotations() -> None:
    cache = cluster(
        make_node("n1", gpus=4),
        pods=[make_pod(f"p{i}", gpus=2, node="n1") for i in range(3)],
    )
    (conflict,) = find_conflicts(cache)
    assert (conflict.node, conflict.bound, conflict.allocatable) == ("n1", 6, 4)
    assert conflict.overcommitted and conflict.shared == ()
    assert conflict.describe() == "node n1: 6 GPUs bound, 4 allocatable"


def test_our_own_assumed_pods_are_not_bound_pods() -> None:
    cache = cluster(
        make_node("n1", gpus=8), pods=[make_pod("a", gpus=2, node="n1", gpu_indices="0,1")]
    )
    cache.assume(parse_pod(make_pod("b", gpus=2)), "n1", (2, 3))
    assert find_conflicts(cache) == []


def test_the_report_is_bounded() -> None:
    pods = [make_pod(f"p{i}", gpus=1, node="n1", gpu_indices="0") for i in range(40)]
    cache = cluster(make_node("n1", gpus=8), pods=pods)
    (conflict,) = find_conflicts(cache)
    text = conflict.describe()
    assert f"and {40 - MAX_LISTED} more" in text
    assert "40 GPUs bound, 8 allocatable" in text
    assert len(text) < 600


async def test_the_monitor_reports_each_conflict_once_while_it_lasts() -> None:
    cache = cluster(
        make_node("n1", gpus=8),
        pods=[
            make_pod("a", gpus=2, node="n1", gpu_indices="0,1"),
            make_pod("b", gpus=2, node="n1", gpu_indices="1,2"),
        ],
    )
    recorder = Recorder()
    monitor = ConflictMonitor(cache, recorder, AlwaysLeader("me"), lambda: True)  # type: ignore[arg-type]
    with capture_logs() as logs:
        assert len(monitor.scan()) == 1
        assert monitor.scan() == []  # still there: not again
    assert monitor.reported == 1
    (event,) = recorder.events
    assert event[:3] == ("Node", "n1", "GPUConflict")
    assert "1 (default/a, default/b)" in event[3]
    (line,) = [entry for entry in logs if entry["event"] == "gpu_conflict"]
    assert line["pods"] == ["default/a", "default/b"] and line["indices"] == [1]

    cache.remove_pod("default/b")
    assert monitor.scan() == []
    cache.add_pod(parse_pod(make_pod("b", gpus=2, node="n1", gpu_indices="1,2")))
    assert len(monitor.scan()) == 1  # it came back: reported again
    assert monitor.reported == 2


async def test_the_monitor_scans_as_soon_as_it_leads() -> None:
    cache = cluster(
        make_node("n1", gpus=8),
        pods=[
            make_pod("a", gpus=1, node="n1", gpu_indices="3"),
            make_pod("b", gpus=1, node="n1", gpu_indices="3"),
        ],
    )
    recorder = Recorder()
    elector = AlwaysLeader("me")
    monitor = ConflictMonitor(cache, recorder, elector, lambda: True, interval=3600)  # type: ignore[arg-type]
    elector_task = asyncio.create_task(elector.run())
    task = asyncio.create_task(monitor.run())
    with capture_logs():
        for _ in range(100):
            if monitor.reported:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await elector.release()
        await elector_task
    with pytest.raises(asyncio.CancelledError):
        await task
    assert monitor.reported == 1
