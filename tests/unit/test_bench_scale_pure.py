"""The scale benchmarks' pure parts: growth fits, sampling and argument parsing, and that a gang
measurement leaves the cache as it found it (no timing is asserted)."""

from __future__ import annotations

import math
import shlex

import pytest

from hack.bench import gang_kernel, kernel
from hack.bench.gang_workload import RACK_LABEL
from hack.bench.growth import exponent, fit_line
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from tests.datasets import REPO_ROOT
from tests.docs import section_blocks


def test_a_line_through_exact_points_is_found_with_no_residual() -> None:
    line = fit_line([1, 5, 50, 100], [110, 150, 600, 1100])
    assert line.intercept == pytest.approx(100)
    assert line.slope == pytest.approx(10)
    assert line.worst_residual == pytest.approx(0, abs=1e-12)
    assert line.at(12.5) == pytest.approx(225)


def test_the_worst_residual_is_relative_to_the_measured_point() -> None:
    line = fit_line([0, 1, 2], [0.5, 2.0, 3.5])
    assert line.slope == pytest.approx(1.5)
    assert line.intercept == pytest.approx(0.5)
    curved = fit_line([1, 2, 3], [1, 4, 9])  # quadratic: the line misses the first point most
    assert curved.worst_residual == pytest.approx(abs(1 - curved.at(1)) / 1)


@pytest.mark.parametrize(("sizes", "costs"), [([1, 1], [2, 3]), ([1], [2]), ([1, 2], [3])])
def test_a_line_needs_two_distinct_sizes_and_matching_costs(
    sizes: list[float], costs: list[float]
) -> None:
    with pytest.raises(ValueError):
        fit_line(sizes, costs)


def test_growth_exponent_reads_linear_flat_and_quadratic() -> None:
    assert exponent((1000, 80), (100_000, 8000)) == pytest.approx(1)
    assert exponent((1000, 80), (100_000, 80)) == pytest.approx(0)
    assert exponent((10, 1), (20, 4)) == pytest.approx(2)
    with pytest.raises(ValueError):
        exponent((0, 1), (2, 3))
    with pytest.raises(ValueError):
        exponent((2, 1), (2, 3))


def test_reference_sample_spends_a_node_budget_with_one_pod_of_each_size_at_least() -> None:
    assert kernel.reference_sample(200, 100, None, None) == 200
    assert kernel.reference_sample(200, 5000, None, None) == 40
    assert kernel.reference_sample(200, 100_000, None, None) == len(kernel.POD_SIZES)
    assert kernel.reference_sample(2, 100_000, None, None) == 2
    assert kernel.reference_sample(200, 100_000, 8, None) == 8
    assert kernel.reference_sample(200, 100_000, None, 50_000) == 0
    assert kernel.reference_sample(200, 50_000, None, 50_000) == len(kernel.POD_SIZES)


def test_node_types_name_seed_types_and_default_to_all() -> None:
    (only,) = kernel.node_types("G2-Expansion")
    assert only.gpus == 8
    assert kernel.node_types(" ") == kernel.SEED_NODE_TYPES
    with pytest.raises(ValueError, match="unknown node type"):
        kernel.node_types("G9")
    cache = kernel.build_cache(3, 0, types=(only,))
    assert [cache.nodes[name].topology.gpu_count for name in cache.names] == [8, 8, 8]


def test_int_lists_skip_blanks_and_refuse_negatives() -> None:
    assert kernel.int_list("1000, 5_000,,100000") == [1000, 5000, 100_000]
    assert kernel.int_list("") == []
    with pytest.raises(ValueError):
        kernel.int_list("5,-1")


def test_the_ratio_is_paired_and_absent_without_a_reference() -> None:
    result = kernel.Result(100, 50.0, 600.0, 200, 4, paired_vectorized_us=60.0)
    assert result.ratio == pytest.approx(10)
    assert kernel.Result(100, 50.0, None, 200, 0).ratio is None


def test_growth_lines_fit_us_per_thousand_nodes() -> None:
    results = [kernel.Result(n, 50 + n / 100, None, 10, 0) for n in (1000, 5000, 100_000)]
    fit, growth = kernel.growth_lines(results)
    assert fit.startswith("fit: 50 us + 10.0 us per 1,000 nodes")
    assert "5000 -> 100000 nodes" in growth
    assert kernel.growth_lines(results[:1]) == []


def test_spread_bench_pods_carry_a_constraint_over_the_fillers() -> None:
    spec = kernel.bench_pod(2, 0, spread=True)["spec"]
    assert isinstance(spec, dict)
    (constraint,) = spec["topologySpreadConstraints"]
    assert constraint["labelSelector"]["matchLabels"] == kernel.FILLER_LABELS
    filler = kernel.filler_pod(3, "node-a")
    assert filler["metadata"] == {
        "name": "filler-3",
        "namespace": "bench",
        "labels": {"app": "filler"},
    }


def test_fillers_are_counted_in_the_cache() -> None:
    (result,) = kernel.measure_assumed(nodes=9, counts=[12], pods=4, seed=0)
    assert result.assumed == 12
    assert result.bytes_per_filler is not None and result.bytes_per_filler > 0
    assert result.cached == len(kernel.build_cache(9, 0).pods) + 12


def test_racks_label_consecutive_nodes() -> None:
    cache = kernel.build_cache(6, 0, rack_size=4)
    racks = [cache.nodes[name].labels[RACK_LABEL] for name in cache.names]
    assert racks == ["rack-0"] * 4 + ["rack-1"] * 2


@pytest.mark.parametrize("rack_size", [0, 3])
def test_a_gang_measurement_places_both_ways_and_leaves_the_cache_as_found(rack_size: int) -> None:
    cache = kernel.build_cache(24, 0, rack_size)
    pods_before = set(cache.pods)
    used_before = cache.gpu_used.copy()
    framework = default_framework(SchedulerConfig())
    key = RACK_LABEL if rack_size else ""
    result = gang_kernel.measure(cache, framework, size=2, gpus=1, repeats=2, key=key)
    assert (result.gang_placed, result.single_placed) == (2, 2)
    assert result.gang_nodes_used <= result.single_nodes_used
    assert set(cache.pods) == pods_before
    assert (cache.gpu_used == used_before).all()
    assert result.ratio > 0 and math.isfinite(result.ratio)


def test_gang_members_have_distinct_keys_and_the_asked_gpus() -> None:
    pods = gang_kernel.members(3, 4)
    assert len({p.key for p in pods}) == 3
    assert {p.gpus for p in pods} == {4}


def test_per_member_fits_need_two_placed_sizes_per_node_count() -> None:
    rows = [
        gang_kernel.GangResult(1000, size, 1 + 0.5 * size, 1.0, size, size, 1, size)
        for size in (2, 4, 8)
    ]
    alone = gang_kernel.GangResult(5000, 2, 1.0, 1.0, 2, 2, 1, 2)
    failed = gang_kernel.GangResult(1000, 16, 500.0, 1.0, 0, 16, 0, 16)
    (line,) = gang_kernel.per_member_fits([*rows, alone, failed])
    assert line.startswith("1000 nodes: gang ms ~ 1.00 + 0.500 x members")


def scale_commands() -> list[list[str]]:
    """The command lines of docs/benchmarks.md's scale section, continuations joined, comments
    dropped, split into words."""
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    commands = []
    for block in section_blocks(text, "Scale: how cost per pod grows", ""):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_documented_scale_commands_use_flags_the_benchmarks_accept() -> None:
    """The kernel and gang commands only (the control-plane one needs a cluster to mean much)."""
    parsers = {
        "hack.bench.kernel": kernel.build_parser,
        "hack.bench.gang_kernel": gang_kernel.build_parser,
    }
    commands = [words for words in scale_commands() if words[2] in parsers]
    assert len(commands) >= 7
    for words in commands:
        assert words[:2] == ["python", "-m"], words
        args = parsers[words[2]]().parse_args(words[3:])
        kernel.int_list(args.nodes)
