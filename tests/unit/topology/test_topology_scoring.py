"""NVLink-domain score: the seed's worked example, rule tables, and vectorized == reference."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.domains import NodeTopology, parse_domains
from topology.occupancy import NO_DOMAIN, build_domain_arrays, choose_gpus
from topology.reference import reference_score
from topology.scoring import (
    DEFAULT_WEIGHTS,
    NO_NODE,
    Normalization,
    ScoreBreakdown,
    ScoreWeights,
    normalize,
    pick_best,
    score_nodes,
)


@dataclass(frozen=True)
class Node:
    """Test builder: a node's domain annotation, GPU count and GPUs in use."""

    domains: str
    gpus: int
    used: tuple[int, ...] = ()

    def topology(self) -> NodeTopology:
        return parse_domains(self.domains, self.gpus)

    def mask(self) -> np.ndarray:
        mask = np.zeros(self.gpus, dtype=np.bool_)  # mask: (gpus,)
        mask[list(self.used)] = True
        return mask


def score(g: int, nodes: list[Node], weights: ScoreWeights = DEFAULT_WEIGHTS) -> ScoreBreakdown:
    free, size, _ = build_domain_arrays([n.topology() for n in nodes], [n.mask() for n in nodes])
    total = size.sum(axis=1)  # total: (nodes,)
    used = total - free.sum(axis=1)  # used: (nodes,)
    return score_nodes(g, free, size, total, used, weights)


def components(result: ScoreBreakdown, index: int) -> tuple[float, ...]:
    return (
        float(result.base[index]),
        float(result.domain_integrity[index]),
        float(result.node_matching[index]),
        float(result.domain_completion[index]),
        float(result.efficiency[index]),
        float(result.raw[index]),
    )


HALF_USED_PAIR = Node("0-1", 2, used=(0,))
EMPTY_QUADS = Node("0-3,4-7", 8)
EMPTY_NVSWITCH = Node("0-7", 8)


def test_seed_worked_example() -> None:
    result = score(1, [HALF_USED_PAIR, EMPTY_QUADS])
    assert components(result, 0) == (50, 50, 80, 40, 30, 250)
    assert components(result, 1) == (50, 50, -40, 0, -20, 40)
    np.testing.assert_array_equal(normalize(result.raw), [92.0, 31.0])


@pytest.mark.parametrize(
    ("case", "g", "node", "expected"),
    [
        # (base, integrity, matching, completion, efficiency, raw)
        ("exact fit of a whole quad", 4, EMPTY_QUADS, (50, 80, 80, 0, 0, 210)),
        ("exact fit of a whole pair", 2, Node("0-1,2-3", 4), (50, 80, 80, 0, 0, 210)),
        ("1-GPU node for a 1-GPU pod", 1, Node("0", 1), (50, 80, 80, 0, 30, 240)),
        ("completion of a used quad", 2, Node("0-3,4-7", 8, (0, 1)), (50, 50, 20, 40, 0, 160)),
        (
            "no completion: domain not filled",
            1,
            Node("0-3,4-7", 8, (0, 1)),
            (50, 50, -40, 0, 0, 60),
        ),
        ("span two pairs", 3, Node("0-1,2-3", 4), (50, -20, 80, 0, 20, 130)),
        ("span four singles", 4, Node("0,1,2,3,4,5,6,7", 8), (50, -60, 80, 0, 0, 70)),
        (
            "span: largest domain fits g, none has g free",
            3,
            Node("0-3,4-7", 8, (0, 1, 4, 5)),
            (50, -20, 20, 0, 20, 70),
        ),
        ("all-GPU pod on two quads", 8, EMPTY_QUADS, (50, -20, 80, 0, 30, 140)),
        ("all-GPU pod on NVSwitch", 8, EMPTY_NVSWITCH, (50, 80, 80, 0, 30, 240)),
        ("node matching fair tier", 1, Node("0-1,2-3", 4), (50, 50, 20, 0, -20, 100)),
        ("utilization 70-90 %", 1, Node("0-3,4-7", 8, (0, 1, 2, 4, 5)), (50, 50, -40, 40, 20, 120)),
        # Every threshold is inclusive on the side the table says: 10 GPUs make u exact.
        ("utilization exactly 0.9", 1, Node("0-4,5-9", 10, (*range(8),)), (50, 50, -40, 0, 30, 90)),
        ("utilization exactly 0.7", 1, Node("0-4,5-9", 10, (*range(6),)), (50, 50, -40, 0, 20, 80)),
        ("utilization exactly 0.3", 1, Node("0-4,5-9", 10, (0, 1)), (50, 50, -40, 0, 0, 60)),
        ("utilization 0.2", 1, Node("0-4,5-9", 10, (0,)), (50, 50, -40, 0, -20, 40)),
        ("share exactly 1/2", 2, Node("0-1,2-3", 4, (0, 1)), (50, 80, 80, 0, 30, 240)),
        ("share just under 1/2", 4, Node("0-4,5-9", 10), (50, 50, 20, 0, 0, 120)),
        ("share exactly 1/4", 2, Node("0-3,4-7", 8, (0, 1, 2)), (50, 50, 20, 0, 0, 120)),
        ("share just under 1/4", 2, Node("0-4,5-9", 10, (0, 1, 2)), (50, 50, -40, 40, 0, 100)),
    ],
)
def test_rule_table(case: str, g: int, node: Node, expected: tuple[float, ...]) -> None:
    result = score(g, [node])
    assert components(result, 0) == expected, case
    ref = reference_score(g, node.topology(), list(node.mask()))
    assert ref is not None
    assert ref.raw == expected[-1]


def test_keep_the_eight_gpu_node_free() -> None:
    nodes = [EMPTY_QUADS, HALF_USED_PAIR, Node("0-1,2-3", 4, (0,)), EMPTY_NVSWITCH]
    one = score(1, nodes)
    assert one.raw[0] < one.raw[1]
    assert one.raw[3] < one.raw[1]
    assert pick_best(normalize(one.raw), one.feasible, np.random.default_rng(0)) == 1

    eight = score(8, [*nodes, Node("0-3,4-7", 8, (3,))])
    np.testing.assert_array_equal(eight.feasible, [True, False, False, True, False])
    assert np.isnan(eight.raw[[1, 2, 4]]).all()
    assert eight.raw[3] > eight.raw[0]  # one NVSwitch domain beats spanning two quads
    assert pick_best(normalize(eight.raw), eight.feasible, np.random.default_rng(0)) == 3


def test_infeasible_nodes() -> None:
    result = score(3, [Node("0-1", 2), Node("0-3", 4, (0, 1)), Node("0-3", 4, (0,))])
    np.testing.assert_array_equal(result.feasible, [False, False, True])
    np.testing.assert_array_equal(result.single_domain_possible, [False, False, True])
    np.testing.assert_array_equal(result.chosen_domain, [NO_DOMAIN, NO_DOMAIN, 0])
    np.testing.assert_array_equal(result.domains_spanned, [0, 0, 1])
    for array in (result.base, result.domain_integrity, result.node_matching, result.efficiency):
        assert array[0] == array[1] == 0.0
    assert np.isnan(result.raw[:2]).all()
    assert np.isnan(normalize(result.raw)[:2]).all()


def test_spanning_is_feasible_but_not_single_domain() -> None:
    result = score(3, [Node("0-3,4-7", 8, (0, 1, 4, 5))])
    assert result.feasible[0]
    assert not result.single_domain_possible[0]
    assert result.domains_spanned[0] == 2
    assert result.chosen_domain[0] == NO_DOMAIN


def test_nodes_without_gpus_and_empty_cluster() -> None:
    result = score(1, [Node("", 0)])
    assert not result.feasible[0]
    empty = score_nodes(1, np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0), np.zeros(0))
    assert empty.raw.shape == (0,)
    assert pick_best(normalize(empty.raw), empty.feasible, np.random.default_rng(1)) == NO_NODE


@pytest.mark.parametrize(
    ("g", "shapes", "message"),
    [
        (0, ((2, 2), (2, 2), (2,), (2,)), "at least one GPU, got 0"),
        (1, ((2, 2), (2, 3), (2,), (2,)), r"shapes disagree: \(2, 2\) \(2, 3\) \(2,\)"),
        (1, ((2,), (2,), (2,), (2,)), r"shapes disagree: \(2,\) \(2,\) \(2,\)"),
        (1, ((2, 2), (2, 2), (3,), (3,)), r"shapes disagree: \(2, 2\) \(2, 2\) \(3,\)"),
        (1, ((2, 2), (2, 2), (2,), (3,)), r"gpu_used shape \(3,\) != gpu_total shape \(2,\)"),
    ],
)
def test_bad_arguments(g: int, shapes: tuple[tuple[int, ...], ...], message: str) -> None:
    free, size, total, used = (np.ones(shape, dtype=np.int64) for shape in shapes)
    with pytest.raises(ValueError, match=message):
        score_nodes(g, free, size, total, used)


def test_result_dtypes() -> None:
    """Points are float64 and indices int64, also when weights and inputs are Python ints."""
    integer_weights = ScoreWeights(base=50, single_domain_fit=50, util_low=-20)
    result = score_nodes(1, [[1, 2], [0, 0]], [[2, 2], [2, 2]], [4, 4], [1, 4], integer_weights)
    for points in (result.base, result.domain_integrity, result.node_matching, result.raw):
        assert points.dtype == np.float64
    assert result.chosen_domain.dtype == np.int64
    assert result.domains_spanned.dtype == np.int64
    np.testing.assert_array_equal(result.chosen_domain, [0, NO_DOMAIN])
    np.testing.assert_array_equal(result.domains_spanned, [1, 0])


@pytest.mark.filterwarnings("error")
def test_nodes_without_gpus_raise_no_numpy_warning() -> None:
    result = score(2, [Node("", 0), HALF_USED_PAIR, EMPTY_QUADS])
    np.testing.assert_array_equal(result.feasible, [False, False, True])
    normalized = normalize(result.raw)  # normalized: (nodes,)
    assert np.isnan(normalized[:2]).all()
    assert result.raw[2] == 100.0  # 50 + 50 + 20 + 0 - 20
    assert normalized[2] == pytest.approx(31 + (100 - 40) * 61 / 210)


def test_weights_are_configurable_and_validated() -> None:
    flat = ScoreWeights(base=0.0, node_match_far=0.0, util_low=0.0)
    result = score(1, [EMPTY_QUADS], flat)
    assert components(result, 0) == (0, 50, 0, 0, 0, 50)
    with pytest.raises(ValueError, match="node_match_fair_ratio must be <= node_match_close"):
        ScoreWeights(node_match_fair_ratio=0.6)
    with pytest.raises(ValueError, match="need util_low_threshold <= util_good_threshold <="):
        ScoreWeights(util_low_threshold=0.8)
    with pytest.raises(ValueError, match=r"^raw_low and raw_high must differ$"):
        Normalization(raw_low=1.0, raw_high=1.0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(40.0, 31.0), (250.0, 92.0), (145.0, 61.5), (1000.0, 100.0), (-500.0, 0.0)],
)
def test_normalize(raw: float, expected: float) -> None:
    assert normalize(np.array([raw]))[0] == pytest.approx(expected, abs=1e-12)


def test_pick_best_is_seeded_and_uniform_among_ties() -> None:
    scores = np.array([80.0, 92.0, np.nan, 92.0, 92.0, 99.0])  # scores: (nodes,)
    feasible = np.array([True, True, False, True, True, False])  # feasible: (nodes,)
    first = [pick_best(scores, feasible, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(first)) == 1
    rng = np.random.default_rng(11)
    picks = [pick_best(scores, feasible, rng) for _ in range(600)]
    counts = {index: picks.count(index) for index in set(picks)}
    assert set(counts) == {1, 3, 4}
    assert min(counts.values()) > 150
    assert pick_best(np.array([np.nan]), np.array([True]), rng) == NO_NODE


def test_pick_best_takes_feasibility_as_zero_or_one() -> None:
    rng = np.random.default_rng(0)
    # The infeasible node 0 has the top score; 0/1 integers must act as a mask, not as indices.
    assert pick_best([100.0, 50.0, 60.0], [0, 1, 1], rng) == 2
    assert pick_best([100, 50, 60], [1, 1, 1], rng) == 0


def test_pick_best_draws_once_per_decision() -> None:
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    pick_best(np.array([1.0, 2.0]), np.array([True, True]), a)
    b.integers(1)
    assert a.integers(1 << 30) == b.integers(1 << 30)


@st.composite
def clusters(draw: st.DrawFn) -> list[tuple[NodeTopology, list[bool]]]:
    """1..12 nodes, each 1..8 GPUs, any partition into domains, any GPUs in use."""
    nodes = []
    for _ in range(draw(st.integers(1, 12))):
        gpu_count = draw(st.integers(1, 8))
        labels = draw(st.lists(st.integers(0, 7), min_size=gpu_count, max_size=gpu_count))
        groups: dict[int, list[int]] = {}
        for gpu, label in enumerate(labels):
            groups.setdefault(label, []).append(gpu)
        domains = tuple(sorted(tuple(members) for members in groups.values()))
        used = draw(st.lists(st.booleans(), min_size=gpu_count, max_size=gpu_count))
        nodes.append((NodeTopology(gpu_count, domains), used))
    return nodes


POINTS = st.integers(-100, 100).map(float)
FRACTIONS = st.integers(0, 20).map(lambda k: k / 20)


@st.composite
def weights(draw: st.DrawFn) -> ScoreWeights:
    fair, close = sorted(draw(st.lists(FRACTIONS, min_size=2, max_size=2)))
    low, good, high = sorted(draw(st.lists(FRACTIONS, min_size=3, max_size=3)))
    return ScoreWeights(
        base=draw(POINTS),
        single_domain_fit=draw(POINTS),
        exact_domain_fit=draw(POINTS),
        per_extra_domain=draw(POINTS),
        node_match_close_ratio=close,
        node_match_close=draw(POINTS),
        node_match_fair_ratio=fair,
        node_match_fair=draw(POINTS),
        node_match_far=draw(POINTS),
        domain_completion=draw(POINTS),
        util_high_threshold=high,
        util_high=draw(POINTS),
        util_good_threshold=good,
        util_good=draw(POINTS),
        util_low_threshold=low,
        util_low=draw(POINTS),
    )


def check_against_reference(
    g: int, cluster: list[tuple[NodeTopology, list[bool]]], w: ScoreWeights
) -> None:
    topologies = [topology for topology, _ in cluster]
    masks = [np.array(used, dtype=np.bool_) for _, used in cluster]
    free, size, _ = build_domain_arrays(topologies, masks)
    total = np.array([t.gpu_count for t in topologies])  # total: (nodes,)
    used_count = np.array([int(m.sum()) for m in masks])  # used_count: (nodes,)
    result = score_nodes(g, free, size, total, used_count, w)
    for index, (topology, used) in enumerate(cluster):
        ref = reference_score(g, topology, used, w)
        if ref is None:
            assert not result.feasible[index]
            assert math.isnan(result.raw[index])
            assert choose_gpus(topology, masks[index], g) is None
            continue
        assert result.feasible[index]
        assert components(result, index) == (
            ref.base,
            ref.domain_integrity,
            ref.node_matching,
            ref.domain_completion,
            ref.efficiency,
            ref.raw,
        )
        assert result.chosen_domain[index] == ref.chosen_domain
        assert result.domains_spanned[index] == ref.domains_spanned
        assert result.single_domain_possible[index] == (ref.chosen_domain != NO_DOMAIN)
        choice = choose_gpus(topology, masks[index], g)
        assert choice is not None
        assert choice.domain == ref.chosen_domain
        assert len({topology.domain_of(gpu) for gpu in choice.gpus}) == ref.domains_spanned


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), clusters())
def test_vectorized_equals_reference_default_weights(
    g: int, cluster: list[tuple[NodeTopology, list[bool]]]
) -> None:
    check_against_reference(g, cluster, DEFAULT_WEIGHTS)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), clusters(), weights())
def test_vectorized_equals_reference_any_weights(
    g: int, cluster: list[tuple[NodeTopology, list[bool]]], w: ScoreWeights
) -> None:
    check_against_reference(g, cluster, w)


@given(st.integers(1, 8), clusters())
def test_normalized_scores_are_in_range(
    g: int, cluster: list[tuple[NodeTopology, list[bool]]]
) -> None:
    topologies = [topology for topology, _ in cluster]
    masks = [np.array(used, dtype=np.bool_) for _, used in cluster]
    free, size, _ = build_domain_arrays(topologies, masks)
    total = size.sum(axis=1)  # total: (nodes,)
    result = score_nodes(g, free, size, total, total - free.sum(axis=1))
    normalized = normalize(result.raw)  # normalized: (nodes,)
    feasible_scores = normalized[result.feasible]  # feasible_scores: (feasible,)
    assert ((feasible_scores >= 0) & (feasible_scores <= 100)).all()
    assert np.isnan(normalized[~result.feasible]).all()
