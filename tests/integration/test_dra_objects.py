"""Dynamic Resource Allocation objects (resource.k8s.io/v1) on the real API server: a DeviceClass,
a ResourceSlice of eight NVIDIA-like GPUs for a node that does not exist, a ResourceClaimTemplate
and a ResourceClaim are created, read back as the JSON the informers see, and parsed. The
records carry no FieldErrors, the pool is complete, and attributes, capacities, taints and the
server's defaults come out typed as the server returns them."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.model.claims import parse_resource_claim, parse_resource_claim_template
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.pools import gather_pools
from scheduler.model.semver import Version
from tests.dra_objects import (
    DRIVER,
    GPU_CLASS_SELECTOR,
    claim_spec,
    claim_template,
    device_class,
    exact,
    gpu_claim_spec,
    gpu_device,
    opaque,
    request,
    resource_claim,
    resource_slice,
    taint,
)

H100_SELECTOR = f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')"


async def served(response: Any) -> dict[str, Any]:
    """The JSON of a `_preload_content=False` response, as an informer decodes it."""
    body: dict[str, Any] = json.loads(await response.read())
    return body


async def test_dra_objects_round_trip_through_the_api_server(
    api_client: client.ApiClient, namespace: str
) -> None:
    resource = client.ResourceV1Api(api_client)
    node = f"{namespace}-node"
    class_name = f"gpu.{namespace}"
    slice_name = f"{namespace}-gpus"
    devices = [gpu_device(i, node=node) for i in range(8)]
    for device in devices:
        device["attributes"]["resource.kubernetes.io/numaNode"] = {"int": device_index(device) // 4}
    devices[5]["taints"] = [taint("gpu.nvidia.com/xid", "NoSchedule", "48")]
    template_spec = claim_spec(
        request(
            "gpu",
            None,
            {"name": "h200", "deviceClassName": class_name},
            exact(class_name, name="h100", count=2, expressions=(H100_SELECTOR,)),
        ),
        config=[opaque(requests=["gpu"])],
    )
    claim_body = gpu_claim_spec(2)
    claim_body["devices"]["requests"][0]["exactly"].update(
        deviceClassName=class_name,
        tolerations=[{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}],
        capacity={"requests": {"memory": "40Gi"}},
    )
    claim_body["devices"]["constraints"].append({"distinctAttribute": f"{DRIVER}/uuid"})
    try:
        await resource.create_device_class(
            device_class(
                class_name,
                expressions=(GPU_CLASS_SELECTOR,),
                extended_resource_name=f"example.com/{namespace}-gpu",
                config=[opaque()],
            )
        )
        await resource.create_resource_slice(resource_slice(slice_name, node=node, devices=devices))
        await resource.create_namespaced_resource_claim_template(
            namespace, claim_template("gpus", namespace, template_spec)
        )
        await resource.create_namespaced_resource_claim(
            namespace, resource_claim("trainer-gpus", namespace, claim_body)
        )

        class_json = await served(
            await resource.read_device_class(class_name, _preload_content=False)
        )
        slice_json = await served(
            await resource.read_resource_slice(slice_name, _preload_content=False)
        )
        template_json = await served(
            await resource.read_namespaced_resource_claim_template(
                "gpus", namespace, _preload_content=False
            )
        )
        claim_json = await served(
            await resource.read_namespaced_resource_claim(
                "trainer-gpus", namespace, _preload_content=False
            )
        )

        parsed_class = parse_device_class(class_json)
        assert parsed_class.errors == ()
        assert parsed_class.selectors == (GPU_CLASS_SELECTOR,)
        assert parsed_class.extended_resource_name == f"example.com/{namespace}-gpu"
        assert '"kind":"GpuConfig"' in parsed_class.config[0].parameters

        parsed_slice = parse_resource_slice(slice_json)
        assert parsed_slice.errors == ()
        assert (parsed_slice.driver, parsed_slice.pool.name) == (DRIVER, node)
        assert parsed_slice.node_selection.node_name == node
        gpu5 = parsed_slice.devices[5]
        assert gpu5.attributes[f"{DRIVER}/productName"] == "NVIDIA H200"
        assert gpu5.attributes["resource.kubernetes.io/numaNode"] == 1
        assert gpu5.attributes["resource.kubernetes.io/pciBusID"] == "0000:ab:00.0"
        version = gpu5.attributes[f"{DRIVER}/driverVersion"]
        assert isinstance(version, Version) and (version.major, version.patch) == (580, 4)
        assert slice_json["spec"]["devices"][5]["capacity"]["memory"]["value"] == "143771Mi"
        assert gpu5.capacity[f"{DRIVER}/memory"].value == Decimal(143771 * 2**20)
        [xid] = gpu5.taints
        assert (xid.key, xid.value, xid.effect) == ("gpu.nvidia.com/xid", "48", "NoSchedule")
        assert xid.time_added is not None  # set by the API server

        [pool] = gather_pools([parsed_slice], node, {})
        assert pool.usable and pool.generation == parsed_slice.pool.generation
        assert [entry.device.name for entry in pool.devices] == [f"gpu-{i}" for i in range(8)]
        assert gather_pools([parsed_slice], "another-node", {}) == ()

        template = parse_resource_claim_template(template_json)
        assert template.errors == ()
        [alternatives] = template.spec.requests
        h200, h100 = alternatives.first_available
        served_h200 = template_json["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0]
        assert (served_h200["allocationMode"], served_h200["count"]) == ("ExactCount", 1)
        assert (h200.allocation_mode, h200.count, h100.count) == ("ExactCount", 1, 2)
        assert h100.selectors == (H100_SELECTOR,)

        claim = parse_resource_claim(claim_json)
        assert claim.errors == ()
        assert claim.key == f"{namespace}/trainer-gpus" and claim.allocation is None
        [gpus] = claim.spec.requests
        assert gpus.exactly is not None and gpus.exactly.count == 2
        assert gpus.exactly.device_class_name == class_name
        assert gpus.exactly.capacity_requests == {"memory": Decimal(40 * 2**30)}
        served_toleration = claim_json["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
        assert served_toleration[0]["operator"] == "Equal"  # defaulted by the server
        assert gpus.exactly.tolerations[0].operator == "Equal"
        assert gpus.exactly.tolerations[0].effect == "NoSchedule"
        match, distinct = claim.spec.constraints
        assert match.match_attribute == "resource.kubernetes.io/pcieRoot"
        assert distinct.distinct_attribute == f"{DRIVER}/uuid"
    finally:
        await _delete(resource.delete_namespaced_resource_claim("trainer-gpus", namespace))
        await _delete(resource.delete_namespaced_resource_claim_template("gpus", namespace))
        await _delete(resource.delete_resource_slice(slice_name))
        await _delete(resource.delete_device_class(class_name))


def device_index(device: dict[str, Any]) -> int:
    return int(str(device["name"]).removeprefix("gpu-"))


async def _delete(call: Any) -> None:
    """Await a delete; an object already gone is fine (cleanup after a failed create)."""
    try:
        await call
    except ApiException as error:
        if error.status != 404:
            raise
