"""Extended resources backed by a DeviceClass: the claim's requests and mappings as
kube-scheduler 1.37 names them, the class resolver, and the scheduling of an nvidia.com/gpu pod
on a node whose GPUs are published through DRA."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from hack.localcluster import D8, G2_EXPANSION
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.config import SchedulerConfig
from scheduler.core.cycle import larger_than_any_node
from scheduler.core.placement import place
from scheduler.core.profile import default_framework
from scheduler.dra.extended import GENERATE_NAME_SUFFIX, extended_claim, requests_and_mappings
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.planning import plan_gang
from scheduler.model.claims import EXTENDED_RESOURCE_CLAIM_ANNOTATION, parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.extended_requests import (
    ContainerRequests,
    container_extended_requests,
    is_dra_extended_resource_name,
)
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.dynamic_resources import STALE_EXTENDED_CLAIM, plan_claims, pre_filter
from scheduler.state.cache import ClusterCache
from scheduler.state.dra import DraStore
from scheduler.state.dra_handlers import ResourceSliceHandler
from tests.dra_objects import DRIVER, device_class

GPU = "nvidia.com/gpu"


def container(
    index: int, amounts: dict[str, int], *, short: bool = False, names: tuple[str, ...] = ()
) -> ContainerRequests:
    return ContainerRequests(
        index, f"c{index}", short, tuple(sorted({*amounts, *names})), dict(amounts)
    )


def mapping(container_name: str, request: str, resource: str = GPU) -> dict[str, str]:
    return {"containerName": container_name, "resourceName": resource, "requestName": request}


def counts(requests: list[dict[str, Any]]) -> dict[str, int]:
    return {r["name"]: r["exactly"]["count"] for r in requests}


def test_a_request_is_named_after_the_container_and_the_resources_sorted_position() -> None:
    requests, mappings = requests_and_mappings(
        [container(0, {GPU: 2}, names=("cpu", "memory"))], {GPU: "gpu.nvidia.com"}
    )
    # Sorted request names: cpu, memory, nvidia.com/gpu -> position 2.
    assert requests == [
        {
            "name": "container-0-request-2",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 2,
            },
        }
    ]
    assert mappings == [mapping("c0", "container-0-request-2")]


def test_an_init_container_reuses_the_devices_of_later_containers() -> None:
    init = container(0, {GPU: 1}, short=True)
    main = container(1, {GPU: 2})
    requests, mappings = requests_and_mappings([init, main], {GPU: "k"})
    assert counts(requests) == {"container-1-request-0": 2}
    assert mappings == [
        mapping("c1", "container-1-request-0"),
        mapping("c0", "container-1-request-0"),
    ]


def test_an_init_container_asks_only_for_what_later_containers_lack() -> None:
    init = container(0, {GPU: 3}, short=True)
    main = container(1, {GPU: 2})
    requests, mappings = requests_and_mappings([init, main], {GPU: "k"})
    assert counts(requests) == {"container-0-request-0": 1, "container-1-request-0": 2}
    assert mappings == [
        mapping("c1", "container-1-request-0"),
        mapping("c0", "container-1-request-0"),
        mapping("c0", "container-0-request-0"),
    ]


def test_init_containers_share_their_largest_request() -> None:
    first = container(0, {GPU: 1}, short=True)
    second = container(1, {GPU: 3}, short=True)
    requests, mappings = requests_and_mappings([first, second], {GPU: "k"})
    assert counts(requests) == {"container-1-request-0": 3}
    assert mappings == [
        mapping("c0", "container-1-request-0"),
        mapping("c1", "container-1-request-0"),
    ]


def test_a_sidecar_is_long_lived_and_requests_sort_by_name() -> None:
    sidecar = container(0, {GPU: 1})  # an init container with restartPolicy Always
    mains = [container(i, {GPU: 1}) for i in range(1, 12)]
    requests, _ = requests_and_mappings([sidecar, *mains], {GPU: "k"})
    names = [r["name"] for r in requests]
    assert names == sorted(names)
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]


def test_resources_without_a_class_get_no_request() -> None:
    requests, mappings = requests_and_mappings(
        [container(0, {GPU: 1, "example.com/foo": 2})], {"example.com/foo": "foo"}
    )
    assert counts(requests) == {"container-0-request-0": 2}
    assert mappings == [mapping("c0", "container-0-request-0", "example.com/foo")]


def test_container_requests_take_limits_as_defaults_and_skip_fractions() -> None:
    spec = {
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}},
            {"name": "warm", "resources": {"requests": {GPU: 2, "cpu": "1"}}},
        ],
        "containers": [
            {"name": "main", "resources": {"requests": {"example.com/x": "500m", GPU: "4"}}},
            {"name": "cpu-only", "resources": {"requests": {"cpu": "2"}}},
        ],
    }
    found = container_extended_requests(spec)
    assert [(c.index, c.name, c.short_lived, dict(c.amounts)) for c in found] == [
        (0, "side", False, {GPU: 1}),
        (1, "warm", True, {GPU: 2}),
        (2, "main", False, {GPU: 4}),
    ]
    assert found[1].request_names == ("cpu", GPU)


def test_dra_extended_resource_names() -> None:
    assert is_dra_extended_resource_name(GPU)
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu.example.com")
    for native in ("cpu", "kubernetes.io/foo", "requests.example.com/x", "hugepages-2Mi"):
        assert not is_dra_extended_resource_name(native)


def test_the_newest_class_serves_an_extended_resource_and_a_tie_goes_to_the_smaller_name() -> None:
    store = DraStore()

    def put(name: str, created: str) -> None:
        manifest = device_class(name, extended_resource_name=GPU)
        manifest["metadata"]["creationTimestamp"] = created
        store.put_class(parse_device_class(manifest))

    put("b-class", "2026-01-01T00:00:00Z")
    assert store.class_for_resource(GPU) == "b-class"
    put("c-class", "2026-02-01T00:00:00Z")
    assert store.class_for_resource(GPU) == "c-class"
    put("a-class", "2026-02-01T00:00:00Z")
    assert store.class_for_resource(GPU) == "a-class"
    store.drop_class("a-class")
    assert store.class_for_resource(GPU) == "c-class"
    assert store.class_for_resource("deviceclass.resource.kubernetes.io/b-class") == "b-class"
    assert store.class_for_resource("example.com/other") is None


def gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "containers": [{"name": "main", "resources": {"limits": {GPU: str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }


def dra_cluster(with_class: bool = True) -> ClusterCache:
    """One 8-GPU DRA node (`dra`) and one 8-GPU device-plugin node (`dp`); GPU 0 of the DRA node
    taken by a claim."""
    cache = ClusterCache()
    if with_class:
        cache.dra.put_class(parse_device_class(gpu_device_class()))
    cache.add_or_update_node(parse_node(node_manifest(D8, "dra")))
    cache.add_or_update_node(parse_node(node_manifest(G2_EXPANSION, "dp")))
    ResourceSliceHandler(cache.dra).on_add(node_resource_slice("dra", "u", D8.gpu_model(), 8))
    taken = {
        "metadata": {"name": "taken", "namespace": "default", "uid": "uid-taken"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "g", "driver": DRIVER, "pool": "dra", "device": "gpu-0"}
                    ]
                }
            }
        },
    }
    cache.dra.put_claim(parse_resource_claim(taken))
    return cache


def test_a_gpu_pod_fits_a_dra_node_through_its_claim_inside_one_nvlink_domain() -> None:
    cache = dra_cluster()
    pod = parse_pod(gpu_pod("p", 2))
    snapshot = Snapshot(cache)
    framework = default_framework(SchedulerConfig())
    evaluation = framework.evaluate(pod, snapshot, choose=False)
    feasible = {snapshot.names[r] for r in np.flatnonzero(evaluation.diagnosis.feasible)}
    assert feasible == {"dra", "dp"}
    row = cache.row_of["dra"]
    plan = plan_claims(evaluation.state, row, pod)
    assert plan is not None and plan.create is not None and not plan.allocate
    made, allocation = plan.create
    indices = sorted(int(r.device.removeprefix("gpu-")) for r in allocation.results)
    assert len(indices) == 2 and 0 not in indices  # gpu-0 is taken
    assert {i // 4 for i in indices} in ({0}, {1})  # one NVLink domain: gpu-0..3 or gpu-4..7
    assert made.claim.name == "p" + GENERATE_NAME_SUFFIX
    assert made.manifest["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert made.mappings == (
        {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"},
    )
    # The device-plugin node needs no claim; the GPU indices are chosen there as before.
    on_dp = plan_claims(evaluation.state, cache.row_of["dp"], pod)
    assert on_dp is not None and on_dp.create is None and on_dp.empty


def test_placed_on_a_dra_node_the_pod_holds_no_gpu_index_and_no_row_gpu() -> None:
    cache = dra_cluster()
    pod = parse_pod(gpu_pod("p", 2))
    snapshot = Snapshot(cache)
    framework = default_framework(SchedulerConfig())
    evaluation = framework.evaluate(pod, snapshot, choose=False)
    row = cache.row_of["dra"]
    chosen = replace(evaluation, chosen=row)
    placement = place(cache, pod, chosen)
    assert placement.node == "dra" and placement.gpus == ()
    cache.assume(pod, "dra", placement.gpus)
    assert cache.gpus_of(pod.key) == ()
    assert int(cache.requested[row, 4]) == 0  # the GPU column of the row


def test_without_a_class_a_dra_node_offers_no_gpus() -> None:
    cache = dra_cluster(with_class=False)
    pod = parse_pod(gpu_pod("p", 2))
    snapshot = Snapshot(cache)
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, snapshot, choose=False)
    feasible = {snapshot.names[r] for r in np.flatnonzero(evaluation.diagnosis.feasible)}
    assert feasible == {"dp"}
    assert "Insufficient nvidia.com/gpu" in evaluation.diagnosis.message(snapshot.valid)


def test_a_claim_left_by_an_earlier_attempt_is_reported_stale() -> None:
    cache = dra_cluster()
    pod = parse_pod(gpu_pod("p", 2))
    made = extended_claim("default", "p", "uid-p", pod.extended, {GPU: "gpu.nvidia.com"})
    assert made is not None
    stored = {
        **made.manifest,
        "metadata": {
            **made.manifest["metadata"],
            "name": "p-extended-resources-abcde",
            "uid": "c1",
        },
    }
    cache.dra.put_claim(parse_resource_claim(stored))
    assert pre_filter(pod, cache.dra) == (STALE_EXTENDED_CLAIM, None)
    cache.dra.drop_claim("default/p-extended-resources-abcde")
    message, state = pre_filter(pod, cache.dra)
    assert message == "" and state is not None and state.extended is not None


def test_the_in_memory_allocation_ends_when_the_created_claim_is_seen_allocated() -> None:
    cache = dra_cluster()
    pod = parse_pod(gpu_pod("p", 2))
    snapshot = Snapshot(cache)
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, snapshot, choose=False)
    plan = plan_claims(evaluation.state, cache.row_of["dra"], pod)
    assert plan is not None and plan.create is not None
    made, allocation = plan.create
    cache.dra.assume(pod.key, {made.claim.key: ("", allocation)})
    assert cache.dra.in_flight(made.claim.key) is not None
    results = [
        {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
        for r in allocation.results
    ]
    stored = {
        **made.manifest,
        "metadata": {**made.manifest["metadata"], "name": "p-extended-resources-x1", "uid": "c1"},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    cache.dra.put_claim(parse_resource_claim(stored))
    assert cache.dra.in_flight(made.claim.key) is None
    assert cache.dra.extended_claim_of("uid-p") is not None


def test_gang_members_prefer_the_node_with_most_room_and_get_device_plugin_gpus_there() -> None:
    cache = dra_cluster()  # dp: 8 free GPUs; dra: 7 free devices; the gang asks for 8
    members = [parse_pod(gpu_pod(f"m{i}", 4)) for i in range(2)]
    plan = plan_gang(cache, default_framework(SchedulerConfig()), members, need=2)
    assert plan.fits and {p.node for p in plan.placed} == {"dp"}
    assert all(p.gpus and p.claims is None for p in plan.placed)


def test_gang_members_on_a_dra_node_get_distinct_devices_through_their_claims() -> None:
    cache = dra_cluster()
    cache.remove_node("dp")
    members = [parse_pod(gpu_pod(f"m{i}", 2)) for i in range(3)]
    plan = plan_gang(cache, default_framework(SchedulerConfig()), members, need=3)
    assert plan.fits and {p.node for p in plan.placed} == {"dra"}
    taken: list[str] = []
    for member in plan.placed:
        assert member.gpus == () and member.claims is not None and member.claims.create
        _, allocation = member.claims.create
        devices = sorted(r.device for r in allocation.results)
        assert len({int(d.removeprefix("gpu-")) // 4 for d in devices}) == 1  # one domain
        taken += devices
    assert len(taken) == len(set(taken)) == 6 and "gpu-0" not in taken
    # Devices of the placed members are in flight in the store until their writes land.
    assert len(cache.dra.in_use()) == 7


def test_a_gang_that_does_not_fit_gives_its_members_devices_back() -> None:
    cache = dra_cluster()
    cache.remove_node("dp")
    members = [parse_pod(gpu_pod(f"m{i}", 4)) for i in range(2)]  # 8 asked, 7 free
    plan = plan_gang(cache, default_framework(SchedulerConfig()), members, need=2)
    assert not plan.fits
    assert cache.dra.in_use() == frozenset({("gpu.nvidia.com", "dra", "gpu-0")})
    assert all(not cache.is_assumed(m.key) for m in members)


def test_a_gpu_request_larger_than_any_node_counts_the_devices_of_dra_nodes() -> None:
    cache = dra_cluster()
    cache.remove_node("dp")
    snapshot = Snapshot(cache)
    assert larger_than_any_node(parse_pod(gpu_pod("fits", 8)), snapshot) == ""
    message = larger_than_any_node(parse_pod(gpu_pod("huge", 9)), snapshot)
    assert "requests 9 nvidia.com/gpu" in message and "the largest node has 8" in message
