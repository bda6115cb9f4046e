"""GPUs in thousandths for `simulate --shares`: which GPU a share takes by each rule
(gpu-scheduler's packing checked against the DRA allocator itself), and the fragmentation
measure of the ATC'23 paper on hand-computed cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.dra.consumable import device_use
from scheduler.model.allocations import Allocation
from scheduler.model.devices import Device
from scheduler.tools.simulate_share_gpus import (
    FIRST_FIT,
    NO_GPU,
    PACKING,
    TIGHTEST,
    WHOLE,
    TaskTypes,
    fragmented_milli,
    lowest_untouched,
    share_gpu,
)
from tests.dra_objects import exact, gpu_device, request
from tests.unit.scheduler.test_dra_alloc_support import (
    PREDICATES,
    MatcherDouble,
    allocate,
    device_names,
    gpu_id,
    make_claim,
    node_slice,
    pools_of,
)

TWO_OF_FOUR = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int32)


def row(*free: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.array(free, dtype=np.int64)


# -- the rules on plain rows -----------------------------------------------------------------


def test_packing_takes_the_tightest_partly_used_gpu_before_an_untouched_one() -> None:
    free = row(1000, 600, 1000, 450, 1000, 1000, 1000, 1000)
    assert share_gpu(free, TWO_OF_FOUR, 8, 400, PACKING) == 3  # 450 -> 50 left, tighter than 600
    assert share_gpu(free, TWO_OF_FOUR, 8, 500, PACKING) == 1  # only 600 has room among used
    assert share_gpu(free, TWO_OF_FOUR, 8, 400, FIRST_FIT) == 0  # first fit breaks GPU 0
    assert share_gpu(free, TWO_OF_FOUR, 8, 400, TIGHTEST) == 3


def test_packing_opens_a_gpu_in_a_broken_domain_before_a_whole_one() -> None:
    # GPU 5 is full: domain 1 is broken, domain 0 whole; nothing partly used has room
    free = row(1000, 1000, 1000, 1000, 1000, 0, 1000, 1000)
    assert share_gpu(free, TWO_OF_FOUR, 8, 300, PACKING) == 4
    assert share_gpu(free, TWO_OF_FOUR, 8, 300, FIRST_FIT) == 0
    # both broken: the one with fewer untouched GPUs
    free = row(0, 0, 1000, 1000, 1000, 0, 1000, 1000)
    assert share_gpu(free, TWO_OF_FOUR, 8, 300, PACKING) == 2


def test_packing_puts_gpus_of_no_known_domain_last() -> None:
    domains = np.array([-1, 0, 0, -1], dtype=np.int32)
    assert share_gpu(row(1000, 1000, 1000, 1000), domains, 4, 300, PACKING) == 1
    assert share_gpu(row(1000, 0, 0, 1000), domains, 4, 300, PACKING) == 0


def test_no_gpu_with_room_and_padding_past_the_node_count() -> None:
    free = row(200, 100, 1000)  # the third GPU is past the node's count
    assert share_gpu(free, TWO_OF_FOUR[:3], 2, 300, PACKING) == NO_GPU
    assert share_gpu(free, TWO_OF_FOUR[:3], 2, 150, TIGHTEST) == 0
    with pytest.raises(ValueError, match="unknown GPU choice"):
        share_gpu(free, TWO_OF_FOUR[:3], 2, 100, "worst-fit")


def test_lowest_untouched_gpus_for_whole_gpu_pods() -> None:
    free = row(1000, 999, 1000, 1000, 0)
    assert lowest_untouched(free, 5, 2) == (0, 2)
    assert lowest_untouched(free, 5, 4) == ()
    assert lowest_untouched(free, 3, 3) == ()  # GPU 3 is past the count


# -- packing against the allocator -----------------------------------------------------------


def on_gpu(index: int) -> Callable[[Device], bool]:
    return lambda device: device.name == f"gpu-{index}"


ON_GPU = {f"on gpu {i}": on_gpu(i) for i in range(8)}
MATCHER = MatcherDouble({**PREDICATES, **ON_GPU})
LAYOUTS = {
    "two of four": [i // 4 for i in range(8)],
    "four of two": [i // 2 for i in range(8)],
    "one of eight": [0] * 8,
}
POOLS = pools_of(
    node_slice(
        "s",
        devices=[
            gpu_device(i, allowMultipleAllocations=True, capacity={"memory": {"value": "1000"}})
            for i in range(8)
        ],
    )
)


def claim(name: str, milli: int, *expressions: str) -> Any:
    spec = exact(count=1, expressions=expressions, capacity={"requests": {"memory": str(milli)}})
    return make_claim(name, request("gpus", spec))


@settings(max_examples=60, deadline=None)
@given(
    prior=st.lists(st.tuples(st.integers(0, 7), st.sampled_from([100, 250, 500, 800, 1000]))),
    milli=st.sampled_from([50, 200, 300, 500, 700, 1000]),
    layout=st.sampled_from(sorted(LAYOUTS)),
)
def test_packing_picks_the_gpu_the_dra_allocator_picks(
    prior: list[tuple[int, int]], milli: int, layout: str
) -> None:
    """Shares put on chosen GPUs (a share of 1000 fills one), then one more share: the
    allocator, with the domain map, takes the GPU `share_gpu(..., PACKING)` names."""
    done: list[Allocation] = []
    free = np.full(8, WHOLE, dtype=np.int64)  # free: (8,)
    for index, (gpu, amount) in enumerate(prior):
        result = allocate(
            [claim(f"p{index}", amount, f"on gpu {gpu}")],
            POOLS,
            shared=device_use(done),
            matcher=MATCHER,
        )
        if result.allocations is None:
            assert free[gpu] < amount
            continue
        done.extend(result.allocations)
        free[gpu] -= amount
    domains = {gpu_id(i): d for i, d in enumerate(LAYOUTS[layout])}
    use = device_use(done)
    result = allocate([claim("next", milli)], POOLS, shared=use, matcher=MATCHER, domains=domains)
    expected = share_gpu(free, np.array(LAYOUTS[layout], dtype=np.int32), 8, milli, PACKING)
    if expected == NO_GPU:
        assert result.allocations is None
    else:
        assert device_names(result) == [f"gpu-{expected}"]


# -- fragmentation ---------------------------------------------------------------------------


def types(*shapes: tuple[int, int, int, float], accepts: list[bool] | None = None) -> TaskTypes:
    """Types of (cpu, gpus, milli, weight), memory 1, on one node."""
    count = len(shapes)
    return TaskTypes(
        cpu=np.array([s[0] for s in shapes], dtype=np.int64),
        memory=np.ones(count, dtype=np.int64),
        gpus=np.array([s[1] for s in shapes], dtype=np.int64),
        milli=np.array([s[2] for s in shapes], dtype=np.int64),
        weight=np.array([s[3] for s in shapes], dtype=np.float64),
        accepts=np.array(accepts or [True] * count, dtype=bool).reshape(count, 1),
    )


def one_node(free: list[int], cpu: int = 8000, pods: int = 10) -> dict[str, Any]:
    return {
        "free": np.array([free], dtype=np.int64),
        "cpu_free": np.array([cpu], dtype=np.int64),
        "memory_free": np.array([10], dtype=np.int64),
        "pods_free": np.array([pods], dtype=np.int64),
    }


def test_fragmentation_by_hand() -> None:
    """GPUs free 1000 and 300. A 500-share and a whole GPU run there and cannot use the 300;
    a share asking for more cpu than is free cannot run: all 1300 are fragments for it."""
    shapes = types((1000, 1, 500, 0.5), (1000, 1, 1000, 0.25), (16000, 1, 200, 0.25))
    found = fragmented_milli(**one_node([1000, 300]), types=shapes)
    assert found.tolist() == [0.5 * 300 + 0.25 * 300 + 0.25 * 1300]


def test_fragmentation_of_multi_gpu_types_types_not_accepted_and_full_nodes() -> None:
    two = types((1000, 2, 1000, 1.0))
    assert fragmented_milli(**one_node([1000, 1000, 400]), types=two).tolist() == [400]
    assert fragmented_milli(**one_node([1000, 0, 400]), types=two).tolist() == [1400]
    refused = types((1000, 1, 100, 1.0), accepts=[False])
    assert fragmented_milli(**one_node([1000, 400]), types=refused).tolist() == [1400]
    share = types((1000, 1, 100, 1.0))
    assert fragmented_milli(**one_node([1000, 400], pods=0), types=share).tolist() == [1400]
    assert fragmented_milli(**one_node([0, 0]), types=share).tolist() == [0]
    assert fragmented_milli(**one_node([1000, 50]), types=share).tolist() == [50]
    empty = types()
    assert fragmented_milli(**one_node([1000]), types=empty).tolist() == [0]
