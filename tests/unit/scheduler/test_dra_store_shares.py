"""The claim tracker's view of shares (DRAConsumableCapacity): `in_use()` stays "taken whole",
`device_use()` adds the capacity the shares of allocated claims and in-flight allocations
consume, and the victim what-if (`released`) gives back the capacity of the claims the gone
pods free, as well as their whole devices."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from scheduler.model.allocations import Allocation
from scheduler.model.claims import parse_resource_claim
from scheduler.state.dra import DraStore
from tests.dra_objects import DRIVER, allocated, pod_ref, resource_claim, result

Json = dict[str, Any]
GI = Decimal(2**30)


def gpu(index: int) -> tuple[str, str, str]:
    return (DRIVER, "a", f"gpu-{index}")


def share(index: int, gib: int, number: int) -> Json:
    return result(
        "gpus",
        f"gpu-{index}",
        pool="a",
        shareID=f"00000000-0000-4000-8000-{number:012d}",
        consumedCapacity={"memory": f"{gib}Gi"},
    )


def whole(index: int) -> Json:
    return result("gpus", f"gpu-{index}", pool="a")


def claim(name: str, results: list[Json], consumer: str) -> Json:
    refs = [pod_ref(consumer, f"uid-{consumer}")]
    return resource_claim(
        name,
        status=allocated(*results, node="a", reserved_for=refs),
        metadata={"uid": f"claim-{name}"},
    )


def allocation(results: list[Json]) -> Allocation:
    parsed = parse_resource_claim(resource_claim("x", status=allocated(*results, node="a")))
    assert parsed.allocation is not None, parsed.errors
    return parsed.allocation


def store_with(*claims: Json) -> DraStore:
    store = DraStore()
    for body in claims:
        parsed = parse_resource_claim(body)
        assert not parsed.errors, parsed.errors
        store.put_claim(parsed)
    return store


def memory(store: DraStore, index: int) -> Decimal:
    return store.device_use().consumed.get(gpu(index), {}).get("memory", Decimal(0))


def test_shares_are_not_in_use_but_their_capacity_adds_up() -> None:
    store = store_with(
        claim("a", [share(0, 10, 1)], "p"),
        claim("b", [share(0, 20, 2), whole(3)], "q"),
    )
    assert store.in_use() == frozenset({gpu(3)})
    use = store.device_use()
    assert use.taken == frozenset({gpu(3)})
    assert use.shared == frozenset({gpu(0)})
    assert memory(store, 0) == 30 * GI


def test_in_flight_shares_count_until_reverted() -> None:
    store = store_with(claim("a", [share(0, 10, 1)], "p"))
    store.assume(
        "default/f", {"default/c": ("uid-c", allocation([share(0, 5, 2), share(1, 7, 3)]))}
    )
    assert (memory(store, 0), memory(store, 1)) == (15 * GI, 7 * GI)
    store.revert("default/f")
    assert (memory(store, 0), memory(store, 1)) == (10 * GI, Decimal(0))
    assert store.device_use().shared == frozenset({gpu(0)})


def test_released_gives_back_the_capacity_of_freed_claims_and_gone_in_flight() -> None:
    store = store_with(
        claim("v", [share(0, 10, 1), whole(2)], "v"),
        claim("k", [share(0, 20, 2)], "k"),
    )
    store.assume("default/g", {"default/c": ("uid-c", allocation([share(0, 5, 3)]))})
    assert memory(store, 0) == 35 * GI
    with store.released({"uid-v"}, lambda uid: True, ["default/g"]):
        assert memory(store, 0) == 20 * GI
        assert store.in_use() == frozenset()
        with store.released({"uid-k"}, lambda uid: True):  # blocks nest
            assert store.device_use().consumed == {}
            assert store.device_use().shared == frozenset()
        store.assume("default/m", {"default/m": ("uid-m", allocation([share(0, 1, 4)]))})
        assert memory(store, 0) == 21 * GI  # assumed inside the block: counts
        store.revert("default/m")
    assert memory(store, 0) == 35 * GI
    assert store.in_use() == frozenset({gpu(2)})


def test_a_claim_shared_with_a_pod_that_stays_keeps_its_capacity() -> None:
    body = claim("both", [share(1, 40, 1)], "v")
    body["status"]["reservedFor"].append(pod_ref("w", "uid-w"))
    store = store_with(body)
    with store.released({"uid-v"}, lambda uid: True):
        assert memory(store, 1) == 40 * GI
    with store.released({"uid-v", "uid-w"}, lambda uid: True):
        assert memory(store, 1) == 0


def test_a_share_counts_as_a_gpu_the_pod_holds() -> None:
    """Reclaim, preemption and accounting count a DRA pod's GPUs through its claims: a share
    of a GPU holds that GPU (as a time-sliced one does), an admin-access result does not."""
    watcher = result("gpus", "gpu-5", pool="a", adminAccess=True)
    store = store_with(
        claim("a", [share(0, 10, 1)], "p"),
        claim("b", [share(0, 20, 2), share(1, 20, 3), whole(3), watcher], "q"),
    )
    assert store.gpu_devices_by_pod([DRIVER]) == {"uid-p": 1, "uid-q": 3}
