"""Consumable capacity (DRAConsumableCapacity) on the real API server: an S8 node publishes its
eight H200 GPUs as devices that allow multiple allocations, memory as a consumable capacity
(default 140Gi, shares from 1Gi in steps of 1Gi). gpu-scheduler packs fractional claims onto
one GPU, keeps whole GPUs and a whole NVLink domain for whole-GPU claims, writes a `shareID`
and `consumedCapacity` per result (which the API server validates and keeps), and once the
fractional pods are gone their capacity serves a new claim."""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import S8, LocalCluster
from hack.localcluster.dra import DRIVER, slice_name
from tests.dra_objects import claim_spec, claim_template, exact, request, resource_claim
from tests.integration.test_dra_allocation import (
    claim_json,
    dra_pod,
    template_claim_name,
)
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for, wait_bound

Json = dict[str, Any]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SHARES = 4


def memory(gib: int) -> Json:
    spec = exact(DRIVER, count=1, capacity={"requests": {"memory": f"{gib}Gi"}})
    return claim_spec(request("gpu", spec))


def whole(count: int) -> Json:
    return claim_spec(request("gpu", exact(DRIVER, count=count)))


async def results(api: client.ApiClient, namespace: str, name: str) -> list[Json]:
    """The claim's allocation results, once it is allocated."""

    async def found() -> list[Json] | None:
        claim = await claim_json(api, namespace, name)
        allocation = (claim.get("status") or {}).get("allocation")
        return list(allocation["devices"]["results"]) if allocation else None

    return await eventually(found, what=f"claim {namespace}/{name} allocated")


async def start_pod(core: client.CoreV1Api, namespace: str, name: str, source: Json) -> None:
    await core.create_namespaced_pod(
        namespace, dra_pod(namespace, name, [{"name": "gpu", **source}])
    )


async def test_fractions_pack_onto_one_gpu_and_whole_gpus_and_a_domain_stay_free(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api = core_api.api_client
    resource = client.ResourceV1Api(api)
    [node] = await make_nodes(core_api, [isolated(S8, namespace)])
    response = await resource.read_resource_slice(slice_name(node), _preload_content=False)
    published = json.loads(await response.read())["spec"]["devices"][0]
    # The API server keeps the fields of DRAConsumableCapacity: the gate is on.
    assert published["allowMultipleAllocations"] is True
    assert published["capacity"]["memory"]["requestPolicy"]["default"] == "140Gi"
    await resource.create_namespaced_resource_claim_template(
        namespace, claim_template("tenth", namespace, memory(10))
    )
    for name, spec in (("one", whole(1)), ("quad", whole(4))):
        await resource.create_namespaced_resource_claim(
            namespace, resource_claim(name, namespace, spec)
        )
    async with running_daemon(cluster, settings_for(namespace)):
        for index in range(SHARES):
            await start_pod(
                core_api, namespace, f"frac-{index}", {"resourceClaimTemplateName": "tenth"}
            )
            await wait_bound(core_api, namespace, f"frac-{index}")
        claims = [
            await template_claim_name(core_api, namespace, f"frac-{index}")
            for index in range(SHARES)
        ]
        shares = [(await results(api, namespace, name))[0] for name in claims]
        for name in ("one", "quad"):
            await start_pod(core_api, namespace, name, {"resourceClaimName": name})
            await wait_bound(core_api, namespace, name)
        one = await results(api, namespace, "one")
        quad = await results(api, namespace, "quad")
        for index in range(SHARES):
            await core_api.delete_namespaced_pod(f"frac-{index}", namespace, grace_period_seconds=0)

        async def deallocated() -> bool:
            found = await resource.list_namespaced_resource_claim(namespace)
            names = {claim.metadata.name for claim in found.items}
            return not names & set(claims)

        await eventually(deallocated, what="the fractional claims deleted with their pods")
        # 135Gi fit only an untouched GPU: gpu-0 is one again once its shares are gone (with
        # them still there it would have had 100Gi left, and the claim would go to gpu-2).
        await resource.create_namespaced_resource_claim(
            namespace, resource_claim("big", namespace, memory(135))
        )
        await start_pod(core_api, namespace, "big", {"resourceClaimName": "big"})
        await wait_bound(core_api, namespace, "big")
        big = await results(api, namespace, "big")
    assert [share["device"] for share in shares] == ["gpu-0"] * SHARES  # packed
    assert all(UUID.fullmatch(share["shareID"]) for share in shares)
    assert len({share["shareID"] for share in shares}) == SHARES
    assert all(share["consumedCapacity"] == {"memory": "10Gi"} for share in shares)
    assert all(share["pool"] == node and share["driver"] == DRIVER for share in shares)
    # A whole GPU: an untouched one, in the domain the shares broke already.
    assert [r["device"] for r in one] == ["gpu-1"]
    assert one[0]["consumedCapacity"] == {"memory": "140Gi"}
    # Four whole GPUs: the NVLink domain 4-7, left whole.
    assert [r["device"] for r in quad] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert [r["device"] for r in big] == ["gpu-0"]
    assert big[0]["consumedCapacity"] == {"memory": "135Gi"}
