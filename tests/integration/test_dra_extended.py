"""Extended resources backed by a DeviceClass, on the real API server: a pod asking for
`nvidia.com/gpu: 2` on a kwok node whose GPUs are published through DRA (no GPU allocatable; the
DeviceClass `gpu.nvidia.com` has `extendedResourceName: nvidia.com/gpu`) gets a claim made by
gpu-scheduler, with the manifests' RBAC: created with the pod as controller owner and the
`resource.kubernetes.io/extended-resource-claim` annotation, allocated inside one NVLink domain,
reserved for the pod, named in the pod's `status.extendedResourceClaimStatus`; the pod's
deletion takes the claim with it (garbage collection) and frees its devices. A gang whose members
use claims binds all members with distinct devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import D8, LocalCluster
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER, EXTENDED_RESOURCE_CLAIM_ANNOTATION
from tests.dra_objects import claim_template
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.integration.test_dra_allocation import (
    allocated_devices,
    claim_json,
    dra_pod,
    gpus,
    hold,
    uuids,
)
from tests.integration.test_gangs import create_group
from tests.kube import eventually
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

Json = dict[str, Any]
GPU = "nvidia.com/gpu"


def gpu_pod(namespace: str, name: str, gpus: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": namespace,
            "nodeSelector": {TEST_LABEL: namespace},
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {GPU: str(gpus)}}}
            ],
        },
    }


async def claims_of(api: client.ApiClient, namespace: str) -> list[Json]:
    response = await client.ResourceV1Api(api).list_namespaced_resource_claim(
        namespace, _preload_content=False
    )
    items: list[Json] = json.loads(await response.read())["items"]
    return items


async def test_a_gpu_pod_on_a_dra_node_gets_a_claim_of_one_nvlink_domain_and_its_status(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    api = core_api.api_client
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    async with running_daemon(cluster, settings_for(namespace), kubeconfig):
        await hold(api, namespace, "holder", ids["gpu-0"])
        await wait_bound(core_api, namespace, "holder")
        await core_api.create_namespaced_pod(namespace, gpu_pod(namespace, "trainer", 2))
        bound = await wait_bound(core_api, namespace, "trainer")
        uid = bound["metadata"]["uid"]

        async def status_written() -> Json | None:
            pod = await pod_json(core_api, namespace, "trainer")
            found: Json | None = pod["status"].get("extendedResourceClaimStatus")
            return found

        status = await eventually(status_written, what="extendedResourceClaimStatus written")
        claim_name = status["resourceClaimName"]
        devices = await allocated_devices(api, namespace, claim_name)
        claim = await claim_json(api, namespace, claim_name)

        await core_api.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)

        async def collected() -> bool:
            names = [c["metadata"]["name"] for c in await claims_of(api, namespace)]
            return claim_name not in names

        await eventually(collected, what=f"claim {claim_name} gone with its pod")
        # The devices are free again: the same pod gets two GPUs once more.
        await core_api.create_namespaced_pod(namespace, gpu_pod(namespace, "again", 2))
        await wait_bound(core_api, namespace, "again")
    assert bound["spec"]["nodeName"] == node
    assert claim_name.startswith("trainer-extended-resources-")
    # Domain 0 (gpu-0..3) has three free GPUs and domain 1 four: the tightest domain that fits.
    assert devices == ["gpu-1", "gpu-2"]
    metadata = claim["metadata"]
    assert metadata["annotations"][EXTENDED_RESOURCE_CLAIM_ANNOTATION] == "true"
    [owner] = metadata["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "trainer",
        uid,
        True,
    )
    assert DELETE_PROTECTION_FINALIZER in metadata["finalizers"]
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 2,
            },
        }
    ]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
    ]


async def test_without_the_device_class_mapping_a_dra_node_offers_no_gpus(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """A pod asking for an extended resource no DeviceClass serves stays pending on a DRA node,
    with kube-scheduler's reason."""
    await make_nodes(core_api, [isolated(D8, namespace)])
    pod = gpu_pod(namespace, "unserved", 1)
    pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/unserved": "1"}
    async with running_daemon(cluster, settings_for(namespace)):
        await core_api.create_namespaced_pod(namespace, pod)

        async def refused() -> str | None:
            body = await pod_json(core_api, namespace, "unserved")
            for condition in body["status"].get("conditions") or ():
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                    return str(condition.get("message") or "")
            return None

        message = await eventually(refused, what="unserved pod reported")
    assert "Insufficient example.com/unserved" in message


async def test_a_gang_with_claims_binds_all_members_with_distinct_devices_of_one_domain_each(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """A PodGroup of three members, two with a template claim for 2 GPUs and one asking for
    `nvidia.com/gpu: 2`, on one D8 node whose gpu-0 is taken: all bind together, each member's
    claim allocated inside one NVLink domain, no device twice."""
    api = core_api.api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    await client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace, claim_template("two-gpus", namespace, gpus(2))
    )
    await create_group(api, namespace, "pg", 3)
    pods = []
    for name in ("w0", "w1"):
        pod = dra_pod(namespace, name, [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}])
        pods.append(pod)
    pods.append(gpu_pod(namespace, "w2", 2))
    async with running_daemon(cluster, settings_for(namespace)):
        await hold(api, namespace, "holder", ids["gpu-0"])
        await wait_bound(core_api, namespace, "holder")
        for pod in pods:
            pod["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
            await core_api.create_namespaced_pod(namespace, pod)
        for name in ("w0", "w1", "w2"):
            await wait_bound(core_api, namespace, name)
        claims = {
            owner_of(c): c for c in await claims_of(api, namespace) if owner_of(c) != "holder"
        }
        devices = {
            name: sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
            for name, claim in claims.items()
        }
    assert sorted(devices) == ["w0", "w1", "w2"]
    taken = [d for held in devices.values() for d in held]
    assert len(taken) == len(set(taken)) == 6 and "gpu-0" not in taken
    for held in devices.values():
        assert len({int(d.removeprefix("gpu-")) // 4 for d in held}) == 1, devices


def owner_of(claim: Json) -> str:
    owners = claim["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("name") or claim["metadata"]["name"])
