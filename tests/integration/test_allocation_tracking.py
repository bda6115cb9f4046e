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
