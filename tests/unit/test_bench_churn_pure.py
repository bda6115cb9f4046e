"""The control-plane benchmark's churn: the timeline of binds and releases, the GPUs held at
once, the plain replay giving GPUs back, the pod watch's deletions, the reaper's schedule and its
deletes (against a fake API), and the ratios of a run without a ceiling."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hack.bench.churn import Reaper, Step, bind_steps, peak_held, timeline
from hack.bench.control_plane_model import RunResult, nvlink_quality
from hack.bench.control_plane_report import ratios
from hack.bench.control_plane_run import BoundPods
from topology.domains import parse_domains
from topology.occupancy import GPUS_ANNOTATION

D8 = parse_domains("0-3,4-7", 8)


def test_timeline_orders_by_time_a_bind_first_at_a_tie_and_drops_releases_never_bound() -> None:
    bound = {"b": 2.0, "a": 1.0, "c": 3.0}
    released = {"a": 3.0, "b": 2.5, "ghost": 0.5}
    assert timeline(bound, released) == [
        Step("a"),
        Step("b"),
        Step("b", True),
        Step("c"),
        Step("a", True),
    ]
    assert bind_steps(["x", "y"]) == [Step("x"), Step("y")]


def test_peak_held_counts_gpus_held_at_once() -> None:
    sizes = {"a": 4, "b": 2, "c": 8}
    steps = [Step("a"), Step("b"), Step("a", True), Step("a", True), Step("c"), Step("b", True)]
    assert peak_held(steps, sizes) == 10  # b and c
    assert peak_held(bind_steps(sizes), sizes) == 14
    assert peak_held([Step("a", True), Step("a"), Step("a")], sizes) == 4


def test_the_plain_replay_gives_gpus_back_at_a_release() -> None:
    """Without annotations (kube-scheduler's pods) each pod gets the best free GPUs of its node:
    with "big" (gpu-0..3) and "mid" (gpu-4, 5) held, the pair takes gpu-6, 7; a 4-GPU pod then
    finds no free GPUs (not inside a domain) unless "big" was released before it."""
    sizes = {"big": 4, "mid": 2, "pair": 2, "four": 4}
    nodes = dict.fromkeys(sizes, "n")
    annotated = {"big": "0,1,2,3", "mid": "4,5", "pair": None, "four": None}
    held_on = [Step("big"), Step("mid"), Step("pair"), Step("four")]
    assert nvlink_quality(held_on, sizes, nodes, annotated, {"n": D8}) == (4, 3)
    released = [Step("big"), Step("mid"), Step("pair"), Step("big", True), Step("four")]
    assert nvlink_quality(released, sizes, nodes, annotated, {"n": D8}) == (4, 4)
    late = [*held_on, Step("big", True)]  # released after the bind: no help
    assert nvlink_quality(late, sizes, nodes, annotated, {"n": D8}) == (4, 3)


def test_bound_pods_record_deletions_of_pods_seen_bound_once() -> None:
    now = [1.0]
    seen = BoundPods(clock=lambda: now[0])

    def pod(name: str, node: str | None) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "annotations": {GPUS_ANNOTATION: "0"}},
            "spec": {"nodeName": node} if node else {},
        }

    seen.on_add(pod("a", "n1"))
    seen.on_add(pod("pending", None))
    now[0] = 5.0
    seen.on_delete(pod("a", "n1"))
    seen.on_delete(pod("pending", None))
    now[0] = 6.0
    seen.on_delete(pod("a", "n1"))
    assert seen.at == {"a": 1.0} and seen.gone_at == {"a": 5.0}


class FakeResponse:
    def __init__(self, status: int) -> None:
        self.status = status
        self.released = False

    def release(self) -> None:
        self.released = True


class FakeCore:
    """`delete_namespaced_pod` answering 200, or `status_of[name]`."""

    def __init__(self, status_of: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.status_of = status_of or {}

    async def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.calls.append((name, namespace, kwargs["grace_period_seconds"]))
        await asyncio.sleep(0)
        return FakeResponse(self.status_of.get(name, 200))


def test_the_reaper_finds_pods_bound_at_least_a_lifetime_ago_not_yet_deleted() -> None:
    reaper = Reaper(FakeCore(), "ns", lifetime=10.0, concurrency=4, clock=lambda: 0.0)  # type: ignore[arg-type]
    bound = {"a": 1.0, "b": 5.0, "c": 9.5}
    assert reaper.due(bound, 14.9) == ["a"]
    assert reaper.due(bound, 15.0) == ["a", "b"]
    reaper.deleted["a"] = 11.0
    assert reaper.due(bound, 20.0) == ["b", "c"]


async def test_the_reaper_deletes_due_pods_with_grace_zero_while_binds_arrive() -> None:
    now = [0.0]
    core = FakeCore({"gone": 404})
    reaper = Reaper(core, "ns", lifetime=5.0, concurrency=2, clock=lambda: now[0])  # type: ignore[arg-type]
    bound: dict[str, float] = {"gone": 0.0, "a": 1.0}
    reaper.start(bound)
    now[0] = 5.5
    await asyncio.sleep(0.25)
    bound["late"] = 5.5  # bound while the reaper runs: due at 10.5
    now[0] = 8.0
    await asyncio.sleep(0.25)
    assert sorted(reaper.deleted) == ["a", "gone"]
    now[0] = 10.5
    await asyncio.sleep(0.25)
    await reaper.stop()
    assert reaper.deleted == {"gone": 5.5, "a": 8.0, "late": 10.5}
    assert sorted(core.calls) == [("a", "ns", 0), ("gone", "ns", 0), ("late", "ns", 0)]


async def test_the_reaper_reports_a_failed_delete() -> None:
    reaper = Reaper(FakeCore({"a": 500}), "ns", lifetime=0.0, concurrency=1)  # type: ignore[arg-type]
    reaper.start({"a": 0.0})
    await asyncio.sleep(0.25)
    with pytest.raises(RuntimeError, match="delete a: HTTP 500"):
        await reaper.stop()


def run(name: str, pods_per_s: float) -> RunResult:
    return RunResult(
        nodes=200,
        run=name,
        pods=100,
        bound=100,
        pending=0,
        gpus_bound=260,
        seconds=10.0,
        pods_per_s=pods_per_s,
        p50_ms=50.0,
        p99_ms=100.0,
        cpu_s=1.0,
        cpu_s_per_1000_pods=10.0,
        peak_rss_mib=100.0,
        multi_gpu_pods=0,
        one_domain_pods=0,
        one_domain_pct=None,
        mode="10/s",
        deleted=80,
        peak_gpus=200,
    )


def test_ratios_without_a_ceiling_run_leave_the_ceiling_ratios_empty() -> None:
    [row] = ratios([run("gpu-scheduler", 10.0), run("kube-scheduler", 5.0)])
    assert row["gpu_vs_kube_pods_per_s"] == pytest.approx(2.0)
    assert row["gpu_vs_ceiling_pods_per_s"] is None and row["kube_vs_ceiling_pods_per_s"] is None
