"""Gangs from scheduler-plugins' coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1, the CRD in
manifests/crds/) on the real API server: pods labelled `scheduling.x-k8s.io/pod-group` bind
together (minMember) or not at all, and the Kubeflow-style example runs as shipped."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from tests.integration.test_gangs import failed_note, node_of
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    our_pod,
    running_daemon,
    settings_for,
    wait_bound,
)

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
CRD_NAME = f"{PLURAL}.{GROUP}"


@contextlib.asynccontextmanager
async def coscheduling_crd(api_client: client.ApiClient, namespace: str) -> AsyncIterator[None]:
    """The shipped CRD, installed and Established; at the end the namespace's PodGroups and the
    CRD are deleted (not awaited: the API server's cleanup may take minutes, so one test installs
    it once)."""
    crds = client.ApiextensionsV1Api(api_client)
    body = yaml.safe_load((MANIFESTS / "crds" / "coscheduling-podgroups.yaml").read_text())
    await crds.create_custom_resource_definition(body)

    async def established() -> bool | None:
        response = await crds.read_custom_resource_definition(CRD_NAME, _preload_content=False)
        conditions = (json.loads(await response.read()).get("status") or {}).get("conditions")
        ok = any(c["type"] == "Established" and c["status"] == "True" for c in conditions or ())
        return True if ok else None

    try:
        await eventually(established, what="CRD Established")
        yield
    finally:
        custom = client.CustomObjectsApi(api_client)
        await custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        await crds.delete_custom_resource_definition(CRD_NAME)


async def create_group(api_client: client.ApiClient, body: dict[str, Any], namespace: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def labelled(namespace: str, name: str, gpus: int, group: str) -> dict[str, Any]:
    pod = our_pod(namespace, name, gpus)
    pod["metadata"].setdefault("labels", {})["scheduling.x-k8s.io/pod-group"] = group
    return pod


async def test_labelled_gang_binds_together_and_the_example_runs(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2, namespace)])  # 4 GPUs
    blocker = gpu_pod("blocker", 2, scheduler_name="nobody")
    await core_api.create_namespaced_pod(namespace, blocker)
    await bind(core_api, namespace, "blocker", node)
    names = ["w0", "w1", "w2"]
    async with coscheduling_crd(api_client, namespace):
        group = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": "pg"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 30},
        }
        await create_group(api_client, group, namespace)
        for name in names:
            await core_api.create_namespaced_pod(namespace, labelled(namespace, name, 1, "pg"))
        async with running_daemon(cluster, settings_for(namespace)) as daemon:
            note = await failed_note(api_client, namespace, "w0")
            assert note.startswith("gang pg: only 2 of minCount 3 members fit: "), note
            assert [await node_of(core_api, namespace, n) for n in names] == [None, None, None]
            assert daemon.scheduler.bound == 0

            await core_api.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
            for name in names:
                await wait_bound(core_api, namespace, name)
            assert daemon.scheduler.bound == 3
        for name in names:
            await core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        await run_example(cluster, core_api, api_client, namespace)


async def run_example(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """manifests/examples/gangs/coscheduling.yaml as shipped (moved into the test's namespace,
    scheduler and nodes): its 3 pods bind. Needs the CRD and 3 free GPUs."""
    documents = list(
        yaml.safe_load_all((MANIFESTS / "examples" / "gangs" / "coscheduling.yaml").read_text())
    )
    assert [d["kind"] for d in documents] == ["PodGroup", "Pod", "Pod", "Pod"]
    for document in documents:
        document["metadata"]["namespace"] = namespace
        if document["kind"] == "PodGroup":
            await create_group(api_client, document, namespace)
            continue
        spec = document["spec"]
        assert spec["schedulerName"] == "gpu-scheduler"
        spec["schedulerName"] = namespace
        spec["nodeSelector"] = {TEST_LABEL: namespace}
        await core_api.create_namespaced_pod(namespace, document)
    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        for document in documents[1:]:
            await wait_bound(core_api, namespace, document["metadata"]["name"])
        assert daemon.scheduler.bound == 3
