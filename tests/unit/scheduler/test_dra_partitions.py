"""The fragmentation-aware order of MIG placements: the pure score over one GPU's eight memory
slices against first fit, and the allocator's order on an M8-like pool (whole GPUs and every
MIG placement consuming one counter set per GPU), with the order on (a domain map given) and off
(upstream's first fit)."""

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
    Placement,
    fragmentation_key,
    longest_free_run,
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


def first_fit(occupied: frozenset[int], profile: str) -> Placement | None:
    return next((p for p in GEOMETRY[profile] if not p.slots & occupied), None)


def aware(occupied: frozenset[int], profile: str) -> Placement | None:
    free = [p for p in GEOMETRY[profile] if not p.slots & occupied]
    if not free:
        return None
    return min(free, key=lambda p: fragmentation_key(occupied, ALL, p, SLOTS))


def run(choose: object, profiles: Sequence[str]) -> list[int | None]:
    """The start slot each request gets (None: not placed), one GPU."""
    occupied: frozenset[int] = frozenset()
    starts: list[int | None] = []
    for profile in profiles:
        found = choose(occupied, profile)  # type: ignore[operator]
        assert found is None or isinstance(found, Placement)
        starts.append(None if found is None else min(found.slots))
        if found is not None:
            occupied |= found.slots
    return starts


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
    assert first_fit(frozenset(), "1g.18gb") == GEOMETRY["1g.18gb"][0]
    assert aware(frozenset(), "1g.18gb") == GEOMETRY["1g.18gb"][6]


@pytest.mark.parametrize(
    ("profiles", "first", "chosen"),
    [
        pytest.param(["1g.18gb", "4g.71gb"], [0, None], [6, 0], id="1g-then-4g"),
        pytest.param(
            ["1g.18gb", "2g.35gb", "4g.71gb"], [0, 2, None], [6, 4, 0], id="1g-2g-then-4g"
        ),
        pytest.param(
            ["1g.18gb", "1g.18gb", "1g.18gb", "4g.71gb"],
            [0, 1, 2, None],
            [6, 5, 4, 0],
            id="three-1g-then-4g",
        ),
        pytest.param(
            ["2g.35gb", "1g.18gb", "3g.71gb", "3g.71gb"],
            [0, 2, 4, None],
            [4, 6, 0, None],
            id="both-lose-the-second-3g",
        ),
    ],
)
def test_sequences_against_first_fit(
    profiles: list[str], first: list[int | None], chosen: list[int | None]
) -> None:
    assert run(first_fit, profiles) == first
    assert run(aware, profiles) == chosen


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
