"""Absurd nodes beside normal ones: each gets one bounded InvalidNodeTopology event, and GPU
pods are still bound to the normal nodes."""

from __future__ import annotations

import json
from dataclasses import replace

from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, our_pod, running_daemon, settings_for, wait_bound

NOTE_LIMIT = 1024
BIG_ANNOTATION = ",".join(str(i % 4) for i in range(40_000))  # 80 KB, GPUs listed many times


async def test_billion_gpu_node_and_80kb_annotation_do_not_stop_scheduling(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    huge = replace(G2, type_name="Huge", gpus=1_000_000_000, nvlink_domains=None)
    noisy = replace(G2, type_name="Noisy", nvlink_domains=BIG_ANNOTATION)
    huge_node, noisy_node, normal_node = await make_nodes(
        core_api, [isolated(huge, namespace), isolated(noisy, namespace), isolated(G2, namespace)]
    )
    events = client.EventsV1Api(core_api.api_client)

    async def node_note(node: str) -> str | None:
        # Raw JSON: other components' node events have no eventTime, which the typed model
        # refuses to deserialize.
        response = await events.list_event_for_all_namespaces(
            field_selector=f"regarding.name={node}", _preload_content=False
        )
        items = json.loads(await response.read())["items"]
        notes = [e["note"] for e in items if e.get("reason") == "InvalidNodeTopology"]
        return str(notes[0]) if notes else None

    async with running_daemon(cluster, settings_for(namespace)):
        for name, gpus in (("one", 1), ("four", 4)):  # 5 of the 8 GPUs of the two sane nodes
            await core_api.create_namespaced_pod(namespace, our_pod(namespace, name, gpus))
        placed = [await wait_bound(core_api, namespace, name) for name in ("one", "four")]
        nodes = {pod["spec"]["nodeName"] for pod in placed}
        assert huge_node not in nodes  # its GPUs are not modelled
        assert nodes <= {noisy_node, normal_node}

        note = await eventually(lambda: node_note(huge_node), what=f"an event on {huge_node}")
        assert "1000000000 GPUs exceed the 64 per node" in note
        assert len(note) <= NOTE_LIMIT
        note = await eventually(lambda: node_note(noisy_node), what=f"an event on {noisy_node}")
        assert "gpu-scheduler.io/nvlink-domains" in note and "default layout" in note
        assert "(79999 characters)" in note  # the value is cut, and says how long it was
        assert note.endswith("using the default layout for 4 GPUs")  # the whole message fits
        assert len(note) <= NOTE_LIMIT
