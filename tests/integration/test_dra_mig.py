"""MIG placements as partitionable devices on the real API server: an M8 node publishes each of
its 8 H200 GPUs whole and as every MIG placement (one counter set per GPU, counters-only slice
plus one slice of devices per GPU), the API server accepts them, and gpu-scheduler, running in
process, places MIG claims fragmentation-aware, across the GPUs of a node and across nodes. The
same claims replayed through the allocator with its order off (upstream's first fit, domain map
None) on the very slices the API server holds show what first fit would have done instead."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import M8, LocalCluster
from hack.localcluster.dra import DRIVER, GPU_CLASS
from hack.localcluster.dra_mig import MIG_CLASS
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.pools import gather_pools
from tests.dra_objects import claim_spec, exact, request, resource_claim
from tests.integration.test_dra_allocation import allocated_devices, dra_pod
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for, wait_bound

Json = dict[str, Any]


def mig(profile: str) -> Json:
    selector = f"device.attributes['{DRIVER}'].profile == '{profile}'"
    return claim_spec(request("mig", exact(MIG_CLASS, count=1, expressions=[selector])))


def whole() -> Json:
    return claim_spec(request("gpu", exact(GPU_CLASS, count=1)))


SEQUENCE: list[tuple[str, Json]] = [
    ("small", mig("1g.18gb")),
    ("medium", mig("2g.35gb")),
    ("big", mig("4g.71gb")),
    ("whole", whole()),
]


async def first_fit(
    api: client.ApiClient, node: str, namespace: str, sequence: list[tuple[str, Json]] = SEQUENCE
) -> list[str | None]:
    """The device each claim of `sequence` gets, one after the other, from the allocator with
    upstream's order over the node's slices and the classes as the API server holds them."""
    resource = client.ResourceV1Api(api)
    response = await resource.list_resource_slice(
        field_selector=f"spec.nodeName={node}", _preload_content=False
    )
    slices = [parse_resource_slice(item) for item in json.loads(await response.read())["items"]]
    assert all(not s.errors for s in slices)
    pools = gather_pools(slices, node, {})
    classes = {}
    for name in (MIG_CLASS, GPU_CLASS):
        raw = await resource.read_device_class(name, _preload_content=False)
        classes[name] = parse_device_class(json.loads(await raw.read()))
    taken: set[tuple[str, str, str]] = set()
    chosen: list[str | None] = []
    matcher = CelSelectors()
    for name, spec in sequence:
        claim = parse_resource_claim(resource_claim(f"ff-{name}", namespace, spec))
        outcome = Allocator(classes, frozenset(taken), matcher).allocate(
            node, {}, pools, [claim], None
        )
        if outcome.allocations is None:
            chosen.append(None)
            continue
        [result] = outcome.allocations[0].results
        taken.add(result.device_id)
        chosen.append(result.device_id[2])
    return chosen


async def place(
    core_api: client.CoreV1Api, namespace: str, sequence: list[tuple[str, Json]]
) -> list[tuple[str, str]]:
    """Create each claim of `sequence` and a pod using it, one after the other, each bound
    before the next; the node and device each gets."""
    resource = client.ResourceV1Api(core_api.api_client)
    for name, spec in sequence:
        await resource.create_namespaced_resource_claim(
            namespace, resource_claim(name, namespace, spec)
        )
        pod = dra_pod(namespace, name, [{"name": "dev", "resourceClaimName": name}])
        await core_api.create_namespaced_pod(namespace, pod)
        await wait_bound(core_api, namespace, name)
    return await placements(core_api, namespace, sequence)


async def placements(
    core_api: client.CoreV1Api, namespace: str, sequence: list[tuple[str, Json]]
) -> list[tuple[str, str]]:
    """The node of each pod of `sequence` and the device of its claim."""
    found = []
    for name, _ in sequence:
        bound = await wait_bound(core_api, namespace, name)
        [device] = await allocated_devices(core_api.api_client, namespace, name)
        found.append((bound["spec"]["nodeName"], device))
    return found


async def test_mig_placements_are_chosen_fragmentation_aware(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api = core_api.api_client
    [node] = await make_nodes(core_api, [isolated(M8, namespace)])
    async with running_daemon(cluster, settings_for(namespace)):
        placed = [device for _, device in await place(core_api, namespace, SEQUENCE)]
    assert {node} == {bound for bound, _ in await placements(core_api, namespace, SEQUENCE)}
    # The 1g takes the top slice of GPU 0 and the 2g the next free pair below it, so GPU 0's
    # only 4g placement (slices 0-3) survives; the 4g takes it, and GPU 1 stays whole for the
    # full-GPU claim.
    assert placed == [
        "gpu-0-mig-1g-18gb-6",
        "gpu-0-mig-2g-35gb-4",
        "gpu-0-mig-4g-71gb-0",
        "gpu-1",
    ]
    # First fit fills GPU 0 from slice 0, which kills its 4g placement: the 4g breaks into
    # GPU 1 and the full GPU has to take GPU 2.
    assert await first_fit(api, node, namespace) == [
        "gpu-0-mig-1g-18gb-0",
        "gpu-0-mig-2g-35gb-2",
        "gpu-1-mig-4g-71gb-0",
        "gpu-2",
    ]


ACROSS_GPUS: list[tuple[str, Json]] = [
    ("one", mig("1g.18gb")),
    ("two", mig("3g.71gb")),
    ("three", mig("3g.71gb")),
    ("four", mig("1g.18gb")),
    ("five", mig("3g.71gb")),
]


async def test_a_small_claim_fills_the_most_fragmented_gpu(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    [node] = await make_nodes(core_api, [isolated(M8, namespace)])
    async with running_daemon(cluster, settings_for(namespace)):
        placed = [device for _, device in await place(core_api, namespace, ACROSS_GPUS)]
    # The second 1g goes beside GPU 0's 3g, where it costs a 2g's room a 1g's, not to GPU 1,
    # where it would cost the 4g's room (the earlier order, by the most left after it, sent
    # it there): the last 3g takes GPU 1's other half and GPUs 2-7 stay whole.
    assert placed == [
        "gpu-0-mig-1g-18gb-6",
        "gpu-0-mig-3g-71gb-0",
        "gpu-1-mig-3g-71gb-4",
        "gpu-0-mig-1g-18gb-4",
        "gpu-1-mig-3g-71gb-0",
    ]
    # First fit fills GPU 0 from slice 0 and keeps GPUs 2-7 whole here too.
    assert await first_fit(core_api.api_client, node, namespace, ACROSS_GPUS) == [
        "gpu-0-mig-1g-18gb-0",
        "gpu-0-mig-3g-71gb-4",
        "gpu-1-mig-3g-71gb-0",
        "gpu-0-mig-1g-18gb-1",
        "gpu-1-mig-3g-71gb-4",
    ]


async def test_a_small_claim_joins_the_node_already_partitioned(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """Two M8 nodes: after a 1g lands on one, the next 1g scores best beside it (nothing
    lost, 100 less the GPU's largest placement before) and not on the other node, where it
    would break a whole GPU (100 less about 53); the other node stays whole for 8 whole GPUs."""
    nodes = await make_nodes(core_api, [isolated(M8, namespace, count=2)])
    eight = claim_spec(request("gpus", exact(GPU_CLASS, count=8)))
    sequence = [("first", mig("1g.18gb")), ("second", mig("1g.18gb")), ("eight", eight)]
    async with running_daemon(cluster, settings_for(namespace)):
        await place(core_api, namespace, sequence[:2])
        resource = client.ResourceV1Api(core_api.api_client)
        await resource.create_namespaced_resource_claim(
            namespace, resource_claim("eight", namespace, eight)
        )
        pod = dra_pod(namespace, "eight", [{"name": "dev", "resourceClaimName": "eight"}])
        await core_api.create_namespaced_pod(namespace, pod)
        whole = await wait_bound(core_api, namespace, "eight")
    [first, second] = await placements(core_api, namespace, sequence[:2])
    assert first[0] == second[0] and {first[0], whole["spec"]["nodeName"]} == set(nodes)
    assert [first[1], second[1]] == ["gpu-0-mig-1g-18gb-6", "gpu-0-mig-1g-18gb-5"]
    devices = await allocated_devices(core_api.api_client, namespace, "eight")
    assert len(devices) == 8
