"""Allocation tracking: the GPU indices dcgm-exporter reports win over the cache's guess."""

from __future__ import annotations

from kubernetes_asyncio import client

from hack.localcluster import G2_EXPANSION, LocalCluster
from reclaim.prometheus import PrometheusClient
from scheduler.core.allocation import AllocationTracker
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for


async def test_guessed_gpus_are_corrected_from_dcgm_exporter(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])  # 0-3 and 4-7
    await core_api.create_namespaced_pod(namespace, gpu_pod("annotated", 1, scheduler_name="x"))
    await bind(core_api, namespace, "annotated", node, {"gpu-scheduler.io/gpus": "4"})
    # No annotation: the cache guesses the most used domain (GPU 5); the device plugin of the
    # fake exporter hands out the lowest free index (GPU 0).
    await core_api.create_namespaced_pod(namespace, gpu_pod("guessed", 1, scheduler_name="x"))
    await bind(core_api, namespace, "guessed", node)
    async with (
        running_daemon(cluster, settings_for(namespace)) as daemon,
        PrometheusClient(cluster.prometheus_url or "") as prometheus,
    ):
        key = f"{namespace}/guessed"
        await eventually(lambda: _counted(daemon.cache.pods, key), what="pod in the cache")
        assert daemon.cache.gpus_of(key) == (5,)
        tracker = AllocationTracker(daemon.cache, prometheus)

        async def corrected() -> bool:
            await tracker.refresh()
            return daemon.cache.gpus_of(key) == (0,)

        await eventually(corrected, what="the cache corrected from Prometheus")
        row = daemon.cache.row_of[node]
        assert daemon.cache.free_per_domain[row].tolist()[:2] == [3, 3]
        assert daemon.cache.gpus_of(f"{namespace}/annotated") == (4,)
        assert tracker.corrections == 1


async def _counted(pods: dict[str, object], key: str) -> bool:
    return key in pods


async def test_the_daemon_corrects_on_its_own_every_period_with_reclaim_off(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """The daemon's own tracker, set by `allocationTracking`, runs with a Prometheus whatever
    `reclaim.mode` is (off here); with `enabled: false` nothing is corrected."""
    (node,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])
    await core_api.create_namespaced_pod(namespace, gpu_pod("annotated", 1, scheduler_name="x"))
    await bind(core_api, namespace, "annotated", node, {"gpu-scheduler.io/gpus": "4"})
    await core_api.create_namespaced_pod(namespace, gpu_pod("guessed", 1, scheduler_name="x"))
    await bind(core_api, namespace, "guessed", node)
    key = f"{namespace}/guessed"
    reclaim = {"prometheusUrl": cluster.prometheus_url, "scrapeIntervalSeconds": 1}
    off = settings_for(namespace, reclaim=reclaim, allocationTracking={"enabled": False})
    async with running_daemon(cluster, off) as daemon:
        assert daemon.allocation is None
        await eventually(lambda: _counted(daemon.cache.pods, key), what="pod in the cache")
        assert daemon.cache.gpus_of(key) == (5,)  # the guess stands
    on = settings_for(namespace, reclaim=reclaim, allocationTracking={"periodSeconds": 1})
    async with running_daemon(cluster, on) as daemon:
        assert daemon.allocation is not None and daemon.allocation.interval == 1.0

        async def corrected() -> bool:
            return daemon.cache.gpus_of(key) == (0,)

        await eventually(corrected, what="the daemon's tracker correcting the guess")
        assert daemon.cache.gpus_of(f"{namespace}/annotated") == (4,)
        assert daemon.allocation.corrections >= 1
