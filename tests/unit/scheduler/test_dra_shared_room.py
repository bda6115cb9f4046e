"""The room left on shared GPUs (DRA devices that allow multiple allocations), in thousandths:
per device the largest share of any capacity its shares consume; per node the sum over its
shared GPUs; read from the DRA store for the GPU-fragmentation score, with a pod's share taken
from the allocation DynamicResources found for it."""

from __future__ import annotations

from decimal import Decimal

from scheduler.dra.cel import CelSelectors
from scheduler.dra.consumable import DeviceUse
from scheduler.dra.shared_room import WHOLE, SharedRoom, taken_milli
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.allocations import DeviceResult
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_capacity import DeviceCapacity
from scheduler.model.objects import parse_pod
from scheduler.plugins.dynamic_resources import DynamicResources
from scheduler.plugins.shared_gpus import DraSharedGpus
from tests.dra_objects import DRIVER, claim_spec, exact, pod_with_claims, request, resource_claim
from tests.unit.scheduler.test_dra_shared_score import shared_cache

H200_MEMORY_MI = 143771
"""The S8 node's GPU memory capacity."""


def thousandths(gi: int) -> int:
    """`gi` GiB of an S8 GPU's memory in thousandths of it, rounded up."""
    return -(-(gi * 1024 * WHOLE) // H200_MEMORY_MI)


def test_taken_is_the_largest_share_of_any_capacity_rounded_up() -> None:
    capacity = {
        "memory": DeviceCapacity(Decimal(100), "memory"),
        "cores": DeviceCapacity(Decimal(8), "cores"),
    }
    assert taken_milli({"memory": Decimal(25), "cores": Decimal(4)}, capacity) == 500
    assert taken_milli({"memory": Decimal("0.01")}, capacity) == 1
    assert taken_milli({}, capacity) == 0
    assert taken_milli({"memory": Decimal(300)}, capacity) == WHOLE


def test_room_per_node_from_the_store() -> None:
    cache = shared_cache()  # s8-1: 10Gi of gpu-6 shared; s8-2: 140Gi of gpu-0
    room = SharedRoom(cache.dra.slices.values())
    assert room.gpus == {"s8-0": 8, "s8-1": 8, "s8-2": 8}
    found = room.room(cache.dra.device_use())
    assert thousandths(10) == 72 and thousandths(140) == 998
    assert found == {"s8-0": 8000, "s8-1": 8000 - 72, "s8-2": 8000 - 998}
    share = DeviceResult("gpus", DRIVER, "s8-1", "gpu-6", share_id="x", consumed_capacity={})
    assert room.taken([share]) == 0
    whole = DeviceResult("gpus", DRIVER, "s8-1", "gpu-5")  # no share: not counted
    assert room.taken([whole]) == 0
    assert SharedRoom(cache.dra.slices.values()).room(DeviceUse()) == dict.fromkeys(
        ("s8-0", "s8-1", "s8-2"), 8000
    )


def test_the_daemon_reads_the_room_and_the_pod_share() -> None:
    cache = shared_cache()
    spec = claim_spec(request("gpus", exact(count=1, capacity={"requests": {"memory": "20Gi"}})))
    cache.dra.put_claim(parse_resource_claim(resource_claim("mine", spec=spec)))
    pod = parse_pod(pod_with_claims("p", [{"name": "g", "resourceClaimName": "mine"}]))
    snapshot = Snapshot(cache)
    state = CycleState()
    shared = DraSharedGpus()
    assert shared.share(pod, snapshot, state) == 0  # not filtered yet
    assert DynamicResources(CelSelectors()).filter(pod, snapshot, state) == []
    assert shared.share(pod, snapshot, state) == thousandths(20) == 143
    room = shared.room(snapshot)
    assert room is not None
    by_node = dict(zip(snapshot.names, room.tolist(), strict=True))
    assert by_node["s8-0"] == 8000 and by_node["s8-2"] == 7002
    assert shared.room(snapshot) is room  # nothing changed: kept
    cache.dra.put_claim(parse_resource_claim(resource_claim("other", spec=spec)))
    again = shared.room(snapshot)  # what claims hold was looked at again
    assert again is not None and again.tolist() == room.tolist()  # an unallocated claim: none


def test_no_shared_gpu_anywhere_means_no_room() -> None:
    cache = shared_cache()
    for name in list(cache.dra.slices):
        cache.dra.drop_slice(name)
    assert DraSharedGpus().room(Snapshot(cache)) is None
