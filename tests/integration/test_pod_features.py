"""kube-scheduler parity on the real API server: scheduling gates, host ports, and pods using
a field the scheduler does not implement."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1, G2, LocalCluster
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

GATE = "example.com/admission"
PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"


async def condition_of(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    pod = await pod_json(core, namespace, name)
    found = [c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"]
    return found[0] if found else None


async def condition_with(
    core: client.CoreV1Api, namespace: str, name: str, reason: str, text: str = ""
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        condition = await condition_of(core, namespace, name)
        if condition and condition["reason"] == reason and text in condition["message"]:
            return condition
        return None

    return await eventually(probe, what=f"PodScheduled reason {reason} on {name}")


def with_host_port(pod: dict[str, Any], port: int) -> dict[str, Any]:
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
    return pod


async def test_gated_pod_waits_until_its_gates_are_removed(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    await make_nodes(core_api, [isolated(G2, namespace)])
    gated = our_pod(namespace, "gated", 1)
    gated["spec"]["schedulingGates"] = [{"name": GATE}]
    await core_api.create_namespaced_pod(namespace, gated)
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "free", 1))
    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        await wait_bound(core_api, namespace, "free")
        condition = await condition_with(core_api, namespace, "gated", "SchedulingGated")
        assert condition["status"] == "False"
        assert condition["message"] == "Scheduling is blocked due to non-empty scheduling gates"
        # Another pod created after it is bound while the gated one waits with room left.
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, "later", 1))
        await wait_bound(core_api, namespace, "later")
        assert (await pod_json(core_api, namespace, "gated"))["spec"].get("nodeName") is None
        assert f"{namespace}/gated" not in daemon.queue

        async def counted(expected: int) -> bool:
            # The API shows a pod bound a moment before the daemon counts its answer.
            return daemon.scheduler.bound == expected

        await eventually(lambda: counted(2), what="free and later counted as bound")
        await core_api.patch_namespaced_pod(
            "gated", namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
        )
        await wait_bound(core_api, namespace, "gated", timeout=30)
        await eventually(lambda: counted(3), what="the ungated pod counted as bound")
        await asyncio.sleep(0.5)
        assert daemon.scheduler.bound == 3, "bound more than once"


async def test_host_port_conflicts_with_a_pod_of_another_scheduler(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G1, namespace)])
    holder = with_host_port(
        gpu_pod("holder", 0, scheduler_name="elsewhere", node_selector={TEST_LABEL: namespace}),
        8080,
    )
    await core_api.create_namespaced_pod(namespace, holder)
    await bind(core_api, namespace, "holder", node)
    await core_api.create_namespaced_pod(
        namespace, with_host_port(our_pod(namespace, "same-port", 0), 8080)
    )
    await core_api.create_namespaced_pod(
        namespace, with_host_port(our_pod(namespace, "other-port", 0), 8081)
    )
    async with running_daemon(cluster, settings_for(namespace)):
        assert (await wait_bound(core_api, namespace, "other-port"))["spec"]["nodeName"] == node
        condition = await condition_with(
            core_api, namespace, "same-port", "Unschedulable", PORTS_REASON
        )
        assert f" 1 {PORTS_REASON}" in condition["message"]
        assert (await pod_json(core_api, namespace, "same-port"))["spec"].get("nodeName") is None


async def test_generic_ephemeral_volume_is_reported_as_unsupported(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    await make_nodes(core_api, [isolated(G2, namespace)])
    pod = our_pod(namespace, "spread-me", 1)
    template = {
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }
    pod["spec"]["volumes"] = [{"name": "data", "ephemeral": {"volumeClaimTemplate": template}}]
    await core_api.create_namespaced_pod(namespace, pod)
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "plain", 1))
    expected = (
        "nodes are available: gpu-scheduler does not support generic ephemeral volumes "
        "(spec.volumes[*].ephemeral)."
    )
    async with running_daemon(cluster, settings_for(namespace)):
        await wait_bound(core_api, namespace, "plain")
        condition = await condition_with(core_api, namespace, "spread-me", "Unschedulable")
        assert condition["status"] == "False"
        assert condition["message"].startswith("0/")
        assert condition["message"].endswith(expected)

        async def failed_scheduling() -> bool:
            events = await pod_events(core_api.api_client, namespace, "spread-me")
            return any(
                e["reason"] == "FailedScheduling" and e["note"].endswith(expected) for e in events
            )

        await eventually(failed_scheduling, what="the FailedScheduling event")
        assert (await pod_json(core_api, namespace, "spread-me"))["spec"].get("nodeName") is None
