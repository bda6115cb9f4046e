"""DRA writes under faults, on the real API server: a device allocated to two ResourceClaims is
reported by the leader's conflict scan (the hazard when kube-scheduler and gpu-scheduler allocate
from one pool; here the admin writes both allocations)."""

from __future__ import annotations

import json
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client

from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER
from scheduler.core.conflicts import DEVICE_REASON
from tests.dra_objects import allocated, claim_spec, exact, request, resource_claim, result
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for

Json = dict[str, Any]


def one_gpu() -> Json:
    return claim_spec(request("gpus", exact(DRIVER, count=1)))


async def allocate_by_hand(
    api: client.ApiClient, namespace: str, name: str, node: str, device: str
) -> None:
    """Create claim `name` and write its allocation of `device` (node `node`'s pool) as the
    admin, with no scheduler involved."""
    resource = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim(
        namespace, cast(Any, resource_claim(name, namespace, one_gpu()))
    )
    status = allocated(result("gpus", device, pool=node), node=node)
    del status["allocation"]["devices"]["config"]  # the claim has no config to copy
    await resource.patch_namespaced_resource_claim_status(
        name, namespace, {"status": status}, _preload_content=False
    )


async def test_the_leader_reports_a_device_allocated_to_two_claims(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api: client.ApiClient = getattr(core_api, "api_client")  # noqa: B009 (untyped attribute)
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    for name in ("first", "second"):
        await allocate_by_hand(api, namespace, name, node, "gpu-3")
    events: Any = client.EventsV1Api(api)

    async def conflict_event() -> Json | None:
        response = await events.list_namespaced_event(
            "default", field_selector=f"regarding.name={node}", _preload_content=False
        )
        items = json.loads(await response.read())["items"]
        return next((e for e in items if e["reason"] == DEVICE_REASON), None)

    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        event = await eventually(conflict_event, what="a DeviceConflict event on the node")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{daemon.http_port}/metrics") as response,
        ):
            metrics = await response.text()
    assert event["type"] == "Warning"
    assert f"device {DRIVER}/{node}/gpu-3" in event["note"]
    assert f"{namespace}/first, {namespace}/second" in event["note"]
    assert "\ngpu_scheduler_gpu_conflicts_total 1.0\n" in metrics
