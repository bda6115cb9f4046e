"""Bad input is reported on the object it concerns, and the scheduler keeps scheduling."""

from __future__ import annotations

import json
from dataclasses import replace

from kubernetes_asyncio import client

from hack.localcluster import G2, G2_EXPANSION, LocalCluster
from tests.kube import eventually
from tests.scheduling import (
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    running_daemon,
    settings_for,
    wait_bound,
)


async def _warning(api_client: client.ApiClient, namespace: str, name: str, text: str) -> str:
    async def found() -> str | None:
        for event in await pod_events(api_client, namespace, name):
            if event["type"] == "Warning" and text in event["note"]:
                return str(event["note"])
        return None

    return await eventually(found, what=f"a Warning event on {name} mentioning {text!r}")


async def test_bad_pods_and_nodes_are_reported_and_scheduling_goes_on(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    broken = replace(isolated(G2_EXPANSION, namespace), nvlink_domains="0-3,3-7")
    broken_node, _ = await make_nodes(core_api, [broken, isolated(G2, namespace)])
    bad_policy = our_pod(
        namespace, "bad-policy", 2, annotations={"gpu-scheduler.io/nvlink-policy": "sometimes"}
    )
    await core_api.create_namespaced_pod(namespace, bad_policy)
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "huge", 64))
    async with running_daemon(cluster, settings_for(namespace)):
        note = await _warning(core_api.api_client, namespace, "bad-policy", "invalid fields")
        assert "metadata.annotations[gpu-scheduler.io/nvlink-policy]" in note
        assert "'sometimes'" in note
        note = await _warning(core_api.api_client, namespace, "huge", "requests 64 nvidia.com/gpu")
        assert "the largest node has 8" in note

        events = client.EventsV1Api(core_api.api_client)

        async def node_event() -> str | None:
            # Raw JSON: other components' node events have no eventTime, which the typed
            # model refuses to deserialize.
            response = await events.list_event_for_all_namespaces(
                field_selector=f"regarding.name={broken_node}", _preload_content=False
            )
            items = json.loads(await response.read())["items"]
            notes = [e["note"] for e in items if e.get("reason") == "InvalidNodeTopology"]
            return str(notes[0]) if notes else None

        note = await eventually(node_event, what="an InvalidNodeTopology event on the node")
        assert "gpu-scheduler.io/nvlink-domains" in note and "default layout" in note

        # The node with the malformed annotation is still used, with the default layout.
        await core_api.create_namespaced_pod(
            namespace,
            our_pod(
                namespace, "on-broken", 8, node_selector={"kubernetes.io/hostname": broken_node}
            ),
        )
        placed = await wait_bound(core_api, namespace, "on-broken")
        assert placed["spec"]["nodeName"] == broken_node
