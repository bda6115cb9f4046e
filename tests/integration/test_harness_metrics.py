"""Prometheus scrapes the fake dcgm-exporter, which follows the pods bound in the cluster."""

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from tests.kube import bind, eventually, gpu_pod, pod_phase

WINDOW_S = 30
DUTY = 0.3
USAGE = f"periodic:period=10,duty={DUTY},level=100"


async def _query(prometheus_url: str, promql: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{prometheus_url}/api/v1/query", params={"query": promql}) as response,
    ):
        body = await response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def test_prometheus_sees_a_scripted_duty_cycle(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, seed_nodes: list[str]
) -> None:
    assert cluster.prometheus_url is not None
    manifest = gpu_pod("duty", gpus=1, annotations={"fake-dcgm.gpu-scheduler.io/usage": USAGE})
    await core_api.create_namespaced_pod(namespace, manifest)
    await bind(core_api, namespace, "duty", "g2-expansion-0", {"gpu-scheduler.io/gpus": "5"})

    async def running() -> bool:
        return await pod_phase(core_api, namespace, "duty") == "Running"

    await eventually(running, what="duty pod Running")
    selector = f'namespace="{namespace}",pod="duty"'

    async def full_window() -> bool:
        counted = await _query(
            cluster.prometheus_url or "",
            f"count_over_time(DCGM_FI_DEV_GPU_UTIL{{{selector}}}[{WINDOW_S}s])",
        )
        return bool(counted) and float(counted[0]["value"][1]) >= WINDOW_S - 2

    await eventually(full_window, timeout=WINDOW_S * 4, what="a full window of samples")

    series = await _query(cluster.prometheus_url, f"DCGM_FI_DEV_GPU_UTIL{{{selector}}}")
    labels = series[0]["metric"]
    assert labels["gpu"] == "5"
    assert labels["Hostname"] == "g2-expansion-0"
    assert labels["device"] == "nvidia5"
    assert labels["modelName"] == "NVIDIA H200"
    assert labels["container"] == "main"
    assert labels["UUID"].startswith("GPU-")

    mean_util = await _query(
        cluster.prometheus_url, f"avg_over_time(DCGM_FI_DEV_GPU_UTIL{{{selector}}}[{WINDOW_S}s])"
    )
    assert abs(float(mean_util[0]["value"][1]) - DUTY * 100) <= 8

    # The energy counter integrates power exactly: its increase gives the window's mean power.
    energy = await _query(
        cluster.prometheus_url,
        f"increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{selector}}}[{WINDOW_S}s])"
        f" / {WINDOW_S} / 1000",
    )
    mean_power = await _query(
        cluster.prometheus_url,
        f"avg_over_time(DCGM_FI_DEV_POWER_USAGE{{{selector}}}[{WINDOW_S}s])",
    )
    energy_watts = float(energy[0]["value"][1])
    sampled_watts = float(mean_power[0]["value"][1])
    assert abs(energy_watts - sampled_watts) / sampled_watts < 0.2


async def test_every_gpu_of_a_node_is_exported(
    cluster: LocalCluster, seed_nodes: list[str]
) -> None:
    assert cluster.prometheus_url is not None

    async def g1_series() -> list[dict[str, Any]] | None:
        found = await _query(cluster.prometheus_url or "", 'DCGM_FI_DEV_GPU_UTIL{Hostname="g1-0"}')
        return found if len(found) == 2 else None

    series = await eventually(g1_series, what="both GPUs of g1-0 scraped")
    assert sorted(s["metric"]["gpu"] for s in series) == ["0", "1"]
