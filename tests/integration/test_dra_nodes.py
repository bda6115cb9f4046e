"""The local cluster's DRA nodes (hack/localcluster/dra.py, `gpu_api="dra"`): D8 and D4 come up
Ready with one ResourceSlice each, which the scheduler's model parses into one complete pool of
typed devices; the `gpu.nvidia.com` DeviceClass is there with its extended resource; a
device-plugin node beside them is unchanged; the ResourceClaim controller turns a pod's claim
template into a claim and writes the pod's `status.resourceClaimStatuses`; kwok runs a pod with
claims bound to a DRA node; and deleting the nodes leaves no slice (the harness deletes them, and
the garbage collector does when only the node is deleted)."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import replace
from decimal import Decimal
from typing import Any, cast

from kubernetes_asyncio import client

from hack.localcluster import D4, D8, create_nodes, delete_gpu_device_class, temporary_nodes
from hack.localcluster.dra import DRIVER, GPU_CLASS, NVLINK_DOMAIN_IDS_ANNOTATION
from hack.localcluster.nodes import resource_api, wait_nodes_ready
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import ResourceSlice, parse_resource_slice
from scheduler.model.pools import gather_pools
from scheduler.model.semver import Version
from tests.dra_objects import claim_pod, claim_template, gpu_claim_spec
from tests.kube import bind, eventually
from tests.scheduling import pod_json

Json = dict[str, Any]


async def served(call: Awaitable[Any]) -> Json:
    """The JSON of a `_preload_content=False` response, as an informer decodes it."""
    response = await call
    body: Json = json.loads(await response.read())
    return body


async def slices_of(resource: client.ResourceV1Api, node: str) -> list[Json]:
    """Every ResourceSlice published for `node`."""
    listed = await served(
        resource.list_resource_slice(field_selector=f"spec.nodeName={node}", _preload_content=False)
    )
    items: list[Json] = listed["items"]
    return items


async def node_json(core: client.CoreV1Api, name: str) -> Json:
    return await served(core.read_node(name, _preload_content=False))


async def test_dra_nodes_publish_one_complete_pool_of_typed_gpus(
    core_api: client.CoreV1Api, dra_nodes: list[str]
) -> None:
    resource = resource_api(core_api)
    assert dra_nodes == ["d8-0", "d4-0"]
    expected = {"d8-0": (8, "NVIDIA H200", 143771), "d4-0": (4, "NVIDIA H100 80GB HBM3", 81559)}
    for name in dra_nodes:
        gpus, product, memory_mib = expected[name]
        node = await node_json(core_api, name)
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        [published] = await slices_of(resource, name)
        assert published["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        parsed = parse_resource_slice(published)
        assert parsed.errors == ()
        labels = node["metadata"]["labels"]
        [pool] = gather_pools([parsed], name, labels)
        assert pool.usable and (pool.id.driver, pool.id.pool, pool.generation) == (DRIVER, name, 1)
        devices = [entry.device for entry in pool.devices]
        assert [device.name for device in devices] == [f"gpu-{i}" for i in range(gpus)]
        for device in devices:
            attributes = device.attributes
            assert attributes[f"{DRIVER}/type"] == "gpu"
            assert attributes[f"{DRIVER}/productName"] == product
            assert attributes[f"{DRIVER}/cudaComputeCapability"] == Version("9.0.0", 9, 0, 0)
            assert attributes[f"{DRIVER}/driverVersion"] == Version("580.159.4", 580, 159, 4)
            assert isinstance(attributes["resource.kubernetes.io/numaNode"], int)
            assert str(attributes["resource.kubernetes.io/pciBusID"]).startswith("0000:")
            assert device.capacity[f"{DRIVER}/memory"].value == Decimal(memory_mib * 2**20)
        assert len({d.attributes["resource.kubernetes.io/pciBusID"] for d in devices}) == gpus
        uuids = [str(device.attributes[f"{DRIVER}/uuid"]) for device in devices]
        by_uuid = [
            group.split(",")
            for group in node["metadata"]["annotations"][NVLINK_DOMAIN_IDS_ANNOTATION].split(";")
        ]
        half = gpus // 2
        assert by_uuid == [uuids[:half], uuids[half:]]

    served_class = await served(resource.read_device_class(GPU_CLASS, _preload_content=False))
    device_class = parse_device_class(served_class)
    assert device_class.errors == ()
    assert device_class.extended_resource_name == "nvidia.com/gpu"


async def test_a_device_plugin_node_and_dra_nodes_coexist(
    core_api: client.CoreV1Api, seed_nodes: list[str], dra_nodes: list[str]
) -> None:
    resource = resource_api(core_api)
    listed = await served(resource.list_resource_slice(_preload_content=False))
    every: list[ResourceSlice] = [parse_resource_slice(item) for item in listed["items"]]
    plugin = await node_json(core_api, "g2-0")
    assert "g2-0" in seed_nodes
    assert plugin["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert NVLINK_DOMAIN_IDS_ANNOTATION not in plugin["metadata"]["annotations"]
    assert gather_pools(every, "g2-0", plugin["metadata"]["labels"]) == ()
    for name in dra_nodes:
        [pool] = gather_pools(every, name, {})
        assert pool.id.pool == name and pool.usable


async def test_the_claim_controller_creates_a_templates_claim_for_an_unbound_pod(
    core_api: client.CoreV1Api, namespace: str, dra_nodes: list[str]
) -> None:
    resource = resource_api(core_api)
    template = claim_template("gpus", namespace, gpu_claim_spec(2))
    await resource.create_namespaced_resource_claim_template(namespace, cast(Any, template))
    pod_body = claim_pod("trainer", {"gpus": "gpus"})
    await core_api.create_namespaced_pod(namespace, cast(Any, pod_body))

    async def claim_status() -> list[Json] | None:
        statuses: list[Json] | None = (await pod_json(core_api, namespace, "trainer"))[
            "status"
        ].get("resourceClaimStatuses")
        return statuses

    [status] = await eventually(claim_status, timeout=30, what="resourceClaimStatuses")
    assert status["name"] == "gpus" and status["resourceClaimName"]
    claim_json = await served(
        resource.read_namespaced_resource_claim(
            status["resourceClaimName"], namespace, _preload_content=False
        )
    )
    assert claim_json["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    [owner] = claim_json["metadata"]["ownerReferences"]
    pod = await pod_json(core_api, namespace, "trainer")
    assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
    claim = parse_resource_claim(claim_json)
    assert claim.errors == () and claim.allocation is None
    assert not pod["spec"].get("nodeName")


async def test_kwok_runs_a_pod_with_claims_bound_to_a_dra_node(
    core_api: client.CoreV1Api, namespace: str, dra_nodes: list[str]
) -> None:
    resource = resource_api(core_api)
    template = claim_template("gpus", namespace, gpu_claim_spec(1))
    await resource.create_namespaced_resource_claim_template(namespace, cast(Any, template))
    await core_api.create_namespaced_pod(
        namespace, cast(Any, claim_pod("runner", {"gpus": "gpus"}))
    )
    await bind(core_api, namespace, "runner", "d8-0")

    async def running() -> Json | None:
        pod = await pod_json(core_api, namespace, "runner")
        return pod if pod["status"].get("phase") == "Running" else None

    pod = await eventually(running, timeout=30, what="runner Running")
    assert pod["spec"]["nodeName"] == "d8-0"
    assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]


async def test_deleting_dra_nodes_leaves_no_slice_and_no_class(core_api: client.CoreV1Api) -> None:
    resource = resource_api(core_api)
    spec = replace(D4, type_name="DT", count=2)
    async with temporary_nodes(core_api, [spec]) as names:
        assert names == ["dt-0", "dt-1"]
        for name in names:
            assert len(await slices_of(resource, name)) == 1
        await resource.read_device_class(GPU_CLASS)
    for name in names:
        assert await slices_of(resource, name) == []
    nodes = await core_api.list_node(label_selector="node.kubernetes.io/instance-type=DT")
    assert nodes.items == []
    classes = await resource.list_device_class(field_selector=f"metadata.name={GPU_CLASS}")
    assert classes.items == []


async def test_the_garbage_collector_removes_the_slice_of_a_deleted_node(
    core_api: client.CoreV1Api,
) -> None:
    resource = resource_api(core_api)
    [name] = await create_nodes(core_api, [replace(D8, type_name="DG")])
    try:
        await wait_nodes_ready(core_api, [name])
        assert len(await slices_of(resource, name)) == 1
        await core_api.delete_node(name)

        async def no_slice() -> bool:
            return await slices_of(resource, name) == []

        await eventually(no_slice, timeout=60, what=f"{name}'s slice collected")
    finally:
        await resource.delete_collection_resource_slice(field_selector=f"spec.nodeName={name}")
        assert await delete_gpu_device_class(core_api)
