"""The local control plane is a real one: binding, eviction with PDBs, RBAC and kube-scheduler."""

from __future__ import annotations

import json

import aiohttp
import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from tests.kube import bind, eventually, gpu_pod, pod_gone, pod_phase


async def test_pod_bound_through_binding_subresource_runs(
    core_api: client.CoreV1Api, namespace: str, seed_nodes: list[str]
) -> None:
    await core_api.create_namespaced_pod(namespace, gpu_pod("bound", gpus=2))
    await bind(core_api, namespace, "bound", "g2-expansion-0", {"gpu-scheduler.io/gpus": "0,1"})

    async def running() -> bool:
        return await pod_phase(core_api, namespace, "bound") == "Running"

    await eventually(running, what="pod Running on the kwok node")
    pod = await core_api.read_namespaced_pod("bound", namespace)
    assert pod.spec.node_name == "g2-expansion-0"
    assert pod.metadata.annotations["gpu-scheduler.io/gpus"] == "0,1"


async def test_binding_to_a_second_node_is_refused(
    core_api: client.CoreV1Api, namespace: str, seed_nodes: list[str]
) -> None:
    await core_api.create_namespaced_pod(namespace, gpu_pod("once"))
    await bind(core_api, namespace, "once", "g1-0")
    with pytest.raises(client.ApiException) as refused:
        await bind(core_api, namespace, "once", "g2-0")
    assert refused.value.status == 409


async def _bound_running_pod(
    core_api: client.CoreV1Api, namespace: str, name: str, node: str, labels: dict[str, str]
) -> None:
    await core_api.create_namespaced_pod(namespace, gpu_pod(name, labels=labels))
    await bind(core_api, namespace, name, node)

    async def running() -> bool:
        return await pod_phase(core_api, namespace, name) == "Running"

    await eventually(running, what=f"{name} Running")


def _eviction(name: str) -> dict[str, object]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}


async def test_eviction_api_evicts_and_honours_pdb(
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    seed_nodes: list[str],
) -> None:
    await _bound_running_pod(core_api, namespace, "free", "g1-0", {"app": "free"})
    await core_api.create_namespaced_pod_eviction("free", namespace, _eviction("free"))
    await eventually(lambda: pod_gone(core_api, namespace, "free"), what="evicted pod gone")

    await _bound_running_pod(core_api, namespace, "guarded", "g1-0", {"app": "guarded"})
    policy = client.PolicyV1Api(api_client)
    await policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    async def pdb_computed() -> bool:
        pdb = await policy.read_namespaced_pod_disruption_budget("keep-one", namespace)
        status = pdb.status
        return bool(status and status.current_healthy == 1 and status.disruptions_allowed == 0)

    await eventually(pdb_computed, what="disruption controller computed the PDB status")
    with pytest.raises(client.ApiException) as refused:
        await core_api.create_namespaced_pod_eviction("guarded", namespace, _eviction("guarded"))
    assert refused.value.status == 429
    assert "disruption budget" in json.loads(refused.value.body)["message"]
    assert not await pod_gone(core_api, namespace, "guarded")


async def test_service_account_with_narrow_role_is_forbidden_elsewhere(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    await core_api.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    await rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = await core_api.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    )
    configuration = client.Configuration(host=cluster.server)
    configuration.ssl_ca_cert = str(cluster.pki.ca_cert) if cluster.pki else None
    configuration.api_key = {"BearerToken": token.status.token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    async with client.ApiClient(configuration) as as_reader:
        reader = client.CoreV1Api(as_reader)
        allowed = await reader.list_namespaced_pod(namespace)
        assert allowed.items == []
        with pytest.raises(client.ApiException) as create_denied:
            await reader.create_namespaced_pod(namespace, {"metadata": {"name": "x"}})
        with pytest.raises(client.ApiException) as nodes_denied:
            await reader.list_node()
        with pytest.raises(client.ApiException) as other_ns_denied:
            await reader.list_namespaced_pod("default")
    assert create_denied.value.status == 403
    assert nodes_denied.value.status == 403
    assert other_ns_denied.value.status == 403
    assert (
        f"system:serviceaccount:{namespace}:reader"
        in json.loads(nodes_denied.value.body)["message"]
    )


async def test_kube_scheduler_places_default_scheduler_pods_on_fake_nodes(
    core_api: client.CoreV1Api, namespace: str, seed_nodes: list[str]
) -> None:
    manifest = gpu_pod(
        "baseline", gpus=4, scheduler_name="default-scheduler", node_selector={"type": "kwok"}
    )
    await core_api.create_namespaced_pod(namespace, manifest)

    async def running() -> bool:
        return await pod_phase(core_api, namespace, "baseline") == "Running"

    await eventually(running, what="kube-scheduler placed the pod and kwok ran it")
    pod = await core_api.read_namespaced_pod("baseline", namespace)
    # Only G2 (4 GPUs) and G2-Expansion (8 GPUs) have room for 4 GPUs.
    assert pod.spec.node_name in {"g2-0", "g2-expansion-0"}


async def test_watch_from_a_compacted_resource_version_answers_410_gone(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    # Events have no watch cache (kube-apiserver's default), so their watches read etcd directly:
    # once etcd's history is compacted past a resourceVersion, a watch from it is 410 Gone.
    listed = await core_api.list_namespaced_event(namespace)
    old_version = listed.metadata.resource_version
    for name in ("after-1", "after-2"):  # the watch would start at old + 1: compact beyond it
        await core_api.create_namespaced_event(
            namespace,
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": "any", "namespace": namespace},
                "reason": "Test",
                "message": "written after the listed resourceVersion",
            },
        )
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cluster.etcd_url}/v3/kv/range", json={"key": "AA=="}) as r:
            revision = int((await r.json())["header"]["revision"])
        async with session.post(
            f"{cluster.etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
        ) as r:
            assert r.status == 200, await r.text()

    response = await core_api.list_namespaced_event(
        namespace,
        watch=True,
        resource_version=old_version,
        timeout_seconds=5,
        _preload_content=False,
    )
    try:
        first = json.loads(await response.content.readline())
    finally:
        response.release()
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410
    assert first["object"]["reason"] in {"Expired", "Gone"}
