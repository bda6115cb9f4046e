"""VolumeBinding on the real API server, with the controller-manager's PV controller: local PVs
pinned to kwok nodes by nodeAffinity on kubernetes.io/hostname, in a kubernetes.io/no-provisioner
WaitForFirstConsumer class."""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from scheduler.plugins.volume_binding import (
    BIND_CONFLICT,
    READ_WRITE_ONCE_POD_CONFLICT,
    UNBOUND_IMMEDIATE,
)
from tests.kube import eventually
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
from tests.volume_objects import make_claim, make_class, make_volume, with_claims


async def claim_json(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    response = await core.read_namespaced_persistent_volume_claim(
        name, namespace, _preload_content=False
    )
    body: dict[str, Any] = json.loads(await response.read())
    return body


async def wait_claim_bound(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The name of the PV the claim ends Bound to."""

    async def bound() -> str | None:
        claim = await claim_json(core, namespace, name)
        if (claim.get("status") or {}).get("phase") == "Bound":
            return str(claim["spec"]["volumeName"])
        return None

    return await eventually(bound, what=f"claim {namespace}/{name} Bound")


async def create_class(api: client.ApiClient, name: str, **kwargs: Any) -> None:
    await client.StorageV1Api(api).create_storage_class(make_class(name, **kwargs))


async def create_volume(core: client.CoreV1Api, name: str, cls: str, **kwargs: Any) -> None:
    body = make_volume(name, cls, phase=None, version="", **kwargs)
    body["metadata"].pop("resourceVersion")
    body["metadata"].pop("uid")
    await core.create_persistent_volume(body)


async def create_claim(
    core: client.CoreV1Api, namespace: str, name: str, cls: str, **kw: Any
) -> None:
    body = make_claim(name, cls, namespace=namespace, **kw)
    body["metadata"].pop("resourceVersion")
    body["metadata"].pop("uid")
    await core.create_namespaced_persistent_volume_claim(namespace, body)


def pod_with(namespace: str, name: str, *claims: str) -> dict[str, Any]:
    return with_claims(our_pod(namespace, name, 1), *claims)


async def unschedulable_with(core: client.CoreV1Api, namespace: str, name: str, text: str) -> str:
    """The PodScheduled=False message once it contains `text`, after a FailedScheduling event
    saying the same."""

    async def probe() -> str | None:
        pod = await pod_json(core, namespace, name)
        for condition in pod["status"].get("conditions") or ():
            if condition["type"] == "PodScheduled" and text in condition.get("message", ""):
                return str(condition["message"])
        return None

    message = await eventually(probe, what=f"{name} unschedulable: {text}")

    async def event() -> bool:
        events = await pod_events(core.api_client, namespace, name)
        return any(e["reason"] == "FailedScheduling" and text in e["note"] for e in events)

    await eventually(event, what=f"FailedScheduling event on {name}")
    return message


async def test_a_bound_claim_keeps_the_pod_on_its_volumes_node(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=3)])
    cls = f"{namespace}-local"
    await create_class(core_api.api_client, cls)
    await create_volume(core_api, f"{namespace}-pv", cls, node=nodes[1], claim=(namespace, "data"))
    await create_claim(core_api, namespace, "data", cls, volume_name=f"{namespace}-pv")
    assert await wait_claim_bound(core_api, namespace, "data") == f"{namespace}-pv"
    await core_api.create_namespaced_pod(namespace, pod_with(namespace, "user", "data"))
    async with running_daemon(cluster, settings_for(namespace)):
        pod = await wait_bound(core_api, namespace, "user")
    assert pod["spec"]["nodeName"] == nodes[1]


async def test_an_unbound_claim_gets_a_fitting_volume_on_the_pods_node(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=3)])
    cls = f"{namespace}-local"
    await create_class(core_api.api_client, cls)
    await create_volume(core_api, f"{namespace}-small", cls, node=nodes[0], capacity="1Mi")
    await create_volume(core_api, f"{namespace}-fits", cls, node=nodes[2], capacity="2Gi")
    await create_claim(core_api, namespace, "data", cls, request="1Gi")
    await core_api.create_namespaced_pod(namespace, pod_with(namespace, "user", "data"))
    async with running_daemon(cluster, settings_for(namespace)):
        pod = await wait_bound(core_api, namespace, "user")
        assert pod["spec"]["nodeName"] == nodes[2]
        # The PV controller finishes what the pre-bind (the PV's claimRef) started.
        assert await wait_claim_bound(core_api, namespace, "data") == f"{namespace}-fits"


async def test_missing_and_immediate_claims_wait_until_they_are_bound(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=2)])
    wait_cls, now_cls = f"{namespace}-local", f"{namespace}-now"
    await create_class(core_api.api_client, wait_cls)
    await create_class(core_api.api_client, now_cls, wait_for_first_consumer=False)
    await create_claim(core_api, namespace, "now", now_cls)
    await core_api.create_namespaced_pod(namespace, pod_with(namespace, "waits", "later"))
    await core_api.create_namespaced_pod(namespace, pod_with(namespace, "immediate", "now"))
    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        missing = await unschedulable_with(
            core_api, namespace, "waits", 'persistentvolumeclaim "later" not found'
        )
        # Other tests' nodes share the cluster: the node count is not this test's.
        assert re.fullmatch(
            r'0/\d+ nodes are available: persistentvolumeclaim "later" not found\.', missing
        )
        immediate = await unschedulable_with(core_api, namespace, "immediate", UNBOUND_IMMEDIATE)
        assert immediate.endswith(f": {UNBOUND_IMMEDIATE}.")

        # A cluster event during a pod's first cycle (the informers' initial lists) sends it to
        # backoff rather than to the unschedulable pool, as kube-scheduler does; both settle there.
        async def parked() -> bool:
            return daemon.queue.pools()["unschedulable"] == 2

        await eventually(parked, what="both pods in the unschedulable pool")

        # The PV controller binds the Immediate claim to a new PV; the pod follows its node.
        await create_volume(core_api, f"{namespace}-now", now_cls, node=nodes[0])
        assert await wait_claim_bound(core_api, namespace, "now") == f"{namespace}-now"
        assert (await wait_bound(core_api, namespace, "immediate"))["spec"]["nodeName"] == nodes[0]

        # The missing claim appears (waiting for its first consumer) with a PV on the other node.
        await create_volume(core_api, f"{namespace}-later", wait_cls, node=nodes[1])
        await create_claim(core_api, namespace, "later", wait_cls)
        assert (await wait_bound(core_api, namespace, "waits"))["spec"]["nodeName"] == nodes[1]
        assert await wait_claim_bound(core_api, namespace, "later") == f"{namespace}-later"


async def test_two_pods_never_get_the_same_volume(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=2)])
    cls = f"{namespace}-local"
    await create_class(core_api.api_client, cls)
    for index, node in enumerate(nodes):
        await create_volume(core_api, f"{namespace}-pv{index}", cls, node=node)
    for index in range(3):
        await create_claim(core_api, namespace, f"c{index}", cls)
        await core_api.create_namespaced_pod(
            namespace, pod_with(namespace, f"p{index}", f"c{index}")
        )
    async with running_daemon(cluster, settings_for(namespace)):

        async def two_bound() -> list[dict[str, Any]] | None:
            pods = [await pod_json(core_api, namespace, f"p{i}") for i in range(3)]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            return bound if len(bound) == 2 else None

        bound = await eventually(two_bound, what="two pods bound")
        [left] = {"p0", "p1", "p2"} - {p["metadata"]["name"] for p in bound}
        message = await unschedulable_with(core_api, namespace, left, BIND_CONFLICT)
        assert f" 2 {BIND_CONFLICT}" in message  # this test's two nodes
        volumes = set()
        for pod in bound:
            claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
            volume = await wait_claim_bound(core_api, namespace, claim)
            volumes.add(volume)
            pinned = await core_api.read_persistent_volume(volume, _preload_content=False)
            spec = json.loads(await pinned.read())["spec"]
            term = spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
            assert term["matchExpressions"][0]["values"] == [pod["spec"]["nodeName"]]
        assert len(volumes) == 2


async def test_a_read_write_once_pod_claim_serves_one_pod_at_a_time(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=2)])
    cls, volume = f"{namespace}-local", f"{namespace}-solo"
    once = ["ReadWriteOncePod"]
    await create_class(core_api.api_client, cls)
    await create_volume(
        core_api, volume, cls, node=nodes[0], claim=(namespace, "solo"), access_modes=once
    )
    await create_claim(core_api, namespace, "solo", cls, volume_name=volume, access_modes=once)
    assert await wait_claim_bound(core_api, namespace, "solo") == volume
    await core_api.create_namespaced_pod(namespace, pod_with(namespace, "first", "solo"))
    async with running_daemon(cluster, settings_for(namespace)):
        assert (await wait_bound(core_api, namespace, "first"))["spec"]["nodeName"] == nodes[0]
        await core_api.create_namespaced_pod(namespace, pod_with(namespace, "second", "solo"))
        message = await unschedulable_with(
            core_api, namespace, "second", READ_WRITE_ONCE_POD_CONFLICT
        )
        assert re.fullmatch(
            rf"0/\d+ nodes are available: {re.escape(READ_WRITE_ONCE_POD_CONFLICT)}\.", message
        )
        await core_api.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
        assert (await wait_bound(core_api, namespace, "second"))["spec"]["nodeName"] == nodes[0]
