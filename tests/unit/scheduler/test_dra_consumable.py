"""Consumable capacity (DRAConsumableCapacity): rounding per request policy, policy violations
and the capacity sum as upstream's consumable_capacity.go has them; the allocator's shares
(several claims on one device while its capacity lasts, shareID and consumedCapacity in the
results, an unrepresentable request as an error of the attempt, counters charged once); and the
packing order (partly used devices first, best fit, broken NVLink domains before whole ones)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from hack.localcluster.dra import H200_GPU, shared_gpu_capacity, whole_share_gib
from scheduler.dra.allocator import CANNOT_ALLOCATE, AllocationError
from scheduler.dra.consumable import (
    CapacityError,
    DeviceUse,
    capacity_fits,
    consumed_amount,
    device_use,
    violates_policy,
)
from scheduler.kube.claims import allocation_json
from scheduler.model.allocations import Allocation, DeviceResult
from scheduler.model.claims import ResourceClaim
from scheduler.model.device_capacity import CapacityRange, DeviceCapacity, RequestPolicy
from tests.dra_objects import exact, gpu_device, request
from tests.unit.scheduler.test_dra_alloc_support import (
    ODD,
    allocate,
    device_names,
    gpu_id,
    make_claim,
    node_slice,
    pools_of,
)

GI = Decimal(2**30)
MI = Decimal(2**20)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
H200_MEMORY = H200_GPU.memory_mib * MI
WHOLE = whole_share_gib(H200_GPU) * GI


def shared_gpu(index: int, **fields: Any) -> dict[str, Any]:
    return gpu_device(
        index, allowMultipleAllocations=True, capacity=shared_gpu_capacity(H200_GPU), **fields
    )


def bare_gpu(index: int, **fields: Any) -> dict[str, Any]:
    """A GPU without capacities."""
    device = gpu_device(index, **fields)
    del device["capacity"]
    return device


SHARED_POOLS = pools_of(node_slice("s", devices=[shared_gpu(i) for i in range(8)]))
DOMAINS = {gpu_id(i): i // 4 for i in range(8)}
"""Two NVLink domains of four, as on an 8-GPU H200 board."""


def share(name: str, memory: str, count: int = 1) -> ResourceClaim:
    spec = exact(count=count, capacity={"requests": {"memory": memory}})
    return make_claim(name, request("gpus", spec))


def whole(name: str, count: int = 1) -> ResourceClaim:
    return make_claim(name, request("gpus", exact(count=count)))


def in_turn(
    claims: Sequence[ResourceClaim],
    prior: Sequence[Allocation] = (),
    domains: dict[tuple[str, str, str], int] | None = DOMAINS,
) -> list[Allocation]:
    """Allocate each claim on its own, as pods one after another: earlier allocations count."""
    done = list(prior)
    for claim in claims:
        use = device_use(done)
        result = allocate([claim], SHARED_POOLS, in_use=use.taken, shared=use, domains=domains)
        assert result.allocations is not None, result.reason
        done.extend(result.allocations)
    return done[len(prior) :]


def devices_of(allocations: Sequence[Allocation]) -> list[str]:
    return [r.device for allocation in allocations for r in allocation.results]


# -- rounding and policies --------------------------------------------------------------------

STEPPED = RequestPolicy(default=40 * GI, valid_range=CapacityRange(GI, None, GI))
VALUES = RequestPolicy(default=10 * GI, valid_values=(10 * GI, 20 * GI, 40 * GI))
FRACTIONAL = RequestPolicy(
    default=Decimal("0.5"), valid_range=CapacityRange(Decimal("0.5"), Decimal(4), Decimal("0.25"))
)


@pytest.mark.parametrize(
    ("requested", "policy", "expected"),
    [
        (None, None, Decimal(100)),  # nothing asked, no policy: the whole value
        (None, STEPPED, 40 * GI),  # nothing asked: the default
        (Decimal(7), None, Decimal(7)),  # no policy: as asked
        (100 * MI, STEPPED, GI),  # below min: min
        (Decimal("9.5") * GI, STEPPED, 10 * GI),  # up to the next step from min
        (10 * GI, STEPPED, 10 * GI),
        (15 * GI, VALUES, 20 * GI),  # the first valid value at least as large
        (50 * GI, VALUES, 50 * GI),  # none: as asked (then it violates the policy)
        (Decimal("0.6"), FRACTIONAL, Decimal("0.75")),  # milli-units
        (Decimal("0.1"), FRACTIONAL, Decimal("0.5")),
    ],
)
def test_consumed_amount_per_policy(
    requested: Decimal | None, policy: RequestPolicy | None, expected: Decimal
) -> None:
    assert consumed_amount(requested, DeviceCapacity(Decimal(100), "memory", policy)) == expected


def test_a_range_that_is_not_in_milli_units_rounds_in_whole_units() -> None:
    """A step below 1m: upstream's integer path, each value rounded up to a whole unit."""
    policy = RequestPolicy(Decimal(1), valid_range=CapacityRange(Decimal(1), None, Decimal("1E-4")))
    capacity = DeviceCapacity(Decimal(100), "cores", policy)
    assert consumed_amount(Decimal("2.5"), capacity) == Decimal(3)


def test_a_request_not_representable_in_milli_units_is_an_error() -> None:
    with pytest.raises(CapacityError, match="not a representable milli value"):
        consumed_amount(Decimal("1.0001"), DeviceCapacity(Decimal(4), "x", FRACTIONAL))


def test_policy_violations() -> None:
    bounded = RequestPolicy(
        default=2 * GI, valid_range=CapacityRange(GI, Decimal(10) * GI, Decimal(2) * GI)
    )
    assert not violates_policy(3 * GI, bounded)  # min + one step
    assert violates_policy(2 * GI, RequestPolicy(3 * GI, valid_range=bounded.valid_range))
    assert not violates_policy(2 * GI, bounded)  # off the grid, but the default
    assert violates_policy(11 * GI, bounded)  # above max
    assert violates_policy(50 * GI, VALUES) and not violates_policy(20 * GI, VALUES)
    assert not violates_policy(Decimal(12345), None)


def test_capacity_fits_adds_shares_and_wants_every_capacity_requested() -> None:
    capacities = {"memory": DeviceCapacity(100 * GI, "memory", STEPPED)}
    assert capacity_fits({"memory": 80 * GI}, {"memory": 20 * GI}, capacities, {})
    assert not capacity_fits({"memory": 80 * GI}, {"memory": 20 * GI}, capacities, {"memory": GI})
    assert not capacity_fits({}, {"cores": Decimal(1)}, capacities, {})
    assert not capacity_fits({}, {"memory": 200 * GI}, capacities, {})
    negative = {"memory": DeviceCapacity(Decimal(-1), "memory")}
    with pytest.raises(CapacityError, match="negative"):
        capacity_fits({}, {}, negative, {})


# -- shares -------------------------------------------------------------------------------------


def test_fractional_claims_pack_onto_one_gpu_with_share_ids_and_consumed_capacity() -> None:
    allocations = in_turn([share(f"c{i}", "10Gi") for i in range(5)])
    assert devices_of(allocations) == ["gpu-0"] * 5
    results = [a.results[0] for a in allocations]
    assert all(UUID.fullmatch(r.share_id) for r in results)
    assert len({r.share_id for r in results}) == 5
    assert all(r.consumed_capacity == {"memory": 10 * GI} for r in results)
    assert device_use(allocations).consumed == {gpu_id(0): {"memory": 50 * GI}}
    assert device_use(allocations).taken == frozenset()


def test_consumed_capacity_is_rounded_up_by_the_policy() -> None:
    [small, odd] = in_turn([share("a", "100Mi"), share("b", "9.5Gi")])
    assert small.results[0].consumed_capacity == {"memory": GI}
    assert odd.results[0].consumed_capacity == {"memory": 10 * GI}


def test_a_gpu_takes_shares_while_its_capacity_lasts() -> None:
    """14 x 10Gi fit in 143771Mi, the 15th does not and goes to another GPU."""
    allocations = in_turn([share(f"c{i}", "10Gi") for i in range(15)])
    assert devices_of(allocations) == ["gpu-0"] * 14 + ["gpu-1"]


def test_a_whole_gpu_claim_takes_an_untouched_gpu_and_a_4_gpu_claim_a_whole_domain() -> None:
    shares = in_turn([share(f"c{i}", "10Gi") for i in range(3)])
    one = in_turn([whole("one")], prior=shares)
    assert devices_of(one) == ["gpu-1"]  # in the domain the shares broke already
    assert one[0].results[0].consumed_capacity == {"memory": WHOLE}
    four = in_turn([whole("four", count=4)], prior=[*shares, *one])
    assert devices_of(four) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    more = in_turn([share("late", "10Gi")], prior=[*shares, *one, *four])
    assert devices_of(more) == ["gpu-0"]  # the whole GPUs have no room left


def test_best_fit_among_partly_used_gpus() -> None:
    prior = in_turn([share("a", "50Gi"), share("b", "120Gi")])
    assert devices_of(prior) == ["gpu-0", "gpu-1"]  # 170Gi do not fit one GPU
    assert devices_of(in_turn([share("small", "10Gi")], prior)) == ["gpu-1"]  # tightest fit
    assert devices_of(in_turn([share("mid", "30Gi")], prior)) == ["gpu-0"]  # 20Gi left on gpu-1


def test_untouched_gpus_of_a_broken_domain_come_before_a_whole_domain() -> None:
    """Domains {0,1} and {2..7}; gpu-7 is full. A share goes to the broken big domain rather
    than break the small whole one; a whole GPU goes to the tightest domain, as without
    shares."""
    domains = {gpu_id(i): 0 if i < 2 else 1 for i in range(8)}
    full = [Allocation(results=(_share_result(7, WHOLE),))]
    assert devices_of(in_turn([share("s", "10Gi")], full, domains)) == ["gpu-2"]
    assert devices_of(in_turn([whole("w")], full, domains)) == ["gpu-0"]


def test_upstream_order_without_a_domain_map_takes_the_first_device_that_fits() -> None:
    prior = [Allocation(results=(_share_result(5, 100 * GI),))]
    assert devices_of(in_turn([share("s", "10Gi")], prior, domains=None)) == ["gpu-0"]
    assert devices_of(in_turn([share("s", "10Gi")], prior)) == ["gpu-5"]


def test_claims_of_one_attempt_share_a_device_and_a_request_takes_distinct_devices() -> None:
    result = allocate([share("a", "10Gi"), share("b", "10Gi")], SHARED_POOLS, domains=DOMAINS)
    assert device_names(result, 0) == device_names(result, 1) == ["gpu-0"]
    two = allocate([share("c", "10Gi", count=2)], SHARED_POOLS, domains=DOMAINS)
    assert device_names(two) == ["gpu-0", "gpu-1"]


def test_no_room_anywhere_cannot_allocate() -> None:
    full = [Allocation(results=tuple(_share_result(i, WHOLE) for i in range(8)))]
    use = device_use(full)
    result = allocate([share("s", "1Gi")], SHARED_POOLS, shared=use, domains=DOMAINS)
    assert result.allocations is None and result.reason == CANNOT_ALLOCATE
    assert allocate([share("s", "1Gi")], SHARED_POOLS, shared=use).reason == CANNOT_ALLOCATE


def test_a_shareable_device_without_capacities_takes_any_number_of_shares() -> None:
    pools = pools_of(node_slice("u", devices=[bare_gpu(0, allowMultipleAllocations=True)]))
    done: list[Allocation] = []
    for index in range(20):
        use = device_use(done)
        found = allocate([whole(f"c{index}")], pools, shared=use)
        assert found.allocations is not None
        done.extend(found.allocations)
    assert {r.consumed_capacity == {} and bool(r.share_id) for a in done for r in a.results} == {
        True
    }
    assert device_use(done).shared == frozenset({gpu_id(0)})


def test_capacity_requests_on_devices_that_allow_one_allocation_are_a_filter() -> None:
    pools = pools_of(node_slice("e", devices=[gpu_device(i) for i in range(2)]))
    result = allocate([share("fits", "10Gi")], pools)
    [first] = result.allocations or ()
    assert (first.results[0].share_id, first.results[0].consumed_capacity) == ("", {})
    assert allocate([share("big", "200Gi")], pools).reason == CANNOT_ALLOCATE
    cores = make_claim("c", request("gpus", exact(capacity={"requests": {"cores": "1"}})))
    assert allocate([cores], pools).reason == CANNOT_ALLOCATE


def test_all_devices_with_capacity_requests() -> None:
    claim = make_claim(
        "all", request("gpus", exact(mode="All", capacity={"requests": {"memory": "10Gi"}}))
    )
    assert len(device_names(allocate([claim], SHARED_POOLS))) == 8
    use = device_use([Allocation(results=(_share_result(3, WHOLE),))])
    assert allocate([claim], SHARED_POOLS, shared=use).reason == CANNOT_ALLOCATE


def test_an_unrepresentable_request_is_an_error_of_the_attempt() -> None:
    claim = share("odd", "2147483648.0001")
    expected = (
        "claim default/odd, request gpus: checking capacity for device "
        'gpu.nvidia.com/node-a/gpu-0: capacity "memory": capacity request cannot be '
        "represented in the device's range arithmetic: request 2147483648.0001 is not a "
        "representable milli value"
    )
    with pytest.raises(AllocationError) as raised:
        allocate([claim], SHARED_POOLS)
    assert str(raised.value) == expected
    entry = make_claim(
        "odd",
        request(
            "gpus",
            None,
            exact(name="s0", capacity={"requests": {"memory": "2147483648.0001"}}),
        ),
    )
    with pytest.raises(AllocationError, match=r"^claim default/odd, request s0: checking"):
        allocate([entry], SHARED_POOLS)


def test_shared_counters_are_charged_by_the_first_share_only() -> None:
    """A shareable device and a whole one consume 60 of a counter of 100: two shares of the
    first fit (charged once), the whole one does not fit beside them."""
    counters = [{"name": "set", "counters": {"mem": {"value": "100"}}}]
    uses = [{"counterSet": "set", "counters": {"mem": {"value": "60"}}}]
    devices = [
        bare_gpu(0, allowMultipleAllocations=True, consumesCounters=uses),
        bare_gpu(1, consumesCounters=uses),
    ]
    pools = pools_of(
        node_slice("a", devices=[], slice_count=2, sharedCounters=counters),
        node_slice("b", devices=devices, slice_count=2),
    )
    two = allocate([whole("a"), whole("b")], pools)
    assert device_names(two, 0) == device_names(two, 1) == ["gpu-0"]
    use = device_use(two.allocations or ())
    assert device_names(allocate([whole("c")], pools, shared=use)) == ["gpu-0"]
    only_whole = make_claim("w", request("gpus", exact(expressions=[ODD])))
    assert allocate([only_whole], pools, shared=use).reason == CANNOT_ALLOCATE
    assert device_names(allocate([only_whole], pools)) == ["gpu-1"]


def test_device_use_reads_shares_and_whole_devices_apart() -> None:
    allocation = Allocation(
        results=(
            _share_result(0, 10 * GI),
            _share_result(0, 5 * GI),
            _share_result(1, 0 * GI, consumed=False),
            _whole_result(2),
            _whole_result(3, admin=True),
        )
    )
    use = device_use([allocation])
    assert use.taken == frozenset({gpu_id(2)})
    assert use.consumed == {gpu_id(0): {"memory": 15 * GI}}
    assert use.shared == frozenset({gpu_id(0), gpu_id(1)})
    assert use.sharing(gpu_id(1)) and not use.sharing(gpu_id(2))
    assert use.allocated(gpu_id(1)) and use.allocated(gpu_id(2))
    assert not use.allocated(gpu_id(3)) and not DeviceUse().allocated(gpu_id(0))


def _share_result(index: int, memory: Decimal, consumed: bool = True) -> DeviceResult:
    return DeviceResult(
        "gpus",
        "gpu.nvidia.com",
        "node-a",
        f"gpu-{index}",
        share_id=f"00000000-0000-4000-8000-{index:012d}",
        consumed_capacity={"memory": memory} if consumed else {},
    )


def _whole_result(index: int, admin: bool = False) -> DeviceResult:
    return DeviceResult("gpus", "gpu.nvidia.com", "node-a", f"gpu-{index}", admin_access=admin)


def test_the_status_write_carries_the_share_id_and_consumed_capacity() -> None:
    [allocation] = in_turn([share("c", "9.5Gi")])
    written = allocation_json(allocation, datetime(2026, 1, 1, tzinfo=UTC))
    [entry] = written["devices"]["results"]
    assert entry["shareID"] == allocation.results[0].share_id
    assert entry["consumedCapacity"] == {"memory": "10Gi"}
    [whole_gpu] = in_turn([whole("w")])
    assert whole_gpu.results[0].consumed_capacity == {"memory": WHOLE}
    [entry] = allocation_json(whole_gpu, datetime(2026, 1, 1, tzinfo=UTC))["devices"]["results"]
    assert entry["consumedCapacity"] == {"memory": "140Gi"}
    odd = Allocation(results=(_share_result(0, Decimal("1.5")),))
    [entry] = allocation_json(odd, datetime(2026, 1, 1, tzinfo=UTC))["devices"]["results"]
    assert entry["consumedCapacity"] == {"memory": "1.5"}
