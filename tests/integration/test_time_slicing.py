"""Time-sliced GPUs of the device plugin on the real API server (+ Prometheus and the fake
dcgm-exporter): replicas packed on one physical GPU or spread over four, and idle reclaim of a
shared GPU that takes only an idle sharer, and only when the evidence tells sharers apart."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client

from hack.fake_dcgm.holders import PER_PROCESS_ANNOTATION
from hack.localcluster import T8, LocalCluster
from tests.integration.test_reclaim import (  # noqa: F401  (classes: the fixture)
    WINDOW_S,
    attempt_finished,
    classes,
    holder,
    notes,
    preemptor,
    reclaim_settings,
    samples_for,
)
from tests.kube import eventually, pod_gone
from tests.scheduling import (
    gpus_of,
    isolated,
    make_nodes,
    our_pod,
    running_daemon,
    settings_for,
    wait_bound,
)

ONE_GPU_TWO_REPLICAS = replace(T8, type_name="T1", gpus=1, nvlink_domains="0", replicas=2)


async def place_four(
    cluster: LocalCluster, core: client.CoreV1Api, namespace: str, policy: str
) -> list[list[int]]:
    """Four one-replica pods on a fresh T8 (8 H100 x 4 replicas) under `policy`: their
    gpu-scheduler.io/gpus annotations."""
    [node] = await make_nodes(core, [isolated(T8, namespace)])
    settings = settings_for(namespace, sharing={"timeSlicedPlacement": policy})
    async with running_daemon(cluster, settings):
        for i in range(4):
            pod: Any = our_pod(namespace, f"p{i}", gpus=1)
            await core.create_namespaced_pod(namespace, pod)
        bound = [await wait_bound(core, namespace, f"p{i}") for i in range(4)]
    assert {p["spec"]["nodeName"] for p in bound} == {node}
    return [gpus_of(p) for p in bound]


async def test_pack_puts_four_replicas_on_one_gpu(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    assert await place_four(cluster, core_api, namespace, "pack") == [[0], [0], [0], [0]]


async def test_spread_puts_four_replicas_on_four_gpus(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    placed = await place_four(cluster, core_api, namespace, "spread")
    assert sorted(g for gpus in placed for g in gpus) == [0, 1, 2, 3]


async def two_sharers(core: client.CoreV1Api, namespace: str, node: str, klass: str) -> None:
    """An idle (0 %) and a busy (70 %) pod holding the two replicas of GPU 0 of `node`."""
    for name, usage in (("idle", "constant:util=0"), ("busy", "constant:util=70")):
        await holder(core, namespace, name, node, klass, usage, gpus=1)


async def test_sharers_judged_by_the_gpus_usage_are_both_busy(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    """By default every sharer's series carry the GPU's usage (70 % util, the busy sharer's
    power): the idle sharer cannot be told apart, so nothing is evicted."""
    [node] = await make_nodes(core_api, [isolated(ONE_GPU_TWO_REPLICAS, namespace)])
    await two_sharers(core_api, namespace, node, classes["idle-ok"])
    await samples_for(cluster.prometheus_url or "", namespace, ["idle", "busy"])
    await preemptor(core_api, namespace, classes, gpus=1)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        await eventually(lambda: attempt_finished(daemon), what="a reclaim attempt")
        evictions = sum(daemon.reclaimer.stats.evictions.values())
        skips = dict(daemon.reclaimer.stats.skips)
    assert evictions == 0
    assert skips.get("no_idle_pods", 0) >= 1, skips
    assert not await pod_gone(core_api, namespace, "idle")
    assert not await pod_gone(core_api, namespace, "busy")


async def test_per_process_attribution_evicts_only_the_idle_sharer(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    """The exporter attributes the shared GPU's utilization per process: the idle sharer's own
    series reads 0 %, the busy one's 70 %; the verdict uses each sharer's own utilization only
    (power and energy are the GPU's, every sharer's), so the idle sharer goes, the busy one
    stays, and the preemptor takes the freed replica of GPU 0."""
    spec = replace(ONE_GPU_TWO_REPLICAS, annotations={PER_PROCESS_ANNOTATION: "true"})
    [node] = await make_nodes(core_api, [isolated(spec, namespace)])
    await two_sharers(core_api, namespace, node, classes["idle-ok"])
    await samples_for(cluster.prometheus_url or "", namespace, ["idle", "busy"])
    await preemptor(core_api, namespace, classes, gpus=1)
    settings = reclaim_settings(cluster, namespace, perProcessSharedUsage=True)
    async with running_daemon(cluster, settings) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        victim_notes = await eventually(
            lambda: notes(core_api, namespace, "idle", "Reclaimed"), what="victim event"
        )
        evictions = sum(daemon.reclaimer.stats.evictions.values())
    assert bound["spec"]["nodeName"] == node and gpus_of(bound) == [0]
    assert await pod_gone(core_api, namespace, "idle")
    assert not await pod_gone(core_api, namespace, "busy")
    assert evictions == 1
    # the verdict used the sharer's own utilization only: no power or energy estimate listed
    assert victim_notes == [
        f"evicted: GPU usage 0.0 % < 10 % over {WINDOW_S} s (usage 0.0 % (util 0.0 %)); "
        "reclaimed for a pod of priority 500"
    ]
