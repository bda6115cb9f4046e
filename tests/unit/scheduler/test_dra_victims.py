"""Victims whose GPUs come from ResourceClaims: the what-if of victim selection frees the devices
their claims would give back (a claim made for a victim goes with it; a shared claim only when
its last consumer goes; a claim whose consumers already left is free), the DynamicResources
rejection is resolvable only where some device is taken, and both PostFilter steps (priority
preemption, idle reclaim) evict such pods to make room for a pod with claims."""

from __future__ import annotations

from typing import Any

import pytest

from hack.localcluster import D8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.dra.cel import CelSelectors
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.planning import plan_gang
from scheduler.model.allocations import Allocation
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.dynamic_resources import CANNOT_ALLOCATE, DynamicResources
from scheduler.state.cache import ClusterCache
from scheduler.state.dra import DraStore
from scheduler.state.dra_handlers import ResourceSliceHandler
from tests.dra_objects import (
    DRIVER,
    allocated,
    claim_spec,
    exact,
    pod_ref,
    pod_with_claims,
    request,
    resource_claim,
    result,
)
from tests.unit.scheduler.reclaim_doubles import IDLE_CLASS, make_rig

Json = dict[str, Any]


def gpus(*indices: int, pool: str = "a") -> list[Json]:
    return [result("gpus", f"gpu-{g}", pool=pool) for g in indices]


def held_claim(
    name: str, devices: list[Json], consumers: list[str], owner: str | None = None
) -> Json:
    """A claim allocated `devices` on node a and reserved for the pods named in `consumers`
    (uid "uid-<name>"); `owner` makes it the claim generated for that pod."""
    refs = [pod_ref(c, f"uid-{c}") for c in consumers]
    metadata: Json = {"uid": f"claim-{name}"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    return resource_claim(
        name, status=allocated(*devices, node="a", reserved_for=refs), metadata=metadata
    )


def store_with(*claims: Json) -> DraStore:
    store = DraStore()
    for claim in claims:
        store.put_claim(parse_resource_claim(claim))
    return store


def parse_allocation(devices: list[Json]) -> Allocation:
    claim = parse_resource_claim(resource_claim("x", status=allocated(*devices, node="a")))
    assert claim.allocation is not None
    return claim.allocation


def names(devices: frozenset[tuple[str, str, str]]) -> set[str]:
    return {device for _, _, device in devices}


def test_a_claim_made_for_a_gone_pod_is_freed_with_it() -> None:
    store = store_with(held_claim("t", gpus(0, 1), ["v"], owner="v"))
    assert names(store.freed_by({"uid-v"}, lambda uid: True)) == {"gpu-0", "gpu-1"}
    assert store.freed_by({"uid-other"}, lambda uid: True) == frozenset()


def test_a_shared_claim_frees_only_when_its_last_consumer_goes() -> None:
    store = store_with(held_claim("shared", gpus(2), ["v", "w"]))
    live = {"uid-v", "uid-w"}.__contains__
    assert store.freed_by({"uid-v"}, live) == frozenset()
    assert names(store.freed_by({"uid-v", "uid-w"}, live)) == {"gpu-2"}


def test_a_claim_whose_consumers_already_left_counts_free() -> None:
    """Its release is pending (the resourceclaim controller has not deallocated it yet): no
    pod has to be evicted for its devices."""
    store = store_with(held_claim("left", gpus(3), ["gone"]))
    assert names(store.freed_by(set(), lambda uid: False)) == {"gpu-3"}
    assert store.freed_by(set(), lambda uid: True) == frozenset()


def test_a_claim_reserved_for_another_kind_of_consumer_is_never_freed() -> None:
    claim = held_claim("other", gpus(4), [])
    claim["status"]["reservedFor"] = [
        {"apiGroup": "example.com", "resource": "things", "name": "x", "uid": "uid-x"}
    ]
    store = store_with(claim)
    assert store.freed_by({"uid-x"}, lambda uid: False) == frozenset()


def test_released_hides_the_freed_devices_and_gives_them_back() -> None:
    store = store_with(
        held_claim("t", gpus(0, 1), ["v"], owner="v"), held_claim("k", gpus(5), ["k"])
    )
    before = store.in_use()
    with store.released({"uid-v"}, lambda uid: True):
        assert names(store.in_use()) == {"gpu-5"}
        with store.released({"uid-k"}, lambda uid: True):  # blocks nest
            assert store.in_use() == frozenset()
        assert names(store.in_use()) == {"gpu-5"}
    assert store.in_use() == before


def test_allocations_in_flight_for_gone_pods_are_given_back_and_new_ones_count() -> None:
    """A gang's what-if assumes its members' allocations inside the block: they must count
    even when they take the very devices the block freed."""
    store = store_with(held_claim("v-gpus", gpus(0, 1), ["v"]))
    store.assume("default/flying", {"default/f": ("uid-f", parse_allocation(gpus(2)))})
    with store.released({"uid-v"}, lambda uid: True, ["default/flying"]):
        assert store.in_use() == frozenset()
        store.assume("default/member", {"default/m": ("uid-m", parse_allocation(gpus(0, 1)))})
        assert names(store.in_use()) == {"gpu-0", "gpu-1"}
        store.revert("default/member")
    assert names(store.in_use()) == {"gpu-0", "gpu-1", "gpu-2"}


# -- the cache's what-if and the filter ---------------------------------------------------------


def dra_cache(*pods: Json, claims: tuple[Json, ...] = ()) -> ClusterCache:
    """Node a, a D8 publishing 8 GPUs as a ResourceSlice (NVLink domains 0-3 and 4-7)."""
    cache = ClusterCache()
    cache.dra.put_class(parse_device_class(gpu_device_class()))
    cache.add_or_update_node(parse_node(node_manifest(D8, "a")))
    ResourceSliceHandler(cache.dra).on_add(node_resource_slice("a", "uid-a", D8.gpu_model(), 8))
    for claim in claims:
        cache.dra.put_claim(parse_resource_claim(claim))
    for pod in pods:
        cache.add_pod(parse_pod(pod))
    return cache


def running(name: str, priority: int, klass: str = "batch") -> Json:
    """A running pod on node a whose claim "<name>-gpus" holds its GPUs."""
    pod = pod_with_claims(name, [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}])
    pod["spec"].update(nodeName="a", priority=priority, priorityClassName=klass)
    pod["status"] = {"phase": "Running", "startTime": "2024-05-01T10:00:00Z"}
    return pod


def wants(count: int, name: str = "p") -> tuple[Json, Json]:
    """A pending pod of priority 1000 and its unallocated claim for `count` GPUs."""
    spec = claim_spec(request("gpus", exact(DRIVER, count=count)))
    claim = resource_claim(f"{name}-gpus", spec=spec, metadata={"uid": f"claim-{name}"})
    pod = pod_with_claims(name, [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}])
    pod["spec"]["priority"] = 1000
    return pod, claim


def rejections(cache: ClusterCache, pod: Json) -> list[tuple[str, bool, bool]]:
    """(reason, resolvable, node a rejected) per rejection."""
    snapshot = Snapshot(cache)
    found = DynamicResources(CelSelectors()).filter(parse_pod(pod), snapshot, CycleState())
    return [(r.reason, r.resolvable, bool(r.failed[0])) for r in found]


def test_without_a_victim_its_claims_devices_are_free_and_afterwards_taken_again() -> None:
    holder = held_claim("v-gpus", gpus(0, 1, 2, 3, 4, 5, 6, 7), ["v"])
    cache = dra_cache(running("v", 100), claims=(holder,))
    pod, claim = wants(2)
    cache.dra.put_claim(parse_resource_claim(claim))
    assert rejections(cache, pod) == [(CANNOT_ALLOCATE, True, True)]
    with cache.without(["default/v"]):
        assert cache.dra.in_use() == frozenset()
        assert rejections(cache, pod) == []
    assert len(cache.dra.in_use()) == 8
    assert rejections(cache, pod) == [(CANNOT_ALLOCATE, True, True)]


def test_a_node_whose_devices_are_all_free_is_not_resolvable() -> None:
    """Nothing to evict can help a claim larger than the node."""
    cache = dra_cache()
    pod, claim = wants(9)
    cache.dra.put_claim(parse_resource_claim(claim))
    assert rejections(cache, pod) == [(CANNOT_ALLOCATE, False, True)]


# -- both PostFilter steps ----------------------------------------------------------------------


def full_node(victim_class: str) -> ClusterCache:
    """Node a with its 8 GPUs held by two running pods of priority 100: "low" holds gpu-0..3
    through a claim generated for it, "other" gpu-4..7 through a claim it shares with nobody."""
    claims = (
        held_claim("low-gpus", gpus(0, 1, 2, 3), ["low"], owner="low"),
        held_claim("other-gpus", gpus(4, 5, 6, 7), ["other"]),
    )
    return dra_cache(
        running("low", 100, victim_class), running("other", 100, "busy"), claims=claims
    )


async def test_priority_preemption_evicts_the_pod_whose_claim_frees_enough_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = full_node("batch")
    pod, claim = wants(4)
    cache.dra.put_claim(parse_resource_claim(claim))
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    assert await rig.attempt(parse_pod(pod)) == "a"
    assert len(rig.api.evicted) == 1  # one claim of 4 GPUs is enough: not both pods
    assert rig.api.nominated == [("p", "a")]


async def test_idle_reclaim_evicts_an_idle_pod_holding_its_gpus_through_a_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = full_node(IDLE_CLASS)
    pod, claim = wants(4)
    cache.dra.put_claim(parse_resource_claim(claim))
    rig = make_rig(monkeypatch, cache)
    rig.usage.gpus["low"] = 4  # an idle window for each device of its claim
    assert await rig.attempt(parse_pod(pod)) == "a"
    assert rig.api.evicted == ["low"]  # "other" has no reclaim policy


async def test_a_claim_holder_with_samples_for_fewer_gpus_than_its_devices_is_not_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The idle verdict expects a window for each of the 4 devices of the victim's claim."""
    cache = full_node(IDLE_CLASS)
    pod, claim = wants(4)
    cache.dra.put_claim(parse_resource_claim(claim))
    rig = make_rig(monkeypatch, cache)  # one idle window per pod
    assert await rig.attempt(parse_pod(pod)) is None
    assert rig.api.evicted == []


async def test_no_pod_is_evicted_while_a_released_claim_awaits_deallocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The victim is gone and its claim still allocated: the preemptor waits for the
    resourceclaim controller instead of evicting more pods."""
    claims = (
        held_claim("gone-gpus", gpus(0, 1, 2, 3), ["gone"]),
        held_claim("other-gpus", gpus(4, 5, 6, 7), ["other"]),
    )
    cache = dra_cache(running("other", 100), claims=claims)
    pod, claim = wants(4)
    cache.dra.put_claim(parse_resource_claim(claim))
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    assert await rig.attempt(parse_pod(pod)) is None
    assert rig.api.evicted == []
    assert len(cache.dra.in_use()) == 8  # nothing was forgotten


def test_a_gang_fits_without_a_victim_only_if_every_member_gets_its_own_devices() -> None:
    """Two 4-GPU members on an 8-GPU node held by two 4-GPU pods: both victims must go; with
    only one gone, the second member must not get the devices the first one took."""
    claims = (
        held_claim("low0-gpus", gpus(0, 1, 2, 3), ["low0"], owner="low0"),
        held_claim("low1-gpus", gpus(4, 5, 6, 7), ["low1"], owner="low1"),
    )
    cache = dra_cache(running("low0", 100), running("low1", 100), claims=claims)
    members = []
    for name in ("w0", "w1"):
        pod, claim = wants(4, name)
        cache.dra.put_claim(parse_resource_claim(claim))
        members.append(parse_pod(pod))
    framework = default_framework(SchedulerConfig())

    def fits(removed: list[str]) -> bool:
        with cache.without(removed):
            plan = plan_gang(cache, framework, members, 2)
            for placed in plan.placed:
                cache.forget(placed.pod.key)
        return plan.fits

    assert fits(["default/low0", "default/low1"])
    assert not fits(["default/low1"])
    assert not fits([])
    assert len(cache.dra.in_use()) == 8
