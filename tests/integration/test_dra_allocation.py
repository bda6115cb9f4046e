"""DynamicResources on the real API server: gpu-scheduler allocates the devices of pods'
ResourceClaims on kwok nodes whose GPUs are published through DRA (NVIDIA-like ResourceSlices,
driver gpu.nvidia.com, domains 0-3 and 4-7 by GPU UUID), writes the allocation, the
delete-protection finalizer and the reservation, and binds; the resourceclaim controller of the
real kube-controller-manager makes the claims of templates and deallocates them when the pod is
gone."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER, slice_name
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER
from tests.dra_objects import claim_spec, claim_template, exact, request, resource_claim
from tests.kube import eventually
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

Json = dict[str, Any]


def dra_pod(namespace: str, name: str, claims: list[Json]) -> Json:
    """A pod of this test's scheduler on this test's nodes, using `claims`
    (spec.resourceClaims entries), its container naming each."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": namespace,
            "nodeSelector": {TEST_LABEL: namespace},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                }
            ],
            "resourceClaims": claims,
        },
    }


def gpus(count: int, *selectors: str) -> Json:
    return claim_spec(request("gpus", exact(DRIVER, count=count, expressions=selectors)))


async def uuids(api: client.ApiClient, node: str) -> dict[str, str]:
    """Device name -> its GPU UUID, from the node's ResourceSlice."""
    response = await client.ResourceV1Api(api).read_resource_slice(
        slice_name(node), _preload_content=False
    )
    body = json.loads(await response.read())
    return {
        d["name"]: d["attributes"][f"{DRIVER}/uuid"]["string"]
        if f"{DRIVER}/uuid" in d["attributes"]
        else d["attributes"]["uuid"]["string"]
        for d in body["spec"]["devices"]
    }


async def claim_json(api: client.ApiClient, namespace: str, name: str) -> Json:
    response = await client.ResourceV1Api(api).read_namespaced_resource_claim(
        name, namespace, _preload_content=False
    )
    body: Json = json.loads(await response.read())
    return body


async def allocated_devices(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    async def devices() -> list[str] | None:
        claim = await claim_json(api, namespace, name)
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return None
        return sorted(r["device"] for r in allocation["devices"]["results"])

    return await eventually(devices, what=f"claim {namespace}/{name} allocated")


async def template_claim_name(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    async def name() -> str | None:
        body = await pod_json(core, namespace, pod)
        for entry in (body.get("status") or {}).get("resourceClaimStatuses") or ():
            if entry.get("resourceClaimName"):
                return str(entry["resourceClaimName"])
        return None

    return await eventually(name, what=f"claim of {namespace}/{pod} created")


async def hold(api: client.ApiClient, namespace: str, name: str, uuid: str) -> None:
    """A pod holding the one GPU with `uuid` through a claim of its own."""
    selector = f"device.attributes['{DRIVER}'].uuid == '{uuid}'"
    body = resource_claim(name, namespace, gpus(1, selector))
    await client.ResourceV1Api(api).create_namespaced_resource_claim(namespace, body)
    pod = dra_pod(namespace, name, [{"name": "gpu", "resourceClaimName": name}])
    await client.CoreV1Api(api).create_namespaced_pod(namespace, pod)


async def test_two_gpus_of_a_template_land_in_one_nvlink_domain_when_gpu_0_is_taken(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api = core_api.api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    resource = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim_template(
        namespace, claim_template("two-gpus", namespace, gpus(2))
    )
    async with running_daemon(cluster, settings_for(namespace)):
        await hold(api, namespace, "holder", ids["gpu-0"])
        await wait_bound(core_api, namespace, "holder")
        assert await allocated_devices(api, namespace, "holder") == ["gpu-0"]
        pod = dra_pod(
            namespace, "trainer", [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
        )
        await core_api.create_namespaced_pod(namespace, pod)
        bound = await wait_bound(core_api, namespace, "trainer")
        claim_name = await template_claim_name(core_api, namespace, "trainer")
        devices = await allocated_devices(api, namespace, claim_name)
        claim = await claim_json(api, namespace, claim_name)
    assert bound["spec"]["nodeName"] == node
    # Domain 0 (gpu-0..3) has three free GPUs and domain 1 four: the tightest domain that fits.
    assert devices == ["gpu-1", "gpu-2"]
    assert DELETE_PROTECTION_FINALIZER in claim["metadata"]["finalizers"]
    reserved = claim["status"]["reservedFor"]
    assert [(r["resource"], r["name"], r["uid"]) for r in reserved] == [
        ("pods", "trainer", bound["metadata"]["uid"])
    ]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    ]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["request"], r["driver"], r["pool"]) for r in results} == {("gpus", DRIVER, node)}
    events = await pod_events(api, namespace, "trainer")
    scheduled = [e["note"] for e in events if e["reason"] == "Scheduled"]
    assert scheduled and f"{claim_name}: {node}/gpu-1,{node}/gpu-2" in scheduled[0]


async def test_a_split_first_fit_would_make_is_avoided_and_the_claim_is_freed_with_its_pod(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """With gpu-0..2 taken, first fit (kube-scheduler's allocator) would take gpu-3 and gpu-4,
    across the domains; gpu-scheduler takes two of domain 1. Deleting the pod deallocates its
    claim (the finalizer path of the resourceclaim controller)."""
    api = core_api.api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    resource = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("pair", namespace, gpus(2))
    )
    async with running_daemon(cluster, settings_for(namespace)):
        for index in range(3):
            await hold(api, namespace, f"holder-{index}", ids[f"gpu-{index}"])
        for index in range(3):
            await wait_bound(core_api, namespace, f"holder-{index}")
        pod = dra_pod(namespace, "pair-user", [{"name": "gpus", "resourceClaimName": "pair"}])
        await core_api.create_namespaced_pod(namespace, pod)
        await wait_bound(core_api, namespace, "pair-user")
        devices = await allocated_devices(api, namespace, "pair")
        await core_api.delete_namespaced_pod("pair-user", namespace, grace_period_seconds=0)

        async def freed() -> bool:
            claim = await claim_json(api, namespace, "pair")
            status = claim.get("status") or {}
            return not status.get("allocation") and not status.get("reservedFor")

        await eventually(freed, what="claim pair deallocated after its pod went")
    assert devices == ["gpu-4", "gpu-5"]


async def test_bad_claims_get_clear_events_and_do_not_stall_other_pods(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api = core_api.api_client
    await make_nodes(core_api, [isolated(D8, namespace)])
    resource = client.ResourceV1Api(api)
    broken = gpus(1, "device.attributes['gpu.nvidia.com'].noSuchAttribute == 'x'")
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("broken", namespace, broken)
    )
    missing = claim_spec(request("gpus", exact("no-such-class", count=1)))
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("classless", namespace, missing)
    )
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("fine", namespace, gpus(1))
    )
    for name in ("broken", "classless", "fine"):
        pod = dra_pod(namespace, name, [{"name": "gpus", "resourceClaimName": name}])
        await core_api.create_namespaced_pod(namespace, pod)
    pod = dra_pod(namespace, "orphan", [{"name": "gpus", "resourceClaimName": "not-there"}])
    await core_api.create_namespaced_pod(namespace, pod)
    async with running_daemon(cluster, settings_for(namespace)):
        await wait_bound(core_api, namespace, "fine")

        async def note(pod: str, text: str) -> str | None:
            events = await pod_events(api, namespace, pod)
            found = [e["note"] for e in events if e["reason"] == "FailedScheduling"]
            return next((n for n in found if text in n), None)

        cel = await eventually(
            lambda: note("broken", 'running Filter plugin "DynamicResources"'),
            what="FailedScheduling of the pod with a failing selector",
        )
        assert "noSuchAttribute" in cel and len(cel) <= 1024
        classless = await eventually(
            lambda: note("classless", "does not exist"), what="missing class event"
        )
        assert "request gpus: device class no-such-class does not exist" in classless
        orphan = await eventually(lambda: note("orphan", "not found"), what="missing claim")
        assert 'resourceclaim.resource.k8s.io "not-there" not found' in orphan
    for name in ("broken", "classless", "orphan"):
        assert not (await pod_json(core_api, namespace, name))["spec"].get("nodeName")


async def test_an_incomplete_pool_and_a_claim_allocated_elsewhere_are_told_not_stalled(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """A node whose pool says it has two slices but publishes one is being updated: nothing is
    allocated from it ("cannot allocate all claims", as kube-scheduler says). A claim allocated
    on a node outside the pod's reach keeps the pod off every node it can reach ("resourceclaim
    not available on the node"). A pod with a good claim is placed meanwhile."""
    api = core_api.api_client
    resource = client.ResourceV1Api(api)
    [updating, good] = await make_nodes(core_api, [isolated(D8, namespace, count=2)])
    patch = {"spec": {"pool": {"resourceSliceCount": 2}}}
    await resource.patch_resource_slice(slice_name(updating), patch)
    elsewhere = allocated_on(f"{namespace}-gone", "gpu-0")
    body = resource_claim("elsewhere", namespace, gpus(1))
    created = await resource.create_namespaced_resource_claim(namespace, body)
    await resource.patch_namespaced_resource_claim_status(
        "elsewhere", namespace, {"status": elsewhere}
    )
    assert created.metadata.name == "elsewhere"
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("pinned", namespace, gpus(1))
    )
    pinned = dra_pod(namespace, "pinned", [{"name": "gpus", "resourceClaimName": "pinned"}])
    pinned["spec"]["nodeSelector"]["kubernetes.io/hostname"] = updating
    stuck = dra_pod(namespace, "stuck", [{"name": "gpus", "resourceClaimName": "elsewhere"}])
    await core_api.create_namespaced_pod(namespace, pinned)
    await core_api.create_namespaced_pod(namespace, stuck)
    await resource.create_namespaced_resource_claim(
        namespace, resource_claim("fine", namespace, gpus(1))
    )
    fine = dra_pod(namespace, "fine", [{"name": "gpus", "resourceClaimName": "fine"}])
    await core_api.create_namespaced_pod(namespace, fine)
    async with running_daemon(cluster, settings_for(namespace)):
        bound = await wait_bound(core_api, namespace, "fine")

        async def note(pod: str, text: str) -> str | None:
            events = await pod_events(api, namespace, pod)
            found = [e["note"] for e in events if e["reason"] == "FailedScheduling"]
            return next((n for n in found if text in n), None)

        incomplete = await eventually(
            lambda: note("pinned", "cannot allocate all claims"), what="incomplete pool event"
        )
        elsewhere_note = await eventually(
            lambda: note("stuck", "resourceclaim not available on the node"),
            what="claim allocated elsewhere event",
        )
    assert bound["spec"]["nodeName"] == good
    assert incomplete.startswith("0/") and "1 cannot allocate all claims" in incomplete
    assert "2 resourceclaim not available on the node" in elsewhere_note
    for name in ("pinned", "stuck"):
        assert not (await pod_json(core_api, namespace, name))["spec"].get("nodeName")


def allocated_on(node: str, device: str) -> Json:
    """A claim status allocating `device` of `node`'s pool, available on that node only."""
    return {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": DRIVER, "pool": node, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
