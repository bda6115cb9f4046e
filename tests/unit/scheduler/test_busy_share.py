"""`gpu-scheduler idle-report --plot`: the busy share per namespace built from Prometheus's range
answers, the figure drawn from it, and the flag's errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from reclaim.prometheus import RangeSeries
from scheduler.cli import main
from scheduler.tools.busy_share import (
    ALLOCATED,
    BUSY,
    POINTS,
    UNMEASURED,
    BusyHistory,
    NamespaceHistory,
    combine,
    history_queries,
    step_and_range,
)
from scheduler.tools.plots import (
    BUSY_SHARE_SIZE,
    INSTALL_HINT,
    MAX_NAMESPACES_DRAWN,
    broken_at_gaps,
    plot_busy_share,
    time_unit,
    trailing_mean,
)
from tests.figures import MAX_FIGURE_BYTES, png_size

STEP_S = 60.0


def series(values: list[float], start: float = 0.0, **labels: str) -> RangeSeries:
    points = tuple((start + STEP_S * i, value) for i, value in enumerate(values))
    return RangeSeries(labels=labels, points=points)


def test_step_and_range_cover_two_periods_and_four_scrapes() -> None:
    assert step_and_range(86_400, 60, 30) == (360.0, 360.0)  # 240 points a day
    assert step_and_range(3_600, 60, 30) == (15.0, 120.0)  # two periods
    assert step_and_range(3_600, 5, 30) == (15.0, 120.0)  # four scrapes
    assert step_and_range(100, 5, 1) == (1.0, 10.0)  # at least a one-second step
    assert math.ceil(86_400 / step_and_range(86_400, 60, 30)[0]) <= POINTS


def test_queries_take_one_replica_per_class_and_sum_the_classes() -> None:
    busy, measured = history_queries(120)
    labels = "namespace, exported_namespace"
    assert busy == (f"sum by ({labels}) (max by ({labels}, priority_class) (rate({BUSY}[120s])))")
    assert measured == (
        f"sum by ({labels}) (max by ({labels}, priority_class) "
        f"(rate({ALLOCATED}[120s]) - rate({UNMEASURED}[120s])))"
    )


def test_combine_divides_where_measured_and_orders_by_measured_gpu_time() -> None:
    busy = [
        series([1.0, 2.0, 3.0, 4.0], namespace="team-a"),
        series([0.0, float("nan"), 2.0, 1.0], namespace="gpu-scheduler", exported_namespace="b"),
    ]
    measured = [
        series([2.0, 4.0, 4.0, 0.0], namespace="team-a"),  # nothing measured at the last step
        series([1.0, 1.0, 8.0, 8.0], namespace="gpu-scheduler", exported_namespace="b"),
    ]
    a_first = combine(busy, measured, STEP_S)
    assert [h.namespace for h in a_first] == ["b", "team-a"]  # 17 GPUs x steps against 10
    b, a = a_first
    assert a == NamespaceHistory("team-a", (0.0, 60.0, 120.0), (0.5, 0.5, 0.75), (2.0, 4.0, 4.0))
    assert b.timestamps == (0.0, 120.0, 180.0)  # NaN busy: no point
    assert b.busy_share == (0.0, 0.25, 0.125)
    assert b.measured_gpu_seconds(STEP_S) == 17.0 * STEP_S
    assert [h.namespace for h in combine(busy, measured, STEP_S, namespace="team-a")] == ["team-a"]
    assert combine(busy, measured, STEP_S, namespace="nobody") == []


def test_combine_leaves_out_the_first_range_of_every_run_of_points() -> None:
    values = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]  # a run of 4 points, a gap, 3 more
    (only,) = combine(
        [series(values, namespace="a")], [series(values, namespace="a")], 60, None, 120
    )
    assert only.timestamps == (120.0, 180.0, 480.0)
    assert (
        combine(
            [series([1.0, 1.0], namespace="a")], [series([1.0, 1.0], namespace="a")], 60, None, 120
        )
        == []
    )


def test_combine_takes_the_larger_value_when_two_series_name_one_namespace() -> None:
    busy = [series([1.0], namespace="a"), series([2.0], namespace="a", job="other")]
    measured = [series([4.0], namespace="a"), series([3.0], namespace="a", job="other")]
    (only,) = combine(busy, measured, STEP_S)
    assert (only.busy_share, only.measured_gpus) == ((0.5,), (4.0,))


def history(count: int) -> BusyHistory:
    """`count` namespaces over an hour, ns-0 with the most measured GPUs."""
    histories = tuple(
        NamespaceHistory(
            f"ns-{i}",
            tuple(float(t) for t in range(0, 3600, 60)),
            tuple(0.1 * (i % 10) for _ in range(60)),
            tuple(float(count - i) for _ in range(60)),
        )
        for i in range(count)
    )
    return BusyHistory(0.0, 3600.0, 60.0, 120.0, histories)


def test_the_figure_draws_the_namespaces_with_most_gpu_time(tmp_path: Path) -> None:
    path = tmp_path / "busy.png"
    drawn = plot_busy_share(history(MAX_NAMESPACES_DRAWN + 2), path, "title")
    assert [h.namespace for h in drawn] == [f"ns-{i}" for i in range(MAX_NAMESPACES_DRAWN)]
    assert png_size(path) == BUSY_SHARE_SIZE
    assert path.stat().st_size <= MAX_FIGURE_BYTES


def test_lines_break_where_a_namespace_has_no_points() -> None:
    times = np.array([0.0, 60.0, 120.0, 300.0, 360.0])
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    broken = broken_at_gaps(values, times, STEP_S)
    assert np.array_equal(broken, [1.0, 2.0, 3.0, np.nan, 4.0, 5.0], equal_nan=True)
    assert np.array_equal(broken_at_gaps(values[:3], times[:3], STEP_S), values[:3])


def test_trailing_mean_averages_the_points_of_the_span_before_each() -> None:
    times = np.array([0.0, 1.0, 2.0, 3.0, 10.0])
    values = np.array([4.0, 2.0, 4.0, 2.0, 6.0])
    assert trailing_mean(values, times, 2.0).tolist() == [4.0, 3.0, 3.0, 3.0, 6.0]
    assert trailing_mean(values, times, 0.5).tolist() == values.tolist()
    assert trailing_mean(values, times, 0.0).tolist() == values.tolist()
    assert trailing_mean(values, times, 100.0).tolist() == [4.0, 3.0, 10 / 3, 3.0, 3.6]


def test_time_unit_follows_the_window() -> None:
    assert time_unit(120) == (1.0, "seconds")
    assert time_unit(3_600) == (60.0, "minutes")
    assert time_unit(86_400) == (3_600.0, "hours")
    assert time_unit(7 * 86_400) == (86_400.0, "days")


def test_idle_report_plot_errors_are_one_line_before_reading_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [
        "idle-report",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--prometheus-url",
        "http://x",
    ]
    missing = tmp_path / "none" / "busy.png"
    assert main([*argv, "--plot", str(missing)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"gpu-scheduler idle-report: --plot {missing}: no such directory {missing.parent}\n"
    )

    for name in [n for n in sys.modules if n.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([*argv, "--plot", str(tmp_path / "busy.png")]) == 2
    assert capsys.readouterr().err == f"gpu-scheduler idle-report: {INSTALL_HINT}\n"


@pytest.mark.parametrize("window", ["0", "-5", "soon"])
def test_plot_window_must_be_positive(window: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["idle-report", "--prometheus-url", "http://x", "--plot-window", window])
    assert exited.value.code == 2
    assert "--plot-window" in capsys.readouterr().err
