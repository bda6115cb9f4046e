"""The fragmentation-aware order of MIG placements: the pure key over GPUs of eight memory slices
against first fit and against the earlier order (the largest placement left on the GPU), the
cost a node's allocation is scored by, and the allocator's order on an M8-like pool (whole GPUs
and every MIG placement consuming one counter set per GPU), with the order on (a domain map
given) and off (upstream's first fit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal

import pytest

from hack.localcluster.dra import H200_GPU
from hack.localcluster.dra_mig import (
    H200_MIG_PROFILES,
    MIG_CLASS,
    MIG_CLASS_SELECTOR,
    mig_resource_slices,
)
from scheduler.dra.partitions import (
    NOTHING,
    Partitions,
    Placement,
    longest_free_run,
    loss_key,
    placeable_after,
)
from scheduler.model.devices import Device, parse_resource_slice
from scheduler.model.pools import Pool
from tests.dra_objects import DRIVER, exact, request
from tests.unit.scheduler.test_dra_alloc_support import (
    CLASSES,
    NODE,
    PREDICATES,
    MatcherDouble,
    allocate,
    device_names,
    make_claim,
    make_class,
    pools_of,
)

SLOTS = 8
SM = Decimal(132)
GEOMETRY: dict[str, Sequence[Placement]] = {
    profile.name: [
        Placement(
            frozenset(range(start, start + profile.memory_slices)),
            (profile.memory_slices, Decimal(profile.multiprocessors) / SM),
        )
        for start in profile.starts
    ]
    for profile in H200_MIG_PROFILES
}
ALL = [p for placements in GEOMETRY.values() for p in placements]


def first_fit(occupied: Sequence[frozenset[int]], profile: str) -> tuple[int, Placement] | None:
    for gpu, taken in enumerate(occupied):
        found = next((p for p in GEOMETRY[profile] if not p.slots & taken), None)
        if found is not None:
            return gpu, found
    return None


def aware(occupied: Sequence[frozenset[int]], profile: str) -> tuple[int, Placement] | None:
    """The order of `Partitions.order` over the GPUs: `loss_key`, then GPU and start."""
    free = [
        (loss_key(taken, ALL, p, SLOTS), gpu, min(p.slots), p)
        for gpu, taken in enumerate(occupied)
        for p in GEOMETRY[profile]
        if not p.slots & taken
    ]
    return None if not free else (min(free)[1], min(free)[3])


def largest_after(occupied: Sequence[frozenset[int]], profile: str) -> tuple[int, Placement] | None:
    """The earlier order: a GPU already partitioned first, then the largest placement left on
    the GPU after it, then the longest free run, then GPU and start."""
    free = []
    for gpu, taken in enumerate(occupied):
        for p in GEOMETRY[profile]:
            if p.slots & taken:
                continue
            after = taken | p.slots
            left = placeable_after(after, ALL)
            key = (not taken, -left[0], -left[1], -longest_free_run(after, SLOTS))
            free.append((key, gpu, min(p.slots), p))
    return None if not free else (min(free)[1], min(free)[3])


Chooser = Callable[[Sequence[frozenset[int]], str], "tuple[int, Placement] | None"]


def run(choose: Chooser, profiles: Sequence[str], gpus: int = 1) -> list[str | None]:
    """Where each request goes, "gpu/start" (None: not placed), on `gpus` GPUs."""
    occupied = [frozenset[int]()] * gpus
    where: list[str | None] = []
    for profile in profiles:
        found = choose(occupied, profile)
        where.append(None if found is None else f"{found[0]}/{min(found[1].slots)}")
        if found is not None:
            occupied[found[0]] |= found[1].slots
    return where


def test_free_run_and_largest_placeable() -> None:
    assert longest_free_run(frozenset(), 8) == 8
    assert longest_free_run(frozenset({0, 3, 7}), 8) == 3
    assert longest_free_run(frozenset(range(8)), 8) == 0
    assert placeable_after(frozenset(), ALL)[0] == 8
    assert placeable_after(frozenset({6}), ALL) == (4, Decimal(64) / SM)  # 4g at 0
    assert placeable_after(frozenset({0}), ALL) == (4, Decimal(60) / SM)  # 3g at 4
    assert placeable_after(frozenset(range(8)), ALL) == NOTHING


def test_a_1g_goes_where_the_4g_stays_placeable() -> None:
    # first fit takes slice 0, which kills the only 4g placement; slice 6 keeps it and 0-5 free
    assert first_fit([frozenset()], "1g.18gb") == (0, GEOMETRY["1g.18gb"][0])
    assert aware([frozenset()], "1g.18gb") == (0, GEOMETRY["1g.18gb"][6])


def test_the_key_is_the_loss_then_the_most_fragmented_gpu() -> None:
    one_g = GEOMETRY["1g.18gb"]
    # an untouched GPU loses the 7g's worth less the 4g left beside the 1g
    assert loss_key(frozenset(), ALL, one_g[6], SLOTS)[:3] == (4, 1 - Decimal(64) / SM, 8)
    # slice 0 taken: the 3g at 4 is the largest; a 1g at 1 keeps it, a 1g at 4 leaves a 2g
    assert loss_key(frozenset({0}), ALL, one_g[1], SLOTS)[:3] == (0, 0, 4)
    assert loss_key(frozenset({0}), ALL, one_g[4], SLOTS)[0] == 2
    # equal loss (none): the GPU whose largest placement is smaller comes first
    roomy = loss_key(frozenset({6}), ALL, one_g[5], SLOTS)  # a 4g still possible
    tight = loss_key(frozenset({0}), ALL, one_g[1], SLOTS)  # a 3g still possible
    assert roomy[:2] == tight[:2] == (0, 0)
    assert tight < roomy


@pytest.mark.parametrize(
    ("profiles", "first", "chosen"),
    [
        pytest.param(["1g.18gb", "4g.71gb"], ["0/0", None], ["0/6", "0/0"], id="1g-then-4g"),
        pytest.param(
            ["1g.18gb", "2g.35gb", "4g.71gb"],
            ["0/0", "0/2", None],
            ["0/6", "0/4", "0/0"],
            id="1g-2g-then-4g",
        ),
        pytest.param(
            ["1g.18gb", "1g.18gb", "1g.18gb", "4g.71gb"],
            ["0/0", "0/1", "0/2", None],
            ["0/6", "0/5", "0/4", "0/0"],
            id="three-1g-then-4g",
        ),
        pytest.param(
            ["2g.35gb", "1g.18gb", "3g.71gb", "3g.71gb"],
            ["0/0", "0/2", "0/4", None],
            ["0/4", "0/6", "0/0", None],
            id="both-lose-the-second-3g",
        ),
    ],
)
def test_sequences_against_first_fit(
    profiles: list[str], first: list[str | None], chosen: list[str | None]
) -> None:
    assert run(first_fit, profiles) == first
    assert run(aware, profiles) == chosen
    # on one GPU every placement has the same "before": the earlier order chose alike
    assert run(largest_after, profiles) == chosen


def test_a_small_claim_fills_the_most_fragmented_gpu() -> None:
    """The earlier order sent the second 1g to the GPU with the most left after it (GPU 1,
    where the 4g was still possible), which broke GPU 1's last 3g; the loss order puts it
    beside GPU 0's 3g (a 2g's room shrinks to a 1g's) and the third 3g fits. First fit
    places all three too, by filling GPU 0 from slice 0."""
    profiles = ["1g.18gb", "3g.71gb", "3g.71gb", "1g.18gb", "3g.71gb"]
    assert run(largest_after, profiles, gpus=2) == ["0/6", "0/0", "1/4", "1/0", None]
    assert run(aware, profiles, gpus=2) == ["0/6", "0/0", "1/4", "0/4", "1/0"]
    assert run(first_fit, profiles, gpus=2) == ["0/0", "0/4", "1/0", "0/1", "1/4"]


# -- the allocator on an M8-like pool ----------------------------------------------------------

MIG = "mig"
PROFILE = {
    p.name: f"device.attributes['{DRIVER}'].profile == '{p.name}'" for p in H200_MIG_PROFILES
}


def profile_is(name: str) -> Callable[[Device], bool]:
    return lambda device: device.attributes.get(f"{DRIVER}/profile") == name


def is_mig(device: Device) -> bool:
    return device.attributes.get(f"{DRIVER}/type") == "mig"


MATCHER = MatcherDouble(
    {
        **PREDICATES,
        MIG_CLASS_SELECTOR: is_mig,
        **{expression: profile_is(name) for name, expression in PROFILE.items()},
    }
)
MIG_CLASSES = {**CLASSES, MIG_CLASS: make_class(MIG_CLASS, expressions=[MIG_CLASS_SELECTOR])}


def m8_pools(gpus: int = 2) -> tuple[Pool, ...]:
    slices = []
    for body in mig_resource_slices(NODE, "uid", H200_GPU, gpus):
        found = parse_resource_slice(body)
        assert not found.errors, found.errors
        slices.append(found)
    return pools_of(*slices)


def place(profiles: Sequence[str], order_on: bool, gpus: int = 2) -> list[str | None]:
    """Allocate one claim per profile in turn, each kept allocated; the device each gets."""
    pools = m8_pools(gpus)
    in_use: set[tuple[str, str, str]] = set()
    names: list[str | None] = []
    for index, profile in enumerate(profiles):
        claim = make_claim(
            f"c{index}", request("mig", exact(MIG_CLASS, expressions=[PROFILE[profile]]))
        )
        result = allocate(
            [claim],
            pools,
            in_use=frozenset(in_use),
            classes=MIG_CLASSES,
            domains={} if order_on else None,
            matcher=MATCHER,
        )
        if result.allocations is None:
            names.append(None)
            continue
        [name] = device_names(result)
        names.append(name)
        in_use.add((DRIVER, NODE, name))
    return names


def test_the_pool_parses_and_is_usable() -> None:
    [pool] = m8_pools(8)
    assert pool.usable
    assert len(pool.counter_sets) == 8
    assert len(pool.devices) == 8 * (1 + sum(len(p.starts) for p in H200_MIG_PROFILES))


def test_one_gpu_first_fit_blocks_the_4g_that_the_aware_order_places() -> None:
    profiles = ["1g.18gb", "2g.35gb", "4g.71gb"]
    assert place(profiles, order_on=False, gpus=1) == [
        "gpu-0-mig-1g-18gb-0",
        "gpu-0-mig-2g-35gb-2",
        None,
    ]
    assert place(profiles, order_on=True, gpus=1) == [
        "gpu-0-mig-1g-18gb-6",
        "gpu-0-mig-2g-35gb-4",
        "gpu-0-mig-4g-71gb-0",
    ]


def test_partitioned_gpus_first_so_a_whole_gpu_stays() -> None:
    # first fit puts the 4g on GPU 1 (GPU 0's 4g placement is blocked) and no whole GPU is left;
    # the aware order keeps everything on GPU 0 and GPU 1 whole
    profiles = ["1g.18gb", "1g.18gb", "4g.71gb"]
    first = place(profiles, order_on=False)
    assert first == ["gpu-0-mig-1g-18gb-0", "gpu-0-mig-1g-18gb-1", "gpu-1-mig-4g-71gb-0"]
    chosen = place(profiles, order_on=True)
    assert chosen == ["gpu-0-mig-1g-18gb-6", "gpu-0-mig-1g-18gb-5", "gpu-0-mig-4g-71gb-0"]


def test_a_whole_gpu_excludes_its_placements() -> None:
    pools = m8_pools(1)
    whole = make_claim("whole", request("gpu", exact()))
    result = allocate([whole], pools, classes=MIG_CLASSES, matcher=MATCHER, domains={})
    assert device_names(result) == ["gpu-0"]
    mig = make_claim("m", request("mig", exact(MIG_CLASS, expressions=[PROFILE["1g.18gb"]])))
    taken = frozenset({(DRIVER, NODE, "gpu-0")})
    blocked = allocate([mig], pools, in_use=taken, classes=MIG_CLASSES, matcher=MATCHER)
    assert blocked.allocations is None


def test_across_gpus_the_allocator_fills_the_most_fragmented_gpu() -> None:
    profiles = ["1g.18gb", "3g.71gb", "3g.71gb", "1g.18gb", "3g.71gb"]
    assert place(profiles, order_on=True) == [
        "gpu-0-mig-1g-18gb-6",
        "gpu-0-mig-3g-71gb-0",
        "gpu-1-mig-3g-71gb-4",
        "gpu-0-mig-1g-18gb-4",
        "gpu-1-mig-3g-71gb-0",
    ]


def node_id(name: str) -> tuple[str, str, str]:
    return (DRIVER, NODE, name)


def test_cost_of_an_allocation_in_gpus_worth() -> None:
    pools = m8_pools(2)
    partitions = Partitions.of_pools(pools)
    taken = {node_id("gpu-0-mig-1g-18gb-6")}
    occupied = partitions.occupied_by(lambda device: device in taken)
    assert sorted(occupied.values(), key=sorted) == [frozenset(), frozenset({6})]
    beside = partitions.cost([node_id("gpu-0-mig-1g-18gb-5")], occupied)  # the 4g stays
    untouched = partitions.cost([node_id("gpu-1-mig-1g-18gb-6")], occupied)  # 7g -> 4g
    killing = partitions.cost([node_id("gpu-0-mig-1g-18gb-0")], occupied)  # 4g -> 2g
    assert beside is not None and untouched is not None and killing is not None
    assert beside.lost == 0
    assert 0 < killing.lost < untouched.lost < 1
    assert killing.lost == pytest.approx(2 / 8, abs=0.05)  # two slices, plus a share
    assert beside.before == pytest.approx(4 / 8, abs=0.05)
    assert untouched.before == pytest.approx(8.5 / 8)  # the whole GPU: 8 slices, all shares
    # whole GPUs, and devices that are no partition, have no cost: the NVLink score weighs them
    assert partitions.cost([node_id("gpu-1")], occupied) is None
    assert partitions.cost([("other.driver", NODE, "x")], occupied) is None
    assert partitions.cost([], occupied) is None
