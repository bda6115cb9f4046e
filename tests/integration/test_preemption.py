"""Priority preemption against the real cluster, Prometheus and fake dcgm-exporter: when nothing is
idle, a high-priority GPU pod preempts the lowest-priority busy pods and is bound where room was
made; idle pods go first; preemptionPolicy Never, the setting, and budgets are honoured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from hack.localcluster import LocalCluster
from scheduler.daemon import Daemon
from tests.integration.test_reclaim import H200_PAIR, notes, policy, samples_for
from tests.kube import bind, eventually, gpu_pod, pod_gone, pod_phase
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

NEVER_NOTE = "preemption: not eligible due to preemptionPolicy=Never."


@pytest.fixture
async def classes(api_client: client.ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    """PriorityClasses of this test (cluster-scoped, so named after the namespace)."""
    scheduling = client.SchedulingV1Api(api_client)
    specs: dict[str, tuple[int, dict[str, str], str]] = {
        "low": (100, policy(500), "PreemptLowerPriority"),  # reclaimable when idle
        "mid": (200, policy(500), "PreemptLowerPriority"),
        "idle-ok": (1000, policy(500), "PreemptLowerPriority"),
        "plain-low": (100, {}, "PreemptLowerPriority"),  # never reclaimed, only preempted
        "plain-mid": (200, {}, "PreemptLowerPriority"),
        "urgent": (1000, {}, "PreemptLowerPriority"),
        "never": (1000, {}, "Never"),
    }
    names = {short: f"{namespace}-{short}"[:60] for short in specs}
    for short, (value, notes_, preemption) in specs.items():
        await scheduling.create_priority_class(
            {
                "metadata": {"name": names[short], "annotations": notes_},
                "value": value,
                "preemptionPolicy": preemption,
            }
        )
    yield names
    for name in names.values():
        await scheduling.delete_priority_class(name)


def settings(cluster: LocalCluster, namespace: str, reclaim: str = "enforce", **more: Any) -> Any:
    return settings_for(
        namespace,
        reclaim={
            "mode": reclaim,
            "prometheusUrl": cluster.prometheus_url,
            "scrapeIntervalSeconds": 1,
        },
        queue={"unschedulableFlushSeconds": 1},
        **more,
    )


async def running(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    node: str,
    priority_class: str,
    usage: str = "constant:util=70",
    labels: dict[str, str] | None = None,
) -> str:
    """A 2-GPU pod bound to `node` by another scheduler, with scripted GPU usage; its UID."""
    manifest = gpu_pod(
        name,
        2,
        scheduler_name="someone-else",
        priority_class=priority_class,
        labels=labels,
        annotations={"fake-dcgm.gpu-scheduler.io/usage": usage},
    )
    created = await core.create_namespaced_pod(namespace, manifest)
    await bind(core, namespace, name, node, {"gpu-scheduler.io/gpus": "0,1"})

    async def started() -> bool:
        return await pod_phase(core, namespace, name) == "Running"

    await eventually(started, what=f"{name} Running")
    return str(created.metadata.uid)


async def pending(core: client.CoreV1Api, namespace: str, priority_class: str) -> str:
    """The 2-GPU preemptor for this test's scheduler; its UID."""
    manifest = gpu_pod(
        "preemptor",
        2,
        scheduler_name=namespace,
        priority_class=priority_class,
        node_selector={TEST_LABEL: namespace},
    )
    created = await core.create_namespaced_pod(namespace, manifest)
    return str(created.metadata.uid)


async def two_nodes(core: client.CoreV1Api, namespace: str) -> list[str]:
    return await make_nodes(core, [isolated(H200_PAIR, namespace, count=2)])


def outcome(daemon: Daemon, name: str) -> Any:
    async def seen() -> bool:
        return daemon.reclaimer.preemption.outcomes[name] >= 1

    return seen


async def test_busy_lowest_priority_pod_is_preempted_and_the_preemptor_bound_there(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    first, second = await two_nodes(core_api, namespace)
    await running(core_api, namespace, "mid", first, classes["mid"])
    await running(core_api, namespace, "low", second, classes["low"])
    await samples_for(cluster.prometheus_url or "", namespace, ["mid", "low"])
    uid = await pending(core_api, namespace, classes["urgent"])
    with capture_logs() as logs:
        async with running_daemon(cluster, settings(cluster, namespace)) as daemon:
            bound = await wait_bound(core_api, namespace, "preemptor")
            stats = daemon.reclaimer.stats
            victim_notes = await eventually(
                lambda: notes(core_api, namespace, "low", "Preempted"), what="victim event"
            )
            preemptor_notes = await eventually(
                lambda: notes(core_api, namespace, "preemptor", "Preempting"),
                what="preemptor event",
            )
    assert stats.skips["no_idle_pods"] == 1  # measured busy: idle reclaim made no room
    assert bound["spec"]["nodeName"] == second
    # The nomination is written before the eviction. The API server clears it once the pod is
    # bound (ClearingNominatedNodeNameAfterBinding, on by default since Kubernetes 1.35), so the
    # scheduler's own write log is where it shows.
    writes = [
        (e["verb"], e["path"])
        for e in logs
        if e["event"] == "write_done" and f"/namespaces/{namespace}/pods/" in e["path"]
    ]
    pods = f"/api/v1/namespaces/{namespace}/pods"
    assert writes.index(("PATCH", f"{pods}/preemptor/status")) < writes.index(
        ("POST", f"{pods}/low/eviction")
    ), writes
    assert bound["status"].get("nominatedNodeName") in (None, second)
    assert await pod_gone(core_api, namespace, "low")
    assert not await pod_gone(core_api, namespace, "mid")
    assert victim_notes == [f"Preempted by pod {uid} on node {second}"]
    assert namespace not in victim_notes[0] and "preemptor" not in victim_notes[0]
    assert preemptor_notes == [
        f"preempting 1 pod(s) on node {second} (1 of priority 100) for this pod of priority 1000"
    ]


async def test_idle_pods_are_taken_before_busy_lower_priority_pods(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    first, second = await two_nodes(core_api, namespace)
    await running(core_api, namespace, "busy", first, classes["low"])
    await running(core_api, namespace, "notebook", second, classes["idle-ok"], "constant:util=0")
    await samples_for(cluster.prometheus_url or "", namespace, ["busy", "notebook"])
    await pending(core_api, namespace, classes["urgent"])
    async with running_daemon(cluster, settings(cluster, namespace)) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        outcomes = dict(daemon.reclaimer.preemption.outcomes)
    assert bound["spec"]["nodeName"] == second
    assert await pod_gone(core_api, namespace, "notebook")
    assert not await pod_gone(core_api, namespace, "busy")
    assert outcomes == {}  # the second step never ran
    assert await notes(core_api, namespace, "busy", "Preempted") is None


async def test_preemption_policy_never_never_preempts(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    (node,) = await make_nodes(core_api, [isolated(H200_PAIR, namespace)])
    await running(core_api, namespace, "low", node, classes["plain-low"])
    await pending(core_api, namespace, classes["never"])
    spec = (await pod_json(core_api, namespace, "preemptor"))["spec"]
    assert spec["preemptionPolicy"] == "Never"  # copied from the class by admission
    async with running_daemon(cluster, settings(cluster, namespace, reclaim="off")) as daemon:
        await eventually(outcome(daemon, "never"), what="the preemption step")
        failed = await eventually(
            lambda: _with(core_api, namespace, NEVER_NOTE), what="the FailedScheduling event"
        )
        assert daemon.reclaimer.stats.evictions == {}
    # Other tests' nodes count in the total; this test's own node lacks GPUs.
    assert failed[0].startswith("0/") and "1 Insufficient nvidia.com/gpu" in failed[0]
    assert not await pod_gone(core_api, namespace, "low")
    assert (await pod_json(core_api, namespace, "preemptor"))["spec"].get("nodeName") is None


async def _with(core: client.CoreV1Api, namespace: str, ending: str) -> list[str] | None:
    found = await notes(core, namespace, "preemptor", "FailedScheduling") or []
    return [n for n in found if n.endswith(ending)] or None


async def test_setting_off_never_preempts(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, classes: dict[str, str]
) -> None:
    (node,) = await make_nodes(core_api, [isolated(H200_PAIR, namespace)])
    await running(core_api, namespace, "low", node, classes["plain-low"])
    await pending(core_api, namespace, classes["urgent"])
    off = settings(cluster, namespace, preemption={"enabled": False})
    async with running_daemon(cluster, off) as daemon:

        async def reclaim_tried() -> bool:
            return daemon.reclaimer.stats.skips["no_eligible_pods"] >= 1

        await eventually(reclaim_tried, what="the PostFilter attempt")

        async def retried() -> bool:
            return daemon.scheduler.unschedulable >= 3

        await eventually(retried, what="the preemptor retried")
        assert daemon.reclaimer.stats.evictions == {}
        assert daemon.reclaimer.preemption.outcomes == {}
    assert not await pod_gone(core_api, namespace, "low")
    assert (await pod_json(core_api, namespace, "preemptor"))["spec"].get("nodeName") is None


async def test_budget_guarded_victim_node_is_skipped_for_another(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],
) -> None:
    """The guarded pod has the lower priority, so without its budget its node would be picked;
    with it, the node whose set violates no budget is."""
    first, second = await two_nodes(core_api, namespace)
    await running(
        core_api, namespace, "guarded", first, classes["plain-low"], labels={"app": "guarded"}
    )
    await running(core_api, namespace, "other", second, classes["plain-mid"])
    await client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    await pending(core_api, namespace, classes["urgent"])
    async with running_daemon(cluster, settings(cluster, namespace, reclaim="off")) as daemon:
        bound = await wait_bound(core_api, namespace, "preemptor")
        evictions = dict(daemon.reclaimer.stats.evictions)
    assert bound["spec"]["nodeName"] == second
    assert evictions == {"evicted": 1}
    assert await pod_gone(core_api, namespace, "other")
    assert not await pod_gone(core_api, namespace, "guarded")
