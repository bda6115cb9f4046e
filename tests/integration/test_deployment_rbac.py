"""The RBAC in manifests/ is enough for the scheduler: run it with that ServiceAccount's token,
binding plain GPU pods (with leader election, conditions and events) and a pod with a DRA claim
(the claim writes of PreBind). The extended-resource claims (create, delete, pods/status) are
checked with the same RBAC in test_dra_extended.py, the fenced claim writes in
test_dra_guard.py."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from hack.localcluster import D8, G2, LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER
from tests.dra_objects import claim_template
from tests.integration.test_dra_allocation import (
    allocated_devices,
    claim_json,
    dra_pod,
    gpus,
    template_claim_name,
)
from tests.kube import eventually
from tests.scheduling import (
    isolated,
    make_nodes,
    our_pod,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

MANIFEST_NAMESPACE = "gpu-scheduler"


def rbac_documents(namespace: str) -> list[dict[str, object]]:
    """manifests/rbac.yaml moved into `namespace`, cluster-wide names made unique."""
    documents = list(yaml.safe_load_all((REPO_ROOT / "manifests" / "rbac.yaml").read_text()))
    text = yaml.safe_dump_all(documents)
    text = text.replace(f"namespace: {MANIFEST_NAMESPACE}", f"namespace: {namespace}")
    moved = list(yaml.safe_load_all(text))
    for document in moved:
        if document["kind"].startswith("Cluster"):
            document["metadata"]["name"] = f"{namespace}-gpu-scheduler"
        if document["kind"] == "ClusterRoleBinding":
            document["roleRef"]["name"] = f"{namespace}-gpu-scheduler"
    return moved


def _token_kubeconfig(cluster: LocalCluster, token: str, path: Path) -> Path:
    assert cluster.pki is not None
    ca = base64.b64encode(cluster.pki.ca_cert.read_bytes()).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {"server": cluster.server, "certificate-authority-data": ca},
                    }
                ],
                "users": [{"name": "scheduler", "user": {"token": token}}],
                "contexts": [
                    {"name": "local", "context": {"cluster": "local", "user": "scheduler"}}
                ],
                "current-context": "local",
            }
        )
    )
    return path


async def scheduler_kubeconfig(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    namespace: str,
    documents: list[dict[str, object]],
    tmp_path: Path,
) -> Path:
    """Apply `documents` (the manifests' RBAC, e.g. from `rbac_documents`, perhaps edited) and
    return a kubeconfig holding a token of their `gpu-scheduler` ServiceAccount in `namespace`."""
    assert cluster.binaries is not None
    await asyncio.to_thread(
        subprocess.run,
        [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}", "apply", "-f", "-"],
        input=yaml.safe_dump_all(documents),
        text=True,
        check=True,
        capture_output=True,
    )
    token = await core.create_namespaced_service_account_token(
        "gpu-scheduler", namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return _token_kubeconfig(cluster, token.status.token, tmp_path / "scheduler.kubeconfig")


async def test_scheduler_runs_with_the_manifest_rbac(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    await make_nodes(core_api, [isolated(G2, namespace)])
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "fits", 2))
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "too-big", 3))
    settings = settings_for(
        namespace,
        binding={"timeoutSeconds": 2},
        leaderElection={
            "enabled": True,
            "leaseName": "gpu-scheduler",
            "leaseNamespace": namespace,
            "leaseDurationSeconds": 4,
            "renewDeadlineSeconds": 3,
            "retryPeriodSeconds": 0.5,
        },
    )
    async with running_daemon(cluster, settings, kubeconfig) as daemon:
        await wait_bound(core_api, namespace, "fits")

        async def condition_written() -> bool:
            pod = await pod_json(core_api, namespace, "too-big")
            return bool(pod["status"].get("conditions"))

        await eventually(condition_written, what="PodScheduled condition patched")

        async def events_written() -> bool:  # written concurrently with the condition patch
            return daemon.recorder.written >= 2  # Scheduled and FailedScheduling events

        await eventually(events_written, timeout=10, what="events written")
    lease = await client.CoordinationV1Api(core_api.api_client).read_namespaced_lease(
        "gpu-scheduler", namespace
    )
    assert lease.spec.lease_duration_seconds in (1, 4)  # released on stop, or still held


async def test_the_manifest_rbac_covers_the_dra_writes(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """DynamicResources' PreBind with the manifests' RBAC: a pod's claim (made by the
    resourceclaim controller from a template) gets the delete-protection finalizer (patch of
    resourceclaims), its allocation and reservation (patch of resourceclaims/status and
    resourceclaims/binding), and the pod is bound; the scheduler read the claims, slices and
    classes through its informers (list, watch). No write was refused."""
    api = core_api.api_client
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    resource: Any = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim_template(
        namespace, claim_template("two-gpus", namespace, gpus(2))
    )
    async with running_daemon(cluster, settings_for(namespace), kubeconfig):
        pod = dra_pod(
            namespace, "trainer", [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
        )
        await core_api.create_namespaced_pod(namespace, pod)
        bound = await wait_bound(core_api, namespace, "trainer")
        claim_name = await template_claim_name(core_api, namespace, "trainer")
        devices = await allocated_devices(api, namespace, claim_name)
        claim = await claim_json(api, namespace, claim_name)
    assert bound["spec"]["nodeName"] == node
    assert len(devices) == 2
    assert DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]
    reserved = claim["status"]["reservedFor"]
    assert [(r["name"], r["uid"]) for r in reserved] == [("trainer", bound["metadata"]["uid"])]
