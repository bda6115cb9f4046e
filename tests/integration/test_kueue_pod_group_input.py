"""Kueue pod group metadata that gpu-scheduler reads itself (no Kueue running here: its webhook
would refuse most bad counts of queued pods before gpu-scheduler sees them).

A pod labelled `kueue.x-k8s.io/pod-group-name` is a gang member whose minCount is its
`kueue.x-k8s.io/pod-group-total-count`; a bad count holds the whole group back and is a Warning
Event on the pod naming the annotation (docs/kueue.md, "Pod groups")."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G2_EXPANSION, LocalCluster
from tests.kube import eventually
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

GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
FIELD = f"metadata.annotations[{TOTAL_COUNT}]"


def group_pod(namespace: str, name: str, group: str, count: str, gpus: int) -> dict[str, Any]:
    return our_pod(
        namespace, name, gpus, labels={GROUP_LABEL: group}, annotations={TOTAL_COUNT: count}
    )


async def test_a_bad_total_count_is_reported_on_the_pod_and_its_group_waits(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])
    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        await core_api.create_namespaced_pod(
            namespace, group_pod(namespace, "good", "broken", "2", gpus=2)
        )
        await core_api.create_namespaced_pod(
            namespace, group_pod(namespace, "bad", "broken", "two" * 100, gpus=2)
        )

        async def reported() -> dict[str, Any] | None:
            for event in await pod_events(api_client, namespace, "bad"):
                if event.get("reason") == "InvalidPodGroup":
                    found: dict[str, Any] = event
                    return found
            return None

        event = await eventually(reported, what="InvalidPodGroup Event on pod bad")
        assert event["type"] == "Warning"
        assert event["note"].startswith(f"pod bad: {FIELD}: must be an integer, got 'twotwo")
        assert len(event["note"]) < 250

        # The group as a whole waits, saying why on each pod's PodScheduled condition.
        for name in ("good", "bad"):

            async def gated(name: str = name) -> dict[str, Any] | None:
                pod = await pod_json(core_api, namespace, name)
                for condition in pod["status"].get("conditions") or ():
                    if condition["type"] == "PodScheduled" and "Kueue pod group broken" in (
                        condition.get("message") or ""
                    ):
                        found: dict[str, Any] = condition
                        return found
                return None

            condition = await eventually(gated, what=f"{name} shows why it waits")
            assert condition["reason"] == "SchedulingGated"
            assert not (await pod_json(core_api, namespace, name))["spec"].get("nodeName")

        # A valid group on the same node is bound whole, in one cycle.
        for name in ("w0", "w1"):
            await core_api.create_namespaced_pod(
                namespace, group_pod(namespace, name, "fine", "2", gpus=4)
            )
        for name in ("w0", "w1"):
            assert len(gpus_of(await wait_bound(core_api, namespace, name))) == 4
        assert daemon.scheduler.bound == 2
        for name in ("good", "bad"):
            assert not (await pod_json(core_api, namespace, name))["spec"].get("nodeName")
