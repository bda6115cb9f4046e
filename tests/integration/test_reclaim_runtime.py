"""Reclaim's runtime against the real cluster, Prometheus and the fake dcgm-exporter: budgets are
read before evicting, malformed PriorityClasses block nobody else, and the GPU indices pods
really hold replace the cache's guesses in one round, swaps included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster, NodeSpec
from reclaim.prometheus import PrometheusClient
from scheduler.core.allocation import AllocationTracker
from tests.integration.test_reclaim import (
    H200_PAIR,
    POLICY,
    holder,
    notes,
    policy,
    reclaim_settings,
    samples_for,
)
from tests.kube import bind, eventually, gpu_pod, pod_gone
from tests.scheduling import TEST_LABEL, isolated, make_nodes, running_daemon, wait_bound

H200_QUAD = NodeSpec(
    "Q", 1, gpus=4, nvlink_domains="0-1,2-3", gpu_product="NVIDIA-H200", cpu="32", memory="256Gi"
)
HUGE = "9" * 5000
FOREVER = "1" + "0" * 30


@pytest.fixture
async def runtime_classes(
    api_client: client.ApiClient, namespace: str
) -> AsyncIterator[dict[str, str]]:
    """PriorityClasses of this test (cluster-scoped, so named after the namespace): a valid
    reclaim policy, two malformed ones, and the preemptor's class."""
    scheduling = client.SchedulingV1Api(api_client)
    specs = {
        "idle-ok": (1000, policy(500)),
        "huge": (1000, {**policy(500), POLICY + "minimum-preemptable-priority": HUGE}),
        "forever": (1000, {**policy(500), POLICY + "resource-idle-seconds": FOREVER}),
        "preemptor": (500, {}),
    }
    names = {short: f"{namespace}-{short}"[:60] for short in specs}
    for short, (value, notes_) in specs.items():
        await scheduling.create_priority_class(
            {"metadata": {"name": names[short], "annotations": notes_}, "value": value}
        )
    yield names
    for name in names.values():
        await scheduling.delete_priority_class(name)


async def _preemptor(core: client.CoreV1Api, namespace: str, klass: str, gpus: int) -> None:
    manifest = gpu_pod(
        "preemptor",
        gpus,
        scheduler_name=namespace,
        priority_class=klass,
        node_selector={TEST_LABEL: namespace},
    )
    await core.create_namespaced_pod(namespace, manifest)


async def test_budget_guarded_node_is_left_alone_when_another_node_can_make_room(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    runtime_classes: dict[str, str],
) -> None:
    # Node a sorts first: without budgets it would be tried first and its eviction refused.
    first, second = await make_nodes(
        core_api,
        [
            replace(isolated(H200_PAIR, namespace), type_name=f"n{namespace[-6:]}-a"),
            replace(isolated(H200_PAIR, namespace), type_name=f"n{namespace[-6:]}-b"),
        ],
    )
    klass = runtime_classes["idle-ok"]
    labels = {"app": "guarded"}
    await holder(core_api, namespace, "guarded", first, klass, "constant:util=0", labels=labels)
    await holder(core_api, namespace, "free", second, klass, "constant:util=0")
    policy_api = client.PolicyV1Api(api_client)
    await policy_api.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    )

    async def budget_counted() -> bool:  # the disruption controller's verdict: none allowed
        pdb = await policy_api.read_namespaced_pod_disruption_budget("keep", namespace)
        return pdb.status is not None and pdb.status.current_healthy == 1

    await eventually(budget_counted, what="the budget's status")
    await samples_for(cluster.prometheus_url or "", namespace, ["guarded", "free"])
    await _preemptor(core_api, namespace, runtime_classes["preemptor"], 2)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        stats = daemon.reclaimer.stats
        plan = await eventually(
            lambda: notes(core_api, namespace, "preemptor", "ReclaimIdleGPUs"),
            what="the preemptor's event",
        )
    assert bound["spec"]["nodeName"] == second
    assert stats.evictions == {"evicted": 1}, "nothing was tried on the guarded node"
    assert plan == [f"reclaiming 2 GPUs on node {second} from 1 idle pod(s)"]
    assert not await pod_gone(core_api, namespace, "guarded")
    assert await pod_gone(core_api, namespace, "free")


async def _held(
    core: client.CoreV1Api, namespace: str, name: str, node: str, klass: str, gpu: int
) -> None:
    """An idle 1-GPU pod on GPU `gpu` of `node`, bound by another scheduler."""
    manifest = gpu_pod(
        name,
        1,
        scheduler_name="someone-else",
        priority_class=klass,
        annotations={"fake-dcgm.gpu-scheduler.io/usage": "constant:util=0"},
    )
    await core.create_namespaced_pod(namespace, manifest)
    await bind(core, namespace, name, node, {"gpu-scheduler.io/gpus": str(gpu)})


async def test_malformed_priority_classes_block_no_valid_reclaim(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    runtime_classes: dict[str, str],
) -> None:
    (node,) = await make_nodes(core_api, [isolated(H200_QUAD, namespace)])
    # GPU 0: a pod of the 5000-digit class; GPU 1: of the 10^30 s class; GPU 2: valid and idle;
    # GPU 3 free. The 2-GPU preemptor fits once the valid pod is gone (GPUs 2-3, one domain).
    await _held(core_api, namespace, "huge", node, runtime_classes["huge"], 0)
    await _held(core_api, namespace, "forever", node, runtime_classes["forever"], 1)
    await _held(core_api, namespace, "valid", node, runtime_classes["idle-ok"], 2)
    await samples_for(cluster.prometheus_url or "", namespace, ["huge", "forever", "valid"])
    await _preemptor(core_api, namespace, runtime_classes["preemptor"], 2)
    events = client.EventsV1Api(api_client)

    async def invalid_note(klass: str) -> str | None:
        found = await events.list_namespaced_event(
            "default", field_selector=f"regarding.name={klass}"
        )
        notes = [e.note for e in found.items if e.reason == "InvalidReclaimPolicy"]
        return notes[0] if notes else None

    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        stats = daemon.reclaimer.stats
        huge = await eventually(lambda: invalid_note(runtime_classes["huge"]), what="event")
        forever = await eventually(lambda: invalid_note(runtime_classes["forever"]), what="event")
    assert bound["spec"]["nodeName"] == node
    assert stats.evictions == {"evicted": 1}
    assert "internal_error" not in stats.skips and "prometheus_unavailable" not in stats.skips
    assert await pod_gone(core_api, namespace, "valid")
    assert not await pod_gone(core_api, namespace, "huge")
    assert not await pod_gone(core_api, namespace, "forever")
    assert POLICY + "minimum-preemptable-priority" in huge
    assert '"' + "9" * 64 + '..."' in huge and len(huge) < 1000
    assert POLICY + "resource-idle-seconds" in forever and FOREVER in forever


async def test_reversed_gpus_are_corrected_in_one_round(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """Four 1-GPU pods placed by another scheduler without GPU annotations: the device plugin
    (the fake exporter) hands out indices in creation order (d, c, b, a -> 0, 1, 2, 3), the
    cache guesses in name order (a, b, c, d -> 0, 1, 2, 3): two swaps, corrected at once."""
    (node,) = await make_nodes(core_api, [isolated(H200_QUAD, namespace)])
    for name in ("d", "c", "b", "a"):
        await core_api.create_namespaced_pod(namespace, gpu_pod(name, 1, scheduler_name="x"))
        await bind(core_api, namespace, name, node)
        await asyncio.sleep(1.1)  # creationTimestamp has whole seconds: keep the order strict
    truth = {"d": (0,), "c": (1,), "b": (2,), "a": (3,)}
    async with (
        running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon,
        PrometheusClient(cluster.prometheus_url or "") as prometheus,
    ):

        async def all_reported() -> bool:
            holders = await prometheus.gpu_holders()
            seen = {
                pod: gpu
                for (where, gpu), pods in holders.items()
                if where == node
                for (ns, pod) in pods
                if ns == namespace
            }
            return seen == {name: gpus[0] for name, gpus in truth.items()}

        await eventually(all_reported, what="every holder scraped")
        cache = daemon.cache

        def held() -> dict[str, tuple[int, ...]]:
            return {name: cache.gpus_of(f"{namespace}/{name}") for name in truth}

        assert held() != truth, "the cache's guess must differ for this test to mean anything"
        tracker = AllocationTracker(cache, prometheus, interval=3600)
        await tracker.refresh()
        assert held() == truth
        assert await tracker.refresh() == 0
        row = cache.row_of[node]
        assert cache.free_per_domain[row].tolist()[:2] == [0, 0]
