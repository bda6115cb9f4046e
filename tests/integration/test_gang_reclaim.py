"""Gang-aware reclaim on the real API server, Prometheus and fake dcgm-exporter: a gang that
does not fit gets room by evicting idle pods across nodes, only when the whole gang then fits;
a victim gang (disruptionMode all) is evicted whole, with DisruptionTarget on its PodGroup, or
not at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.integration.test_gangs import condition_is, create_group, member
from tests.integration.test_reclaim import (  # noqa: F401  (the classes fixture)
    H200_PAIR,
    attempt_finished,
    classes,
    holder,
    notes,
    reclaim_settings,
    samples_for,
)
from tests.kube import bind, eventually, gpu_pod, pod_gone, pod_phase
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    running_daemon,
    settings_for,
    wait_bound,
)

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"


async def condition_of(
    api_client: client.ApiClient, namespace: str, name: str, kind: str
) -> dict[str, Any] | None:
    custom = client.CustomObjectsApi(api_client)
    response = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
    )
    body = json.loads(await response.read())
    for condition in (body.get("status") or {}).get("conditions") or ():
        if condition["type"] == kind:
            found: dict[str, Any] = condition
            return found
    return None


async def gang_holder(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    node: str,
    priority_class: str,
    usage: str,
    group: str,
) -> None:
    """A running 2-GPU member of gang `group`, bound by another scheduler."""
    manifest = gpu_pod(
        name,
        2,
        scheduler_name="someone-else",
        priority_class=priority_class,
        annotations={
            "fake-dcgm.gpu-scheduler.io/usage": usage,
            "fake-dcgm.gpu-scheduler.io/fb-used-mib": "20480",
        },
    )
    manifest["spec"]["schedulingGroup"] = {"podGroupName": group}
    await core.create_namespaced_pod(namespace, manifest)
    await bind(core, namespace, name, node, {"gpu-scheduler.io/gpus": "0,1"})

    async def running() -> bool:
        return await pod_phase(core, namespace, name) == "Running"

    await eventually(running, what=f"{name} Running")


def gang_member(namespace: str, name: str, priority_class: str, group: str = "pg") -> Any:
    pod = member(namespace, name, 2, group)
    pod["spec"]["priorityClassName"] = priority_class
    return pod


async def still_there(core: client.CoreV1Api, namespace: str, names: list[str]) -> list[str]:
    return [n for n in names if not await pod_gone(core, namespace, n)]


async def test_idle_pods_on_two_nodes_make_room_for_the_whole_gang(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    nodes = await make_nodes(core_api, [isolated(H200_PAIR, namespace, count=2)])
    for i, node in enumerate(nodes):
        await holder(core_api, namespace, f"idle{i}", node, classes["idle-ok"], "constant:util=0")
    await samples_for(cluster.prometheus_url or "", namespace, ["idle0", "idle1"])
    await create_group(api_client, namespace, "pg", 2)
    for name in ("w0", "w1"):
        await core_api.create_namespaced_pod(
            namespace, gang_member(namespace, name, classes["preemptor"])
        )
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        bound = [await wait_bound(core_api, namespace, n) for n in ("w0", "w1")]
        assert sorted(p["spec"]["nodeName"] for p in bound) == sorted(nodes)
        assert await still_there(core_api, namespace, ["idle0", "idle1"]) == []
        assert daemon.gang_reclaimer.outcomes.get("evicted") == 1
        await condition_is(api_client, namespace, "pg", "True")
        planned = await eventually(
            lambda: notes(core_api, namespace, "w0", "ReclaimIdleGPUs"), what="gang event"
        )
    assert planned[0].startswith("gang pg: reclaiming 4 GPUs on 2 node(s) ")
    assert planned[0].endswith("from 2 idle pod(s) for minCount 2 members")


async def test_a_plan_that_would_leave_the_gang_partial_evicts_nothing(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    nodes = await make_nodes(core_api, [isolated(H200_PAIR, namespace, count=2)])
    await holder(core_api, namespace, "idle", nodes[0], classes["idle-ok"], "constant:util=0")
    await holder(core_api, namespace, "busy", nodes[1], classes["idle-ok"], "constant:util=70")
    await samples_for(cluster.prometheus_url or "", namespace, ["idle", "busy"])
    await create_group(api_client, namespace, "pg", 2)
    for name in ("w0", "w1"):
        await core_api.create_namespaced_pod(
            namespace, gang_member(namespace, name, classes["preemptor"])
        )
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:

        async def refused() -> bool:
            return daemon.gang_reclaimer.outcomes.get("refused", 0) >= 1

        await eventually(refused, timeout=60, what="the gang plan refused")
        refusals = await eventually(
            lambda: notes(core_api, namespace, "pg", "FailedScheduling"), what="PodGroup event"
        )
        skipped = await eventually(
            lambda: notes(core_api, namespace, "w0", "ReclaimSkipped"), what="member event"
        )
        assert await still_there(core_api, namespace, ["idle", "busy"]) == ["idle", "busy"]
        assert daemon.reclaimer.stats.evictions == {}
        assert daemon.scheduler.bound == 0
    refusal = [n for n in refusals if "nothing evicted" in n]
    assert refusal, refusals
    assert refusal[0].startswith(
        "gang pg: preemption: no plan lets minCount 2 members fit, nothing evicted: "
    )
    assert refusal[0] in skipped


async def _victim_gang(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    names: dict[str, str],
    second_usage: str,
) -> list[str]:
    """Two 2-GPU nodes, each full with a member of gang `old` (disruptionMode all): old0 idle,
    old1 with `second_usage`; a pending 2-GPU pod of lower priority than both."""
    nodes = await make_nodes(core_api, [isolated(H200_PAIR, namespace, count=2)])
    await create_group(api_client, namespace, "old", 2, disrupt_all=True)
    usages = ["constant:util=0", second_usage]
    for i, (node, usage) in enumerate(zip(nodes, usages, strict=True)):
        await gang_holder(core_api, namespace, f"old{i}", node, names["idle-ok"], usage, "old")
    await samples_for(cluster.prometheus_url or "", namespace, ["old0", "old1"])
    manifest = gpu_pod(
        "solo",
        2,
        scheduler_name=namespace,
        priority_class=names["preemptor"],
        node_selector={TEST_LABEL: namespace},
    )
    await core_api.create_namespaced_pod(namespace, manifest)
    return nodes


async def test_a_victim_gang_with_disruption_mode_all_is_evicted_whole(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    await _victim_gang(cluster, core_api, api_client, namespace, classes, "constant:util=0")
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)):
        await wait_bound(core_api, namespace, "solo")
        gone = await eventually(
            lambda: _all_gone(core_api, namespace, ["old0", "old1"]), what="old gang gone"
        )
        assert gone
        condition = await condition_of(api_client, namespace, "old", "DisruptionTarget")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "PreemptionByScheduler")
    assert condition["message"] == f"reclaim: evicted to make room for pod {namespace}/solo"


async def _all_gone(core: client.CoreV1Api, namespace: str, names: list[str]) -> bool:
    return await still_there(core, namespace, names) == []


async def test_a_victim_gang_with_a_busy_member_is_not_touched(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    await _victim_gang(cluster, core_api, api_client, namespace, classes, "constant:util=70")
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        await eventually(lambda: attempt_finished(daemon), what="one reclaim attempt")
        assert daemon.reclaimer.stats.evictions == {}
        assert await still_there(core_api, namespace, ["old0", "old1"]) == ["old0", "old1"]
        assert await condition_of(api_client, namespace, "old", "DisruptionTarget") is None


async def test_bindings_refused_by_the_api_server_set_scheduler_error(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The scheduler runs with the manifests' RBAC minus pods/binding: every Binding is refused
    (403), so the gang's PodGroup says SchedulerError with the API server's words."""
    assert cluster.binaries is not None
    documents = rbac_documents(namespace)
    for document in documents:
        for rule in document.get("rules") or ():  # type: ignore[attr-defined]
            rule["resources"] = [r for r in rule["resources"] if r != "pods/binding"]
    kubeconfig = await scheduler_kubeconfig(cluster, core_api, namespace, documents, tmp_path)
    await make_nodes(core_api, [isolated(G2, namespace)])  # 4 GPUs: the gang fits
    await create_group(api_client, namespace, "pg", 2)
    for name in ("w0", "w1"):
        await core_api.create_namespaced_pod(namespace, member(namespace, name, 1))
    settings = settings_for(namespace, binding={"timeoutSeconds": 2})
    async with running_daemon(cluster, settings, kubeconfig) as daemon:
        condition = await condition_is(api_client, namespace, "pg", "False")
        assert daemon.scheduler.bound == 0
    assert condition["reason"] == "SchedulerError"
    assert condition["message"].startswith("gang pg: binding 2 member(s) failed, 0 of minCount 2")
    assert "forbidden" in condition["message"]
