"""Reclaim against the real cluster, Prometheus and fake dcgm-exporter: idle pods are evicted for
a pending pod; working, protected or unmeasured pods never are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster, NodeSpec
from hack.localcluster.cluster import free_port
from scheduler.daemon import Daemon
from tests.kube import bind, eventually, gpu_pod, pod_gone, pod_phase
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

WINDOW_S = 10
H200_PAIR = NodeSpec(
    "H", 1, gpus=2, nvlink_domains="0-1", gpu_product="NVIDIA-H200", cpu="32", memory="256Gi"
)
POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"


def policy(minimum: int, toleration: int = 0, threshold: float = 10.0) -> dict[str, str]:
    return {
        POLICY + "minimum-preemptable-priority": str(minimum),
        POLICY + "toleration-seconds": str(toleration),
        POLICY + "resource-idle-seconds": str(WINDOW_S),
        POLICY + "resource-idle-usage-threshold": str(threshold),
    }


@pytest.fixture
async def classes(api_client: client.ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    """PriorityClasses of this test (cluster-scoped, so named after the namespace)."""
    scheduling = client.SchedulingV1Api(api_client)
    specs = {
        "idle-ok": (1000, policy(500)),
        "strict": (1000, policy(500, threshold=5.0)),
        "tolerant": (1000, policy(500, toleration=3600)),
        "exclusive": (1000, policy(100_000)),
        "protected": (1000, {}),
        "preemptor": (500, {}),
    }
    names = {short: f"{namespace}-{short}"[:60] for short in specs}
    for short, (value, class_annotations) in specs.items():
        await scheduling.create_priority_class(
            {"metadata": {"name": names[short], "annotations": class_annotations}, "value": value}
        )
    yield names
    for name in names.values():
        await scheduling.delete_priority_class(name)


def reclaim_settings(cluster: LocalCluster, namespace: str, **reclaim: Any) -> Any:
    values = {
        "mode": "enforce",
        "prometheusUrl": cluster.prometheus_url,
        "scrapeIntervalSeconds": 1,
        "cooldownSeconds": 30,
        **reclaim,
    }
    return settings_for(namespace, reclaim=values, queue={"unschedulableFlushSeconds": 1})


async def holder(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    node: str,
    priority_class: str,
    usage: str,
    gpus: int = 2,
    labels: dict[str, str] | None = None,
) -> None:
    """A pod already running on `node` with scripted GPU usage (bound by another scheduler)."""
    manifest = gpu_pod(
        name,
        gpus,
        scheduler_name="someone-else",
        priority_class=priority_class,
        labels=labels,
        annotations={
            "fake-dcgm.gpu-scheduler.io/usage": usage,
            "fake-dcgm.gpu-scheduler.io/fb-used-mib": "20480",
        },
    )
    await core.create_namespaced_pod(namespace, manifest)
    await bind(
        core, namespace, name, node, {"gpu-scheduler.io/gpus": ",".join(map(str, range(gpus)))}
    )

    async def running() -> bool:
        return await pod_phase(core, namespace, name) == "Running"

    await eventually(running, what=f"{name} Running")


async def preemptor(
    core: client.CoreV1Api, namespace: str, classes: dict[str, str], gpus: int = 2
) -> None:
    manifest = gpu_pod(
        "preemptor",
        gpus,
        scheduler_name=namespace,
        priority_class=classes["preemptor"],
        node_selector={TEST_LABEL: namespace},
    )
    await core.create_namespaced_pod(namespace, manifest)


async def samples_for(prometheus_url: str, namespace: str, pods: list[str]) -> None:
    """Wait until Prometheus holds a full window of utilization samples for every pod, and a
    little more: the idle verdict judges only samples taken after a pod started, so a pod must
    have held its GPU for longer than the window (the exporter shows it only once bound)."""
    span = WINDOW_S + 3

    async def full() -> bool:
        async with aiohttp.ClientSession() as session:
            for pod in pods:
                query = (
                    f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",'
                    f'pod="{pod}"}}[{span}s])'
                )
                async with session.get(
                    f"{prometheus_url}/api/v1/query", params={"query": query}
                ) as response:
                    result = (await response.json())["data"]["result"]
                if not result or float(result[0]["value"][1]) < span - 1:
                    return False
        return True

    await eventually(full, timeout=WINDOW_S * 6, what="a full window of samples")


async def notes(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> list[str] | None:
    """The notes of `name`'s events of `reason`; None when there are none yet, so that
    `eventually(lambda: notes(...))` waits for the first one (an empty list would end it)."""
    found = [
        e["note"]
        for e in await pod_events(core.api_client, namespace, name)
        if e["reason"] == reason
    ]
    return found or None


async def attempt_finished(daemon: Daemon) -> bool:
    stats = daemon.reclaimer.stats
    return stats.attempts >= 1 and (sum(stats.skips.values()) + sum(stats.evictions.values())) >= 1


async def test_idle_pod_is_evicted_for_a_lower_priority_preemptor(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    """The seed's inversion example: an idle priority-1000 pod (minimum 500) is reclaimed for a
    priority-500 pod, which is then bound on the freed GPUs."""
    (node,) = await make_nodes(core_api, [isolated(H200_PAIR, namespace)])
    await holder(core_api, namespace, "notebook", node, classes["idle-ok"], "constant:util=0")
    await samples_for(cluster.prometheus_url or "", namespace, ["notebook"])
    await preemptor(core_api, namespace, classes)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        assert bound["spec"]["nodeName"] == node
        assert await pod_gone(core_api, namespace, "notebook")
        assert daemon.reclaimer.stats.evictions["evicted"] == 1
        victim_notes = await eventually(
            lambda: notes(core_api, namespace, "notebook", "Reclaimed"), what="victim event"
        )
        preemptor_notes = await eventually(
            lambda: notes(core_api, namespace, "preemptor", "ReclaimIdleGPUs"),
            what="preemptor event",
        )
    assert victim_notes[0].startswith("evicted: GPU usage ")
    assert f"< 10 % over {WINDOW_S} s" in victim_notes[0]
    assert victim_notes[0].endswith("reclaimed for a pod of priority 500")
    assert "preemptor" not in victim_notes[0]
    assert preemptor_notes == [f"reclaiming 2 GPUs on node {node} from 1 idle pod(s)"]


async def _scrape_phase(prometheus_url: str, node: str) -> float:
    """Offset (0..1 s) of Prometheus's scrapes within each second, from a node's samples."""
    query = f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="0"}}[5s]'
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{prometheus_url}/api/v1/query", params={"query": query}) as response,
    ):
        values = (await response.json())["data"]["result"][0]["values"]
    return float(values[-1][0]) % 1.0


async def test_working_and_protected_pods_are_never_evicted(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    specs = [
        replace(isolated(H200_PAIR, namespace), type_name=f"n{namespace[-6:]}-{i}")
        for i in range(5)
    ]
    nodes = await make_nodes(core_api, specs)
    await eventually(lambda: _has_series(cluster, nodes[1]), what="the node's GPUs scraped")
    # Busy 10 % of the time, but never when Prometheus scrapes: the gauge reads 0 in every
    # sample, as the H200 recording's data-loader-bound job did.
    phase = (await _scrape_phase(cluster.prometheus_url or "", nodes[1]) + 0.45) % 1.0
    aliased = f"periodic:period=1,duty=0.1,level=100,phase={phase:.3f}"
    cases = {
        "busy": (classes["idle-ok"], "constant:util=70"),
        "aliased": (classes["strict"], aliased),
        "tolerated": (classes["tolerant"], "constant:util=0"),
        "exclusive": (classes["exclusive"], "constant:util=0"),
        "protected": (classes["protected"], "constant:util=0"),
    }
    for node, (name, (priority_class, usage)) in zip(nodes, cases.items(), strict=True):
        await holder(core_api, namespace, name, node, priority_class, usage)
    await samples_for(cluster.prometheus_url or "", namespace, list(cases))
    await preemptor(core_api, namespace, classes)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        await eventually(lambda: attempt_finished(daemon), what="a reclaim attempt")
        stats = daemon.reclaimer.stats
        assert stats.evictions == {}
        assert stats.skips == {"no_idle_pods": 1}
    for name in cases:
        assert not await pod_gone(core_api, namespace, name)
    assert (await pod_json(core_api, namespace, "preemptor"))["spec"].get("nodeName") is None
    mean_util = await _query(
        cluster.prometheus_url or "",
        f'avg_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",pod="aliased"}}[{WINDOW_S}s])',
    )
    assert max(float(s["value"][1]) for s in mean_util) == 0.0  # the gauge saw nothing


async def _query(prometheus_url: str, promql: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{prometheus_url}/api/v1/query", params={"query": promql}) as response,
    ):
        result: list[dict[str, Any]] = (await response.json())["data"]["result"]
    return result


async def _has_series(cluster: LocalCluster, node: str) -> bool:
    return bool(
        await _query(cluster.prometheus_url or "", f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}"}}')
    )


async def test_no_eviction_when_prometheus_is_down(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    (node,) = await make_nodes(core_api, [isolated(H200_PAIR, namespace)])
    await holder(core_api, namespace, "notebook", node, classes["idle-ok"], "constant:util=0")
    await preemptor(core_api, namespace, classes)
    settings = reclaim_settings(cluster, namespace, prometheusUrl=f"http://127.0.0.1:{free_port()}")
    async with running_daemon(cluster, settings) as daemon:
        await eventually(lambda: attempt_finished(daemon), what="a reclaim attempt")
        assert daemon.reclaimer.stats.skips == {"prometheus_unavailable": 1}
        skipped = await eventually(
            lambda: notes(core_api, namespace, "preemptor", "ReclaimSkipped"), what="skip event"
        )
    assert skipped[0].startswith("reclaim skipped: Prometheus query failed")
    assert not await pod_gone(core_api, namespace, "notebook")


async def test_pdb_blocks_one_node_and_the_next_is_used(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],
) -> None:
    first, second = await make_nodes(
        core_api,
        [
            replace(isolated(H200_PAIR, namespace), type_name=f"n{namespace[-6:]}-a"),
            replace(isolated(H200_PAIR, namespace), type_name=f"n{namespace[-6:]}-b"),
        ],
    )
    await holder(
        core_api,
        namespace,
        "guarded",
        first,
        classes["idle-ok"],
        "constant:util=0",
        labels={"app": "guarded"},
    )
    await holder(core_api, namespace, "free", second, classes["idle-ok"], "constant:util=0")
    await client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    await samples_for(cluster.prometheus_url or "", namespace, ["guarded", "free"])
    await preemptor(core_api, namespace, classes)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        stats = daemon.reclaimer.stats
    assert bound["spec"]["nodeName"] == second
    assert stats.evictions == {"evicted": 1}  # the guarded node is tried last
    assert not await pod_gone(core_api, namespace, "guarded")
    assert await pod_gone(core_api, namespace, "free")


async def test_dry_run_reports_and_cooldown_limits_attempts(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    (node,) = await make_nodes(core_api, [isolated(H200_PAIR, namespace)])
    await holder(core_api, namespace, "notebook", node, classes["idle-ok"], "constant:util=0")
    await samples_for(cluster.prometheus_url or "", namespace, ["notebook"])
    await preemptor(core_api, namespace, classes)
    async with running_daemon(
        cluster, reclaim_settings(cluster, namespace, mode="dry-run")
    ) as daemon:
        would = await eventually(
            lambda: notes(core_api, namespace, "notebook", "WouldReclaim"), what="would-evict event"
        )

        async def retried() -> bool:
            return daemon.scheduler.unschedulable >= 4

        await eventually(retried, what="the preemptor retried several times")
        assert daemon.reclaimer.stats.attempts == 1  # within the 30 s cooldown
        assert daemon.reclaimer.stats.evictions == {"dry-run": 1}
    assert would[0].startswith("would evict: GPU usage")
    assert not await pod_gone(core_api, namespace, "notebook")
    assert (await pod_json(core_api, namespace, "preemptor"))["spec"].get("nodeName") is None


async def test_no_eviction_where_mig_profiles_cannot_host_the_preemptor(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    mig = replace(
        isolated(H200_PAIR, namespace),
        gpus=0,
        nvlink_domains=None,
        mig={"1g.18gb": 7},
        annotations={
            "fake-dcgm.gpu-scheduler.io/profiling": "true",
            "fake-dcgm.gpu-scheduler.io/mig-gpu": "0",
        },
    )
    (node,) = await make_nodes(core_api, [mig])
    slices = gpu_pod("slices", 0, scheduler_name="someone-else", priority_class=classes["idle-ok"])
    slices["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.18gb": "7"}
    await core_api.create_namespaced_pod(namespace, slices)
    await bind(core_api, namespace, "slices", node)
    await eventually(lambda: _has_pod_series(cluster, namespace, "slices"), what="MIG series")
    wants = gpu_pod(
        "preemptor",
        0,
        scheduler_name=namespace,
        priority_class=classes["preemptor"],
        node_selector={TEST_LABEL: namespace},
    )
    wants["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-3g.71gb": "1"}
    await core_api.create_namespaced_pod(namespace, wants)
    await asyncio.sleep(WINDOW_S + 2)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        await eventually(lambda: attempt_finished(daemon), what="a reclaim attempt")
        stats = daemon.reclaimer.stats
    assert stats.evictions == {}
    assert stats.skips == {"no_fitting_victim_set": 1}
    assert not await pod_gone(core_api, namespace, "slices")


async def _has_pod_series(cluster: LocalCluster, namespace: str, pod: str) -> bool:
    found = await _query(
        cluster.prometheus_url or "",
        f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{namespace="{namespace}",pod="{pod}"}}',
    )
    return bool(found)


async def test_an_invalid_policy_is_reported_and_protects_its_pods(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str
) -> None:
    scheduling = client.SchedulingV1Api(api_client)
    name = f"{namespace}-broken"[:60]
    broken = {**policy(500), POLICY + "toleration-seconds": "-5"}
    await scheduling.create_priority_class(
        {"metadata": {"name": name, "annotations": broken}, "value": 10}
    )
    events = client.EventsV1Api(api_client)
    try:
        async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:

            async def reported() -> str | None:
                found = await events.list_namespaced_event(
                    "default", field_selector=f"regarding.name={name}"
                )
                notes = [e.note for e in found.items if e.reason == "InvalidReclaimPolicy"]
                return notes[0] if notes else None

            note = await eventually(reported, what="an InvalidReclaimPolicy event")
            assert daemon.policies.policy(name).status.value == "invalid"
    finally:
        await scheduling.delete_priority_class(name)
    assert POLICY + "toleration-seconds" in note and '"-5"' in note
    assert note.endswith("(its pods are not reclaimed)")
