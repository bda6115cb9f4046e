"""Assumed pods whose binding succeeded never expire: they stay counted until the informer shows
them bound (confirmed), bound elsewhere (replaced), finished, or deleted (also when a relist no
longer lists them). A watch that lags must not make a bound pod's GPUs look free."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client

import scheduler.daemon
from hack.localcluster.cluster import free_port
from scheduler.core.handlers import PodHandler
from scheduler.daemon import Daemon
from scheduler.kube.informer import Informer, InformerOptions
from tests.scheduling import settings_for
from tests.unit.scheduler.builders import cluster, make_node, make_pod, node_info, pod_info
from tests.unit.scheduler.core_api_double import FakeClock, harness

KEY = "default/a"


class SteppingClock(FakeClock):
    """Every read moves time on by `step` seconds."""

    step: float = 10.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def test_daemon_never_expires_a_bound_assumed_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's periodic cache maintenance runs while minutes pass on its clock and the
    informer never reports the pod: its GPUs stay used."""
    monkeypatch.setattr(scheduler.daemon, "CACHE_EXPIRY_INTERVAL_S", 0.0)
    configuration = client.Configuration(host=f"http://127.0.0.1:{free_port()}")  # nobody there
    api = client.ApiClient(configuration)
    clock = SteppingClock()
    daemon = Daemon(settings_for("expiry"), api, clock=clock)
    daemon.cache.add_or_update_node(node_info("n"))
    daemon.cache.assume(pod_info("a", gpus=4), "n", (0, 1, 2, 3))
    daemon.cache.finish_binding(KEY, clock())
    started = clock.now
    task = asyncio.create_task(daemon.run())
    try:
        for _ in range(100_000):  # bounded: until ten minutes passed on the daemon's clock
            if clock.now - started > 600 or task.done():
                break
            await asyncio.sleep(0)
        assert clock.now - started > 600, "the daemon's clock did not advance"
        assert daemon.cache.is_assumed(KEY)
        assert list(daemon.cache.node_gpus_used("n")) == [True] * 4 + [False] * 4
        assert daemon.metrics_registry.get_sample_value("gpu_scheduler_events_dropped_total") == 0
    finally:
        daemon.stop()
        await asyncio.wait_for(task, 30)
        await api.close()


def test_assumed_pod_shown_bound_and_finished_is_removed() -> None:
    h = harness(cluster(make_node("n")))
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone)
    h.cache.assume(pod_info("a", gpus=2), "n", (0, 1))
    h.cache.finish_binding(KEY, 0.0)
    handler.on_add(make_pod("a", gpus=2))  # a late event still showing it pending: kept
    assert h.cache.is_assumed(KEY)
    handler.on_add(make_pod("a", gpus=2, node="n", phase="Succeeded"))
    assert KEY not in h.cache.pods
    assert not h.cache.node_gpus_used("n").any()


def test_assumed_pod_deleted_is_removed() -> None:
    h = harness(cluster(make_node("n")))
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone)
    h.cache.assume(pod_info("a", gpus=2), "n", (0, 1))
    h.cache.finish_binding(KEY, 0.0)
    handler.on_delete(make_pod("a", gpus=2))
    assert KEY not in h.cache.pods
    assert not h.cache.node_gpus_used("n").any()


class Answer:
    """A raw response for the informer: status, read(), release()."""

    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = "Gone" if status == 410 else "OK"
        self._body = json.dumps(body or {}).encode()

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class ScriptedPods:
    """list_pod_for_all_namespaces: the first list has the pending pod, the relist (after the
    first watch answers 410 once `expire` is set) has no pod at all."""

    def __init__(self, first: list[dict[str, Any]]) -> None:
        self.lists = [first, []]
        self.calls = 0
        self.expire = asyncio.Event()
        self.never = asyncio.Event()

    async def __call__(self, **kwargs: Any) -> Answer:
        if kwargs.get("watch"):
            if self.calls == 1:
                await self.expire.wait()
                return Answer(410)
            await self.never.wait()
        items = self.lists[min(self.calls, 1)]
        self.calls += 1
        metadata = {"resourceVersion": str(self.calls)}
        return Answer(
            200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}
        )


async def test_relist_without_the_pod_removes_it_while_assumed() -> None:
    h = harness(cluster(make_node("n")))
    pods = ScriptedPods([make_pod("a", gpus=4)])
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone)
    informer = Informer(
        "pods", pods, handler, InformerOptions(backoff_initial=0.01, backoff_max=0.01)
    )
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        assert await h.cycle() == KEY  # bound; the informer has not shown it bound
        assert h.cache.is_assumed(KEY)
        assert int(h.cache.node_gpus_used("n").sum()) == 4

        pods.expire.set()  # the watch answers 410: relist, and the pod is gone
        for _ in range(10_000):
            if informer.relists:
                break
            await asyncio.sleep(0)
        assert informer.relists == 1
        assert KEY not in h.cache.pods
        assert not h.cache.node_gpus_used("n").any()
    finally:
        task.cancel()
        await asyncio.wait([task])
