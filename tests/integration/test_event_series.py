"""A pod retried many times has one FailedScheduling Event whose series counts the attempts, on the
real API server (as kube-scheduler's events.k8s.io/v1 recorder writes it)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1, LocalCluster
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, our_pod, pod_events, running_daemon, settings_for

RETRIES = 4
"""Unschedulable attempts to wait for before looking at the Events."""
WINDOW_S = 8.0
"""The series window for this test (6 minutes in the daemon): well above the ~2 s between retries
(backoff at most 1 s, unschedulable pods flushed every second), so no gap ends the series
early, and short enough that the series ends within the test."""


def unschedulable_attempts(registry: Any, profile: str) -> int:
    value = registry.get_sample_value(
        "scheduler_schedule_attempts_total", {"result": "unschedulable", "profile": profile}
    )
    return int(value or 0)


async def failed_scheduling(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return [
        e for e in await pod_events(api, namespace, "too-big") if e["reason"] == "FailedScheduling"
    ]


async def test_a_pod_retried_several_times_has_one_failed_scheduling_event_with_a_series(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    await make_nodes(core_api, [isolated(G1, namespace)])
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "too-big", 4))
    settings = settings_for(namespace, queue={"unschedulableFlushSeconds": 1})
    async with running_daemon(cluster, settings) as daemon:
        daemon.recorder.series.window = WINDOW_S
        registry = daemon.metrics_registry

        async def retried() -> bool:
            return unschedulable_attempts(registry, namespace) >= RETRIES

        await eventually(retried, what=f"{RETRIES} attempts to schedule the pod")

        async def series_written() -> list[dict[str, Any]] | None:
            found = await failed_scheduling(core_api.api_client, namespace)
            return found if any(e.get("series") for e in found) else None

        [event] = await eventually(series_written, what="the FailedScheduling series")
        assert event["series"]["count"] >= 2
        assert event["series"]["lastObservedTime"] > event["eventTime"]

        # The core/v1 view (kubectl get events, kubectl describe) shows the same series.
        response = await core_api.list_namespaced_event(
            namespace, field_selector="involvedObject.name=too-big", _preload_content=False
        )
        [core_event] = [
            e
            for e in json.loads(await response.read())["items"]
            if e["reason"] == "FailedScheduling"
        ]
        assert core_event["series"]["count"] >= 2

        # Once the pod is gone the series ends, and its final count is every attempt.
        await core_api.delete_namespaced_pod("too-big", namespace, grace_period_seconds=0)

        async def forgotten() -> bool:
            return f"{namespace}/too-big" not in daemon.queue

        await eventually(forgotten, what="the pod gone from the queue")
        attempts = unschedulable_attempts(registry, namespace)
        assert attempts >= RETRIES

        async def final() -> list[dict[str, Any]] | None:
            found = await failed_scheduling(core_api.api_client, namespace)
            counts = [(e.get("series") or {}).get("count", 1) for e in found]
            return found if counts == [attempts] else None

        await eventually(final, timeout=30, what=f"one FailedScheduling Event counting {attempts}")
