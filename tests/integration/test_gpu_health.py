"""GPU health end to end: the fake dcgm-exporter reports a fatal Xid on one GPU (node annotation
`fake-dcgm.gpu-scheduler.io/xid`), the real Prometheus scrapes it, the scheduler's health monitor
reads it and never chooses that GPU; a DeviceTaintRule keeps the allocator off a DRA device; with
`health.writeDeviceTaintRules` the scheduler writes the rule for a sick DRA GPU and deletes it
when the GPU recovers.

Device-plugin node (8 GPUs, NVLink domains 0-3 and 4-7), GPU 3 sick with Xid 79:
- a pod another scheduler bound to GPU 3 gets a GPUUnhealthy event, as does the node;
- once that pod is gone, an 8-GPU pod stays pending and its FailedScheduling event names GPU 3;
- three 2-GPU pods are bound, none on GPU 3;
- `gpu_scheduler_unhealthy_gpus{reason="xid_79"}` is 1 for the node; after the annotation is
  removed and the lookback window passed, the GPU recovers (event GPURecovered).
"""

from __future__ import annotations

import json
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client

from hack.fake_dcgm.faults import XID_ANNOTATION
from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER
from hack.localcluster.nodes import G2_EXPANSION
from reclaim.health import GpuRef
from scheduler.config import SchedulerConfig
from scheduler.daemon import Daemon
from scheduler.kube.device_taint_rules import health_rule_name
from tests.dra_objects import claim_spec, exact, request, resource_claim
from tests.integration.test_dra_allocation import allocated_devices, dra_pod, uuids
from tests.kube import bind, eventually
from tests.scheduling import (
    gpus_of,
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

Json = dict[str, Any]
LOOKBACK_S = 4.0


def health_settings(cluster: LocalCluster, namespace: str, **health: Any) -> SchedulerConfig:
    assert cluster.prometheus_url is not None
    return settings_for(
        namespace,
        reclaim={"prometheusUrl": cluster.prometheus_url, "scrapeIntervalSeconds": 1},
        health={"periodSeconds": 1, "lookbackSeconds": LOOKBACK_S, **health},
    )


async def annotate(core: client.CoreV1Api, node: str, value: str | None) -> None:
    patch = {"metadata": {"annotations": {XID_ANNOTATION: value}}}
    await core.patch_node(node, patch)


async def sick(daemon: Daemon, node: str, index: int) -> bool:
    assert daemon.health is not None
    return any(g.node == node and g.index == index for g in daemon.health.verdicts)


async def reasons(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    return [str(e.get("reason")) for e in await pod_events(api, namespace, name)]


async def node_events(api: client.ApiClient, node: str) -> list[Json]:
    response = await client.EventsV1Api(api).list_event_for_all_namespaces(
        field_selector=f"regarding.kind=Node,regarding.name={node}", _preload_content=False
    )
    items: list[Json] = json.loads(await cast(Any, response).read())["items"]
    return items


async def metric_lines(daemon: Daemon, name: str) -> list[str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{daemon.http_port}/metrics") as response,
    ):
        text = await response.text()
    return [line for line in text.splitlines() if line.startswith(name + "{")]


async def test_a_gpu_with_a_fatal_xid_is_never_chosen_and_is_reported(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    api = api_client
    [node] = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])
    # A pod another scheduler placed on GPU 3, before the GPU fails.
    holder = our_pod(
        namespace,
        "holder",
        1,
        scheduler_name="elsewhere",
        annotations={"gpu-scheduler.io/gpus": "3"},
    )
    await core_api.create_namespaced_pod(namespace, cast(Any, holder))
    await bind(core_api, namespace, "holder", node)
    await annotate(core_api, node, "3=79")
    async with running_daemon(cluster, health_settings(cluster, namespace)) as daemon:
        await eventually(lambda: sick(daemon, node, 3), timeout=30, what="GPU 3 judged sick")

        async def reported() -> bool:
            return "GPUUnhealthy" in await reasons(api, namespace, "holder")

        await eventually(reported, timeout=30, what="GPUUnhealthy on the holder")
        [node_event] = [e for e in await node_events(api, node) if e["reason"] == "GPUUnhealthy"]
        assert "GPU 3 of node" in node_event["note"] and "XID 79" in node_event["note"]
        assert await metric_lines(daemon, "gpu_scheduler_unhealthy_gpus") == [
            f'gpu_scheduler_unhealthy_gpus{{node="{node}",reason="xid_79"}} 1.0'
        ]

        await core_api.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
        await eventually(
            lambda: _gone(daemon, f"{namespace}/holder"), timeout=30, what="holder gone"
        )
        await core_api.create_namespaced_pod(
            namespace, cast(Any, our_pod(namespace, "all-eight", 8))
        )

        async def failed() -> str | None:
            for event in await pod_events(api, namespace, "all-eight"):
                if event.get("reason") == "FailedScheduling":
                    return str(event.get("note"))
            return None

        message = await eventually(failed, timeout=30, what="FailedScheduling of all-eight")
        assert "1 GPU unhealthy: GPU 3 XID 79" in message
        assert not (await pod_json(core_api, namespace, "all-eight"))["spec"].get("nodeName")
        await core_api.delete_namespaced_pod("all-eight", namespace, grace_period_seconds=0)

        taken: list[int] = []
        for index in range(3):
            await core_api.create_namespaced_pod(
                namespace, cast(Any, our_pod(namespace, f"two-{index}", 2))
            )
            bound = await wait_bound(core_api, namespace, f"two-{index}")
            assert bound["spec"]["nodeName"] == node
            taken += gpus_of(bound)
        assert len(taken) == 6 and 3 not in taken

        await annotate(core_api, node, None)

        async def recovered() -> bool:
            events = await node_events(api, node)
            return any(e["reason"] == "GPURecovered" for e in events)

        await eventually(recovered, timeout=30 + LOOKBACK_S, what="GPU 3 recovered")
        assert not await sick(daemon, node, 3)
        assert daemon.cache.sick_gpus.get(node) is None
        assert await metric_lines(daemon, "gpu_scheduler_unhealthy_gpus") == []


async def _gone(daemon: Daemon, key: str) -> bool:
    return key not in daemon.cache.pods


def gpus(count: int) -> Json:
    return claim_spec(request("gpus", exact(DRIVER, count=count)))


async def test_a_device_taint_rule_keeps_the_allocator_off_the_device(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    api = api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    rule_name = f"{namespace}-gpu-0"
    rule: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-0"},
            "taint": {"key": "example.com/broken", "effect": "NoSchedule"},
        },
    }
    custom = client.CustomObjectsApi(api)
    await custom.create_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", rule)
    resource = client.ResourceV1Api(api)
    try:
        await resource.create_namespaced_resource_claim(
            namespace, cast(Any, resource_claim("seven", namespace, gpus(7)))
        )
        async with running_daemon(cluster, settings_for(namespace)):
            pod = dra_pod(namespace, "seven", [{"name": "gpus", "resourceClaimName": "seven"}])
            await core_api.create_namespaced_pod(namespace, cast(Any, pod))
            await wait_bound(core_api, namespace, "seven")
            devices = await allocated_devices(api, namespace, "seven")
            assert devices == [f"gpu-{i}" for i in range(1, 8)]
            await resource.create_namespaced_resource_claim(
                namespace, cast(Any, resource_claim("one-more", namespace, gpus(1)))
            )
            pod = dra_pod(
                namespace, "one-more", [{"name": "gpus", "resourceClaimName": "one-more"}]
            )
            await core_api.create_namespaced_pod(namespace, cast(Any, pod))

            async def failed() -> bool:
                return "FailedScheduling" in await reasons(api, namespace, "one-more")

            await eventually(failed, timeout=30, what="one-more unschedulable")
            assert not (await pod_json(core_api, namespace, "one-more"))["spec"].get("nodeName")
    finally:
        await custom.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "devicetaintrules", rule_name
        )


async def test_the_scheduler_writes_and_deletes_the_rule_of_a_sick_dra_gpu(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    api = api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    name = health_rule_name(DRIVER, node, "gpu-2")
    custom = client.CustomObjectsApi(api)

    async def rule() -> Json | None:
        response = await custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "devicetaintrules", _preload_content=False
        )
        items: list[Json] = json.loads(await response.read())["items"]
        found = [item for item in items if item["metadata"]["name"] == name]
        return found[0] if found else None

    settings = health_settings(cluster, namespace, writeDeviceTaintRules=True)
    await annotate(core_api, node, "2=79")
    async with running_daemon(cluster, settings) as daemon:
        assert daemon.health is not None
        written = await eventually(rule, timeout=30, what=f"DeviceTaintRule {name} written")
        assert written["spec"]["deviceSelector"] == {
            "driver": DRIVER,
            "pool": node,
            "device": "gpu-2",
        }
        taint = {k: v for k, v in written["spec"]["taint"].items() if k != "timeAdded"}
        assert taint == {
            "key": "gpu-scheduler.io/unhealthy",
            "value": "xid_79",
            "effect": "NoSchedule",
        }
        assert GpuRef(node, 2, ids["gpu-2"]) in daemon.health.verdicts
        resource = client.ResourceV1Api(api)
        await resource.create_namespaced_resource_claim(
            namespace, cast(Any, resource_claim("seven", namespace, gpus(7)))
        )
        pod = dra_pod(namespace, "seven", [{"name": "gpus", "resourceClaimName": "seven"}])
        await core_api.create_namespaced_pod(namespace, cast(Any, pod))
        await wait_bound(core_api, namespace, "seven")
        assert "gpu-2" not in await allocated_devices(api, namespace, "seven")

        await annotate(core_api, node, None)

        async def deleted() -> bool:
            return await rule() is None

        await eventually(deleted, timeout=30 + LOOKBACK_S, what=f"DeviceTaintRule {name} deleted")
        assert not daemon.health.verdicts
