"""topology.replicas: which GPUs a pod's replicas come from, packed or spread."""

from __future__ import annotations

import numpy as np
import pytest

from topology.replicas import (
    PACK,
    SPREAD,
    choose_replicas,
    node_preference,
    node_preferences,
    replica_order,
)


def test_pack_fills_the_fullest_gpu_that_has_a_free_replica() -> None:
    taken = np.array([0, 2, 4, 3, 0])  # GPU 2 is full (4 of 4)
    assert choose_replicas(taken, 4, 1, PACK) == (3,)
    assert choose_replicas(taken, 4, 2, PACK) == (1, 3)


def test_spread_takes_the_emptiest_gpus_lowest_index_first() -> None:
    taken = np.array([1, 0, 4, 0, 2])
    assert choose_replicas(taken, 4, 1, SPREAD) == (1,)
    assert choose_replicas(taken, 4, 3, SPREAD) == (0, 1, 3)


def test_replicas_come_from_distinct_gpus_or_not_at_all() -> None:
    taken = np.array([4, 3, 4])
    assert choose_replicas(taken, 4, 1, PACK) == (1,)
    assert choose_replicas(taken, 4, 2, PACK) is None
    assert choose_replicas(taken, 4, 0, SPREAD) == ()


def test_four_one_replica_pods_share_one_gpu_under_pack_and_four_gpus_under_spread() -> None:
    for policy, expected in ((PACK, [0, 0, 0, 0]), (SPREAD, [0, 1, 2, 3])):
        taken = np.zeros(8, dtype=np.int64)
        chosen = []
        for _ in range(4):
            (gpu,) = choose_replicas(taken, 4, 1, policy) or (-1,)
            taken[gpu] += 1
            chosen.append(gpu)
        assert chosen == expected, policy


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        replica_order(np.zeros(2, dtype=np.int64), 2, "random")


@pytest.mark.parametrize("seed", range(20))
def test_choice_matches_a_sorted_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    replicas = int(rng.integers(2, 6))
    taken = rng.integers(0, replicas + 1, size=int(rng.integers(1, 9)))
    count = int(rng.integers(1, 4))
    for policy in (PACK, SPREAD):
        open_gpus = [g for g in range(taken.size) if taken[g] < replicas]
        sign = -1 if policy == PACK else 1
        ranked = sorted(open_gpus, key=lambda g: (sign * int(taken[g]), g))
        expected = tuple(sorted(ranked[:count])) if len(ranked) >= count else None
        assert choose_replicas(taken, replicas, count, policy) == expected
        chosen = expected or ()
        assert len(set(chosen)) == len(chosen)


def test_pack_prefers_the_node_with_partly_used_gpus_spread_the_emptiest() -> None:
    fresh = np.zeros(8, dtype=np.int64)
    partly = np.array([2, 0, 0, 0, 0, 0, 0, 0])
    two_partly = np.array([2, 1, 0, 0, 0, 0, 0, 0])
    full = np.full(8, 4)
    assert node_preference(partly, 4, 1, PACK) > node_preference(fresh, 4, 1, PACK)
    assert node_preference(two_partly, 4, 1, PACK) > node_preference(partly, 4, 1, PACK)
    assert node_preference(fresh, 4, 1, SPREAD) > node_preference(partly, 4, 1, SPREAD)
    assert node_preference(full, 4, 1, PACK) == node_preference(full, 4, 1, SPREAD) == 0.0
    for taken in (fresh, partly, two_partly):
        for policy in (PACK, SPREAD):
            assert 0.0 <= node_preference(taken, 4, 1, policy) <= 100.0


@pytest.mark.parametrize("seed", range(30))
def test_vectorized_preferences_match_the_one_node_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes, width = int(rng.integers(1, 12)), int(rng.integers(1, 9))
    replicas = rng.integers(2, 6, size=nodes)
    gpu_count = rng.integers(1, width + 1, size=nodes)
    taken = np.stack([rng.integers(0, r + 1, size=width) for r in replicas])
    count = rng.integers(1, 4, size=nodes)
    for policy in (PACK, SPREAD):
        got = node_preferences(taken, replicas, gpu_count, count, policy)
        expected = [
            node_preference(taken[n, : gpu_count[n]], int(replicas[n]), int(count[n]), policy)
            for n in range(nodes)
        ]
        assert got == pytest.approx(expected)
