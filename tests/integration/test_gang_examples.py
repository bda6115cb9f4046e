"""The gang examples in manifests/examples/gangs/ run as shipped on the real API server: each file's
objects are created (moved into the test's namespace, pointed at the test's scheduler and nodes),
and every member ends up bound, where the example says, with the PodGroup's condition True."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from hack.localcluster import G2, G2_EXPANSION, LocalCluster
from tests.integration.test_gangs import GROUP, PLURAL, VERSION, condition_is
from tests.kube import eventually
from tests.scheduling import TEST_LABEL, isolated, make_nodes, running_daemon, settings_for

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "gangs"


def _for_test(pod_spec: dict[str, Any], namespace: str) -> None:
    """The shipped pod spec, scheduled by the test's scheduler onto the test's nodes."""
    assert pod_spec["schedulerName"] == "gpu-scheduler"
    pod_spec["schedulerName"] = namespace
    pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), TEST_LABEL: namespace}


async def _create_example(api_client: client.ApiClient, namespace: str, file: str) -> list[str]:
    """Create every object of the example; the names of its PodGroups."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    groups = []
    for document in yaml.safe_load_all((EXAMPLES / file).read_text()):
        document["metadata"]["namespace"] = namespace
        kind = document["kind"]
        if kind == "PodGroup":
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, document
            )
            groups.append(document["metadata"]["name"])
        elif kind == "Pod":
            _for_test(document["spec"], namespace)
            await core.create_namespaced_pod(namespace, document)
        elif kind == "Job":
            _for_test(document["spec"]["template"]["spec"], namespace)
            await batch.create_namespaced_job(namespace, document)
        else:
            raise AssertionError(f"{file}: unexpected kind {kind}")
    return groups


async def _all_bound(core: client.CoreV1Api, namespace: str, count: int) -> dict[str, str]:
    """Wait until `count` pods of the namespace are bound; pod name -> node."""

    async def probe() -> dict[str, str] | None:
        response = await core.list_namespaced_pod(namespace, _preload_content=False)
        pods = json.loads(await response.read())["items"]
        bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        placed = {name: node for name, node in bound.items() if node}
        return placed if len(bound) == count and len(placed) == count else None

    return await eventually(probe, what=f"{count} pods bound")


async def test_pytorch_ddp_gang_binds_its_four_workers_one_per_node(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace, count=4)])
    (group,) = await _create_example(api_client, namespace, "pytorch-ddp.yaml")
    async with running_daemon(cluster, settings_for(namespace)):
        placed = await _all_bound(core_api, namespace, 4)
        await condition_is(api_client, namespace, group, "True")
    assert sorted(placed.values()) == sorted(nodes)


async def test_rack_gang_binds_inside_the_one_rack_with_room(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    def rack(spec: Any, value: str) -> Any:
        named = replace(spec, type_name=f"{spec.type_name}-{value}", labels={"rack": value})
        return isolated(named, namespace)

    # r1: one 8-GPU node; r2: one 4-GPU node. 4 x 2 GPUs fit only in r1.
    (big, _small) = await make_nodes(core_api, [rack(G2_EXPANSION, "r1"), rack(G2, "r2")])
    (group,) = await _create_example(api_client, namespace, "rack-topology.yaml")
    async with running_daemon(cluster, settings_for(namespace)):
        placed = await _all_bound(core_api, namespace, 4)
        await condition_is(api_client, namespace, group, "True")
    assert set(placed.values()) == {big}


async def test_indexed_job_pods_bind_as_one_gang(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])  # 8 GPUs
    (group,) = await _create_example(api_client, namespace, "job.yaml")
    async with running_daemon(cluster, settings_for(namespace)):
        placed = await _all_bound(core_api, namespace, 3)
        await condition_is(api_client, namespace, group, "True")
    assert set(placed.values()) == {node}
