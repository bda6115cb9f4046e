"""Gang scheduling on the real API server's PodGroups (scheduling.k8s.io/v1beta1): members of
a gang bind together (at least minCount) or not at all, pack on few nodes, stay on one value of
the topology label, and the PodGroup shows PodGroupInitiallyScheduled."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1, G2, G2_EXPANSION, LocalCluster
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"


async def create_group(
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    min_count: int,
    topology: str | None = None,
    disrupt_all: bool = False,
) -> None:
    """A v1beta1 gang PodGroup; `disrupt_all`: disruptionMode all (evicted as one)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    if disrupt_all:
        spec["disruptionMode"] = {"all": {}}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }
    custom = client.CustomObjectsApi(api_client)
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


async def group_condition(
    api_client: client.ApiClient, namespace: str, name: str
) -> dict[str, Any] | None:
    custom = client.CustomObjectsApi(api_client)
    response = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
    )
    body = json.loads(await response.read())
    for condition in (body.get("status") or {}).get("conditions") or ():
        if condition["type"] == "PodGroupInitiallyScheduled":
            found: dict[str, Any] = condition
            return found
    return None


async def condition_is(
    api_client: client.ApiClient, namespace: str, name: str, status: str
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        condition = await group_condition(api_client, namespace, name)
        return condition if condition and condition["status"] == status else None

    return await eventually(probe, what=f"PodGroup {name} condition {status}")


def member(namespace: str, name: str, gpus: int, group: str = "pg") -> dict[str, Any]:
    pod = our_pod(namespace, name, gpus)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


async def failed_note(api_client: client.ApiClient, namespace: str, name: str) -> str:
    async def probe() -> str | None:
        for event in await pod_events(api_client, namespace, name):
            if event["reason"] == "FailedScheduling":
                note: str = event["note"]
                return note
        return None

    return await eventually(probe, what=f"FailedScheduling on {name}")


async def node_of(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    node: str | None = (await pod_json(core, namespace, name))["spec"].get("nodeName")
    return node


async def test_gang_binds_nothing_until_all_fit_then_binds_together(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2, namespace)])  # 4 GPUs
    blocker = gpu_pod("blocker", 2, scheduler_name="nobody")
    await core_api.create_namespaced_pod(namespace, blocker)
    await bind(core_api, namespace, "blocker", node)
    await create_group(api_client, namespace, "pg", 3)
    names = ["w0", "w1", "w2"]
    for name in names:
        await core_api.create_namespaced_pod(namespace, member(namespace, name, 1))
    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        note = await failed_note(api_client, namespace, "w0")
        assert note.startswith("gang pg: only 2 of minCount 3 members fit: "), note
        condition = await condition_is(api_client, namespace, "pg", "False")
        assert (condition["reason"], condition["message"]) == ("Unschedulable", note)
        assert [await node_of(core_api, namespace, n) for n in names] == [None, None, None]
        assert daemon.scheduler.bound == 0

        await core_api.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
        for name in names:
            await wait_bound(core_api, namespace, name)
        condition = await condition_is(api_client, namespace, "pg", "True")
        assert condition["reason"] == "Scheduled"
        assert daemon.scheduler.bound == 3


async def test_members_wait_for_their_pod_group_and_min_count(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    await make_nodes(core_api, [isolated(G2, namespace)])  # 4 GPUs: 2 of 3 members fit
    await core_api.create_namespaced_pod(namespace, member(namespace, "w0", 2))
    async with running_daemon(cluster, settings_for(namespace)) as daemon:

        async def gated() -> dict[str, Any] | None:
            pod = await pod_json(core_api, namespace, "w0")
            for condition in pod["status"].get("conditions") or ():
                if condition["reason"] == "SchedulingGated":
                    found: dict[str, Any] = condition
                    return found
            return None

        condition = await eventually(gated, what="w0 held back")
        assert condition["message"] == "waiting for PodGroup pg: it does not exist"
        await create_group(api_client, namespace, "pg", 2)
        await core_api.create_namespaced_pod(namespace, member(namespace, "w1", 2))
        await core_api.create_namespaced_pod(namespace, member(namespace, "w2", 2))
        bound = await eventually(
            lambda: _bound_count(core_api, namespace, ["w0", "w1", "w2"], 2),
            what="minCount members bound",
        )
        assert bound == 2
        await condition_is(api_client, namespace, "pg", "True")
        assert daemon.scheduler.bound == 2


async def _bound_count(
    core: client.CoreV1Api, namespace: str, names: list[str], at_least: int
) -> int | None:
    count = 0
    for name in names:
        count += 1 if await node_of(core, namespace, name) else 0
    return count if count >= at_least else None


async def test_four_two_gpu_members_land_on_one_eight_gpu_node(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    small = await make_nodes(core_api, [isolated(G1, namespace, count=4)])  # 2 GPUs each
    (big,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])  # 8 GPUs
    await create_group(api_client, namespace, "pg", 4)
    names = [f"w{i}" for i in range(4)]
    for name in names:
        await core_api.create_namespaced_pod(namespace, member(namespace, name, 2))
    async with running_daemon(cluster, settings_for(namespace)):
        nodes = [(await wait_bound(core_api, namespace, n))["spec"]["nodeName"] for n in names]
    assert nodes == [big] * 4, (nodes, small)


async def test_topology_constraint_keeps_the_gang_on_one_rack(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    def rack(value: str) -> Any:
        return isolated(replace(G2, type_name=f"G2-{value}", labels={"rack": value}), namespace)

    await make_nodes(core_api, [rack("r1"), rack("r2")])  # 4 GPUs per rack, 8 in all
    await create_group(api_client, namespace, "pg", 3, topology="rack")
    names = ["w0", "w1", "w2"]
    for name in names:
        await core_api.create_namespaced_pod(namespace, member(namespace, name, 2))
    async with running_daemon(cluster, settings_for(namespace)):
        note = await failed_note(api_client, namespace, "w1")
        assert note.startswith("gang pg: only 2 of minCount 3 members fit: rack=r"), note
        assert [await node_of(core_api, namespace, n) for n in names] == [None, None, None]

        more = replace(G2, type_name="G2-r2b", labels={"rack": "r2"})
        await make_nodes(core_api, [isolated(more, namespace)])  # rack r2 now has 8 GPUs
        nodes = [(await wait_bound(core_api, namespace, n))["spec"]["nodeName"] for n in names]
    racks = set()
    for node in nodes:
        racks.add((await core_api.read_node(node)).metadata.labels["rack"])
    assert racks == {"r2"}
