"""The idle verdict end to end: the fake dcgm-exporter, the real Prometheus, the adapter's one
batched query, and `idle_verdict` with the default power models.

The node is an H100 node: the fake exporter's H100 idles at 70 W (hack/fake_dcgm/power.py), 30 W
below the 100 W of the verdict's H100 model, the calibration's hard case. Pods, started together:

- `duty12`: full load for 0.6 s of every 5 s (12 % duty). With the model's 100 W it would read
  about 7.6 %, idle under 10 %; calibrated on its own 70 W floor it reads about 12.7 %.
- `quiet`: holds its GPU and runs nothing.
- `late`: quiet, then full load for the 5 s from 55 s to 60 s after its start: 8 % of a 60 s
  window on average, but its busiest 10 s sub-window is half busy.
- `reuse`: quiet; deleted and recreated under the same name by the last test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from hack.localcluster.nodes import G2
from reclaim.prometheus import PodKey, PrometheusClient
from reclaim.signals import GpuWindow
from reclaim.usage import DEFAULT_POWER_MODELS, Verdict, idle_verdict
from tests.kube import bind, eventually, make_namespace, pod_gone, pod_phase
from tests.scheduling import TEST_LABEL, isolated, make_nodes, our_pod, pod_json

WINDOW_S = 60.0
SCRAPE_S = 1.0  # hack/localcluster's Prometheus scrape interval
THRESHOLD_PCT = 10.0
USAGE = "fake-dcgm.gpu-scheduler.io/usage"
GPUS = "gpu-scheduler.io/gpus"
LATE_BUSY_S = (55.0, 60.0)
PODS = {
    "duty12": ("0", "periodic:period=5,duty=0.12,level=100"),
    "quiet": ("1", None),
    "late": ("2", f"periodic:period=1000,duty=0.005,level=100,phase={LATE_BUSY_S[0]:g}"),
    "reuse": ("3", None),
}


@dataclass(frozen=True)
class Scene:
    namespace: str
    node: str
    prometheus_url: str
    started: dict[str, float]
    """Pod name -> status.startTime (epoch seconds), the instant the fake exporter's shapes
    count from."""


def _pod(namespace: str, name: str) -> dict[str, Any]:
    gpus, usage = PODS[name]
    annotations = {GPUS: gpus, **({USAGE: usage} if usage else {})}
    return our_pod(namespace, name, 1, annotations=annotations)


async def _start(core_api: client.CoreV1Api, namespace: str, name: str, node: str) -> float:
    await core_api.create_namespaced_pod(namespace, _pod(namespace, name))
    await bind(core_api, namespace, name, node)

    async def started() -> float | None:
        if await pod_phase(core_api, namespace, name) != "Running":
            return None
        status = (await pod_json(core_api, namespace, name)).get("status") or {}
        start = status.get("startTime")
        return datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() if start else None

    return await eventually(started, timeout=30, what=f"{namespace}/{name} Running")


@pytest.fixture(scope="module")
async def scene(cluster: LocalCluster, core_api: client.CoreV1Api) -> AsyncIterator[Scene]:
    assert cluster.prometheus_url is not None
    namespace = await make_namespace(core_api, "test_idle_verdict")
    (node,) = await make_nodes(core_api, [isolated(G2, namespace)])
    try:
        started = {name: await _start(core_api, namespace, name, node) for name in PODS}
        # A full window of every pod's own samples, with late's busy stretch inside it.
        ready_at = max(started.values()) + WINDOW_S + 3.0
        await asyncio.sleep(max(0.0, ready_at - time.time()))
        yield Scene(namespace, node, cluster.prometheus_url, started)
    finally:
        await core_api.delete_namespace(namespace)
        await core_api.delete_collection_node(label_selector=f"{TEST_LABEL}={namespace}")


async def _windows(
    scene: Scene, names: list[str], started: dict[str, float] | None = None
) -> dict[PodKey, list[GpuWindow]]:
    pods = [(scene.namespace, name) for name in names]
    starts = None if started is None else {(scene.namespace, n): t for n, t in started.items()}
    async with PrometheusClient(scene.prometheus_url) as prometheus:
        return await prometheus.usage_windows(
            pods, WINDOW_S, scrape_interval_s=SCRAPE_S, started_at=starts
        )


def _verdict(windows: list[GpuWindow]) -> Verdict:
    return idle_verdict(windows, THRESHOLD_PCT, DEFAULT_POWER_MODELS, scrape_interval_s=SCRAPE_S)


async def test_a_busy_sub_window_keeps_a_pod_busy(scene: Scene) -> None:
    windows = await _windows(scene, ["late"], scene.started)
    (window,) = windows[(scene.namespace, "late")]
    assert window.subwindow_s == 10.0
    assert time.time() - scene.started["late"] < LATE_BUSY_S[1] + WINDOW_S  # still in the window
    # Averaged over the window the 5 busy seconds read under the threshold...
    assert window.util_mean_pct is not None and window.util_mean_pct < THRESHOLD_PCT
    # ...but some 10 s sub-window held them.
    assert window.util_peak_pct is not None and window.util_peak_pct >= 30.0
    assert window.energy_peak_w is not None and window.energy_peak_w > 200.0
    verdict = _verdict([window])
    assert not verdict.idle, verdict.reason
    assert verdict.usage_pct is not None and verdict.usage_pct >= 30.0


async def test_calibration_reads_a_gpu_idling_below_its_model(scene: Scene) -> None:
    windows = await _windows(scene, ["duty12", "quiet"], scene.started)
    (busy,) = windows[(scene.namespace, "duty12")]
    (quiet,) = windows[(scene.namespace, "quiet")]
    assert busy.model == quiet.model == "NVIDIA H100 80GB HBM3"
    assert quiet.power_floor_w == pytest.approx(70.0, abs=1.0)  # the fake H100's idle draw
    assert busy.power_floor_w == pytest.approx(70.0, abs=1.0)
    model = DEFAULT_POWER_MODELS[busy.model]
    assert busy.energy_increase_mj is not None
    mean_w = busy.energy_increase_mj / 1000.0 / WINDOW_S
    assert model.duty_pct(mean_w) < THRESHOLD_PCT  # the model's fixed 100 W would call it idle
    verdict = _verdict([busy])
    assert not verdict.idle, verdict.reason
    assert verdict.estimates["energy"] >= THRESHOLD_PCT
    quiet_verdict = _verdict([quiet])
    assert quiet_verdict.idle, quiet_verdict.reason


async def test_a_predecessors_samples_do_not_make_its_successor_idle(
    scene: Scene, core_api: client.CoreV1Api
) -> None:
    name = "reuse"
    before = _verdict((await _windows(scene, [name], scene.started))[(scene.namespace, name)])
    assert before.idle, before.reason  # the first pod, quiet for a full window
    await core_api.delete_namespaced_pod(name, scene.namespace, grace_period_seconds=0)
    await eventually(lambda: pod_gone(core_api, scene.namespace, name), what=f"{name} gone")
    started = await _start(core_api, scene.namespace, name, scene.node)

    async def new_samples() -> list[GpuWindow] | None:
        windows = (await _windows(scene, [name], {name: started}))[(scene.namespace, name)]
        fresh = windows and windows[0].history_s is not None and windows[0].history_s >= 3.0
        return windows if fresh else None

    windows = await eventually(new_samples, timeout=30, what=f"samples of the new {name}")
    # The series carry namespace and name only: the window is full of the predecessor's samples.
    assert max(w.util_samples for w in windows) >= 0.8 * WINDOW_S / SCRAPE_S
    verdict = _verdict(windows)
    assert not verdict.idle
    assert "before the window's end" in verdict.reason
