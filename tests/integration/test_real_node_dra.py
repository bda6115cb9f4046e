"""DRA end to end on the local cluster's real node: gpu-scheduler allocates, kubelet prepares
through Kubernetes' DRA test driver, containerd 2 applies the driver's CDI specs.

gpu-scheduler runs in this process (`tests.scheduling.running_daemon`) and schedules pods onto the
real node whose claims ask for devices of the driver's DeviceClass (`dradriver.DEVICE_CLASS`, four
devices `device-00`..`device-03` in the pool named after the node). Checked here:

- the containers of a pod with a template claim for two devices and of a pod with a plain claim
  for one run, and each one's environment (printed by the probe image's `-env` mode) holds the
  driver's `claim_<claim>_<request>=true` variable of exactly its own claims, and no other;
- kubelet prepared exactly the devices gpu-scheduler wrote into each claim's allocation (its DRA
  checkpoint names pool and device for each claim), and no device twice;
- deleting a pod deallocates its claim (the resourceclaim controller's finalizer path), kubelet
  unprepares it (the driver removes its CDI spec), and a new pod gets those devices again;
- kubelet refuses to start a pod bound by `spec.nodeName` while the claim it names is not
  reserved for it ("is not allowed to use ResourceClaim"), and the pod gpu-scheduler scheduled on
  the same claim is accepted: its reservation is what kubelet checks. Once the claim is
  allocated, the resourceclaim controller reserves it for the bound pod as well (claims may be
  shared), so kubelet's next try admits that one too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from hack.localcluster.dradriver import DraDriver, claim_env_name
from scheduler.kube.client import api_client_for
from tests.dra_objects import claim_template, resource_claim
from tests.kube import eventually, make_namespace
from tests.real_node_dra import (
    POD_TIMEOUT_S,
    Json,
    allocation,
    claim_json,
    claim_names,
    claim_variables,
    devices,
    env_pod,
    pod_json,
    prepared,
    running,
)
from tests.scheduling import running_daemon, settings_for

pytestmark = pytest.mark.real_node


@pytest.fixture
async def api(real_node_cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    """An admin API client of the real node's cluster."""
    api = await api_client_for(str(real_node_cluster.kubeconfig))
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
async def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace, deleted afterwards and waited for: its pods gone and their claims
    deallocated, so the next test finds every device free."""
    core = client.CoreV1Api(api)
    name = await make_namespace(core, request.node.name)
    yield name
    await core.delete_namespace(name)

    async def gone() -> bool:
        namespaces = await core.list_namespace(field_selector=f"metadata.name={name}")
        return not namespaces.items

    await eventually(gone, timeout=POD_TIMEOUT_S, what=f"namespace {name} deleted")


@pytest.fixture
def driver(real_node_cluster: LocalCluster) -> DraDriver:
    assert real_node_cluster.real_node is not None
    assert real_node_cluster.real_node.dra_driver is not None
    return real_node_cluster.real_node.dra_driver


async def test_containers_see_exactly_the_claims_gpu_scheduler_allocated_and_freed_devices_return(
    real_node_cluster: LocalCluster, api: client.ApiClient, namespace: str, driver: DraDriver
) -> None:
    cluster = real_node_cluster
    assert cluster.real_node is not None
    node = cluster.real_node.name
    # Typed Any: these calls take plain manifests, which the client serializes as they are.
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim_template(
        namespace, claim_template("pair", namespace, devices(2))
    )
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("single", namespace, devices(1, "device"))
    )
    async with running_daemon(cluster, settings_for(namespace)):
        pair_pod = env_pod(
            namespace, "trainer", [{"name": "gpus", "resourceClaimTemplateName": "pair"}]
        )
        single_pod = env_pod(namespace, "worker", [{"name": "gpu", "resourceClaimName": "single"}])
        await core.create_namespaced_pod(namespace, pair_pod)
        await core.create_namespaced_pod(namespace, single_pod)
        trainer = await running(api, namespace, "trainer")
        worker = await running(api, namespace, "worker")
        pair = (await claim_names(api, namespace, "trainer"))["gpus"]
        pair_devices = await allocation(api, namespace, pair)
        single_devices = await allocation(api, namespace, "single")
        trainer_env = await claim_variables(api, namespace, "trainer")
        worker_env = await claim_variables(api, namespace, "worker")
        pair_prepared = prepared(driver, namespace, pair)
        single_prepared = prepared(driver, namespace, "single")

        # The freed pair returns: a pod for three devices fits only once they are free again.
        await core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=1)

        async def gone() -> bool:
            claims = await resource.list_namespaced_resource_claim(namespace)
            return pair not in {c.metadata.name for c in claims.items}

        await eventually(gone, timeout=POD_TIMEOUT_S, what=f"claim {pair} deallocated and deleted")
        await eventually(
            lambda: asyncio.to_thread(lambda: not prepared(driver, namespace, pair)),
            what=f"kubelet unprepared {pair}",
        )
        await resource.create_namespaced_resource_claim_template(
            namespace, claim_template("triple", namespace, devices(3))
        )
        triple_pod = env_pod(
            namespace, "grower", [{"name": "gpus", "resourceClaimTemplateName": "triple"}]
        )
        await core.create_namespaced_pod(namespace, triple_pod)
        grower = await running(api, namespace, "grower")
        triple = (await claim_names(api, namespace, "grower"))["gpus"]
        triple_devices = await allocation(api, namespace, triple)
        grower_env = await claim_variables(api, namespace, "grower")
        triple_prepared = prepared(driver, namespace, triple)

    assert {
        trainer["spec"]["nodeName"],
        worker["spec"]["nodeName"],
        grower["spec"]["nodeName"],
    } == {node}
    # The containers' environment names exactly their own claims (the driver's CDI specs).
    assert trainer_env == {f"{claim_env_name(pair, 'devices')}=true"}
    assert worker_env == {f"{claim_env_name('single', 'device')}=true"}
    assert grower_env == {f"{claim_env_name(triple, 'devices')}=true"}
    # kubelet prepared exactly what gpu-scheduler allocated.
    assert len(pair_devices) == 2 and len(single_devices) == 1 and not pair_devices & single_devices
    assert pair_prepared == sorted(pair_devices)
    assert single_prepared == sorted(single_devices)
    all_devices = {(node, f"device-{i:02d}") for i in range(4)}
    assert pair_devices | single_devices <= all_devices
    # Three devices fit only with the freed pair: the new claim holds all but the single one.
    assert triple_devices == all_devices - single_devices
    assert pair_devices <= triple_devices
    assert triple_prepared == sorted(triple_devices)


async def test_kubelet_refuses_a_pod_the_claim_is_not_reserved_for(
    real_node_cluster: LocalCluster, api: client.ApiClient, namespace: str, driver: DraDriver
) -> None:
    cluster = real_node_cluster
    assert cluster.real_node is not None
    node = cluster.real_node.name
    # Typed Any: these calls take plain manifests, which the client serializes as they are.
    core: Any = client.CoreV1Api(api)
    resource: Any = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("shared", namespace, devices(1, "device"))
    )
    claim_entry = [{"name": "gpu", "resourceClaimName": "shared"}]
    # Bound by spec.nodeName, past any scheduler: nobody reserves the claim for it.
    await core.create_namespaced_pod(
        namespace, env_pod(namespace, "intruder", claim_entry, node=node)
    )

    async def refused() -> str | None:
        events = await core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=intruder"
        )
        for event in events.items:
            if event.reason == "FailedPrepareDynamicResources":
                return str(event.message)
        return None

    message = await eventually(refused, timeout=POD_TIMEOUT_S, what="intruder refused by kubelet")
    intruder = await pod_json(api, namespace, "intruder")
    assert intruder["status"].get("phase") == "Pending"
    assert "is not allowed to use ResourceClaim shared" in message

    async with running_daemon(cluster, settings_for(namespace)):
        await core.create_namespaced_pod(namespace, env_pod(namespace, "owner", claim_entry))
        owner = await running(api, namespace, "owner")
        claim = await claim_json(api, namespace, "shared")
        owner_env = await claim_variables(api, namespace, "owner")
        # Once the claim is allocated, the resourceclaim controller reserves it for the bound pod
        # too (a claim may be shared; pkg/controller/resourceclaim/controller.go), so kubelet's
        # next try, after its back-off, admits it on the same device.

        async def reserved_for_both() -> Json | None:
            body = await claim_json(api, namespace, "shared")
            names = {r["name"] for r in body["status"].get("reservedFor") or ()}
            return body if names == {"owner", "intruder"} else None

        shared = await eventually(reserved_for_both, what="claim shared reserved for both pods")

    assert owner["spec"]["nodeName"] == node
    reserved = [(r["resource"], r["name"]) for r in claim["status"]["reservedFor"]]
    assert ("pods", "owner") in reserved
    assert shared["status"]["allocation"] == claim["status"]["allocation"]
    assert owner_env == {f"{claim_env_name('shared', 'device')}=true"}
    assert prepared(driver, namespace, "shared") == sorted(
        await allocation(api, namespace, "shared")
    )
