"""`gpu-scheduler simulate --plot`: the series a run records, and the figure drawn from them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scheduler.tools.plots import INSTALL_HINT, SIMULATION_SIZE, identical_runs, plot_simulation
from scheduler.tools.simulate import simulate
from scheduler.tools.simulate_policies import POLICIES
from scheduler.tools.simulate_series import MAX_SAMPLES, UsageSeries, sample_stride
from scheduler.tools.simulate_trace import TraceNode, TracePod, read_nodes, read_pods
from tests.datasets import SMALL_OPENB_DIR
from tests.figures import MAX_FIGURE_BYTES, png_size
from tests.unit.scheduler.test_simulate import run_cli

SMALL_NODES = SMALL_OPENB_DIR / "openb_node_list_gpu_node.csv"
SMALL_PODS = SMALL_OPENB_DIR / "openb_pod_list_default.csv"


def test_a_small_pod_on_the_small_node_keeps_the_big_node_usable_over_time() -> None:
    """An 8-GPU and a 4-GPU node, a 1-GPU pod then an 8-GPU pod. gpu-scheduler puts the 1-GPU
    pod on the 4-GPU node, so the 8 GPUs stay idle (usable) until the 8-GPU pod takes them;
    least-allocated spreads it onto the 8-GPU node, which fragments all 11 free GPUs and turns
    the 8-GPU pod away."""
    nodes = [TraceNode("big", "64", "256Gi", 8, "X"), TraceNode("small", "64", "256Gi", 4, "X")]
    pods = [TracePod("one", "2", "8Gi", 1), TracePod("eight", "2", "8Gi", 8)]
    _, results = simulate(nodes, pods, ["gpu-scheduler", "least-allocated"], demand=0.75)
    ours, spread = (r.series for r in results)
    for series in (ours, spread):
        assert series.gpus_total == 12
        assert series.arrivals == [0, 1, 2]
        assert series.gpus_requested == [0, 1, 9]
    # before the first arrival, the 4-GPU node is fragmented: it can never take an 8-GPU pod
    assert (ours.allocated, ours.fragmented, ours.idle) == ([0, 1, 9], [4, 3, 3], [8, 8, 0])
    assert (spread.allocated, spread.fragmented, spread.idle) == ([0, 1, 1], [4, 11, 11], [8, 0, 0])


def test_recorded_series_hold_their_relations_and_end_at_the_reported_figures() -> None:
    workload, results = simulate(
        read_nodes(SMALL_NODES), read_pods(SMALL_PODS), list(POLICIES), demand=16.0
    )
    arrivals = len(workload.pods)
    assert arrivals > MAX_SAMPLES  # enough arrivals that only every stride-th is sampled
    for result in results:
        series = result.series
        count = len(series.arrivals)
        assert count <= MAX_SAMPLES + 1
        assert series.arrivals[0] == 0 and series.arrivals[-1] == arrivals
        assert series.arrivals == sorted(set(series.arrivals))
        assert series.gpus_requested[-1] == workload.gpus_requested
        assert series.gpus_requested == sorted(series.gpus_requested)
        assert series.allocated == sorted(series.allocated)  # no pod leaves
        for allocated, fragmented, idle in zip(
            series.allocated, series.fragmented, series.idle, strict=True
        ):
            assert 0 <= allocated <= series.gpus_total
            assert fragmented >= 0 and idle >= 0
            assert allocated + fragmented + idle == series.gpus_total
        assert series.gpus_total == result.gpus_total
        assert series.allocated[-1] == result.gpus_total - result.gpus_unallocated
        assert series.fragmented[-1] == result.gpus_stranded


def test_sample_stride_keeps_at_most_max_samples() -> None:
    assert [sample_stride(n) for n in (0, 1, MAX_SAMPLES, MAX_SAMPLES + 1)] == [1, 1, 1, 2]
    for arrivals in (1, 399, 400, 401, 9472, 100_000):
        stride = sample_stride(arrivals)
        assert len(range(0, arrivals, stride)) <= MAX_SAMPLES


def test_identical_runs_are_named_after_the_first_of_them() -> None:
    def series(allocated: list[int]) -> UsageSeries:
        one = UsageSeries()
        for index, value in enumerate(allocated):
            one.add(index, index, 10, value, 0)
        return one

    runs = [("a", series([0, 1])), ("b", series([0, 2])), ("c", series([0, 1]))]
    runs.append(("d", series([0, 1])))
    assert identical_runs(runs) == {2: "a", 3: "a"}


def test_the_figure_is_a_png_of_the_documented_size(tmp_path: Path) -> None:
    _, results = simulate(read_nodes(SMALL_NODES), read_pods(SMALL_PODS), list(POLICIES))
    path = tmp_path / "sim.png"
    plot_simulation([(r.policy, r.series) for r in results], path, "title", 8)
    assert png_size(path) == SIMULATION_SIZE
    assert path.stat().st_size <= MAX_FIGURE_BYTES


def test_cli_writes_the_plot_beside_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sim.png"
    argv = ["--nodes", str(SMALL_NODES), "--pods", str(SMALL_PODS), "--policy", "gpu-scheduler"]
    code, out, err = run_cli([*argv, "--plot", str(path)], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("nodes: ")
    assert png_size(path) == SIMULATION_SIZE


def test_plot_flag_errors_are_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--nodes", str(SMALL_NODES), "--pods", str(SMALL_PODS)]
    missing = tmp_path / "no-such-folder" / "sim.png"
    code, out, err = run_cli([*argv, "--plot", str(missing)], capsys)
    assert (code, out) == (2, "")
    assert err == f"gpu-scheduler simulate: --plot {missing}: no such directory {missing.parent}\n"

    gangs = ["--nodes", str(SMALL_NODES), "--random-gangs", "3"]
    code, out, err = run_cli([*gangs, "--plot", str(tmp_path / "g.png")], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "gpu-scheduler simulate: --plot draws a --pods simulation; "
        "it is not available with --random-gangs\n"
    )
    assert not (tmp_path / "g.png").exists()

    code, out, err = run_cli([*argv, "--shares", "--plot", str(tmp_path / "s.png")], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "gpu-scheduler simulate: --plot draws whole-GPU simulations; not available with --shares\n"
    )


def test_without_matplotlib_plot_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = tmp_path / "sim.png"
    argv = ["--nodes", str(SMALL_NODES), "--pods", str(SMALL_PODS), "--plot", str(path)]
    code, out, err = run_cli(argv, capsys)
    assert (code, out) == (2, "")  # refused before the simulation printed anything
    assert err == f"gpu-scheduler simulate: {INSTALL_HINT}\n"
    assert "gpu-scheduler[plot]" in err
    assert not path.exists()
