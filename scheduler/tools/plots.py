"""PNG figures of the offline tools: data in, a file out.

- `plot_simulation`: `gpu-scheduler simulate --plot`, GPUs allocated, fragmented and idle as
  the pods arrive, one panel per quantity, one line per policy (`scheduler.tools.simulate_series`).
- `plot_busy_share`: `gpu-scheduler idle-report --plot`, the busy share of measured GPU time per
  namespace over time, and the GPUs it was measured on (`scheduler.tools.busy_share`).

Drawn with matplotlib, an optional extra (`pip install 'gpu-scheduler[plot]'`), on its Agg
canvas: no display, no pyplot state. Without matplotlib every entry point raises
`PlotUnavailable`, whose message is the one line a command prints. Figures have a fixed size in
pixels (`SIMULATION_SIZE`, `BUSY_SHARE_SIZE`).
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from scheduler.tools.busy_share import BusyHistory, NamespaceHistory
from scheduler.tools.simulate_series import UsageSeries

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FloatArray = npt.NDArray[np.float64]
TIME_UNITS = (
    (3 * 86_400.0, 86_400.0, "days"),
    (3 * 3_600.0, 3_600.0, "hours"),
    (180.0, 60.0, "minutes"),
)
"""(windows longer than this, seconds per unit, unit) for the busy share's time axis; shorter
windows are drawn in seconds."""
INSTALL_HINT = "--plot needs matplotlib: pip install 'gpu-scheduler[plot]'"
DPI = 100
PALETTE_COLORS = 256
SIMULATION_SIZE = (1000, 1000)
"""Width and height of `plot_simulation`'s PNG, in pixels."""
BUSY_SHARE_SIZE = (1000, 700)
"""Width and height of `plot_busy_share`'s PNG, in pixels."""
MAX_NAMESPACES_DRAWN = 8
"""Namespaces with the most measured GPU time drawn by `plot_busy_share`; the rest are named
as a count in the title, so the legend stays readable."""
LEGEND_WIDTH_CHARS = 130
"""About the characters a legend row below a figure holds (its columns follow the longest
name)."""
EMPHASIZED = "gpu-scheduler"
"""The policy drawn with a thicker line."""


class PlotUnavailable(ValueError):
    """matplotlib is not installed; the message says how to install it (a ValueError, so a
    command reports it as bad input: one line, exit status 2)."""


def require_matplotlib() -> None:
    """Raise `PlotUnavailable` unless matplotlib (its Agg canvas) can be imported."""
    try:
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None


def add_plot_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """`--plot FILE.png` on `parser`; `what` says what the figure shows."""
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help=f"also draw {what} into this PNG file (needs gpu-scheduler[plot])",
    )


def check_plot_target(path: Path) -> None:
    """Before any work: `PlotUnavailable` without matplotlib, `ValueError` (naming the flag)
    when `path` cannot be written as a file."""
    require_matplotlib()
    if not path.parent.is_dir():
        raise ValueError(f"--plot {path}: no such directory {path.parent}")
    if path.is_dir():
        raise ValueError(f"--plot {path}: is a directory")


def _figure(size: tuple[int, int], rows: int) -> tuple[Figure, list[Axes]]:
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)
    return figure, [row[0] for row in axes]


def _save(figure: Figure, path: Path) -> None:
    """Write `figure` to `path` as a PNG of `PALETTE_COLORS` colors (a third of the bytes of
    full color, the same picture to the eye for lines and text: a line's color is kept exactly
    even when it shows in a few pixels)."""
    from PIL import Image

    rendered = io.BytesIO()
    figure.savefig(rendered, format="png", dpi=DPI, metadata={"Software": None})
    rendered.seek(0)
    with Image.open(rendered) as image:
        palette = image.convert("RGB").quantize(PALETTE_COLORS, Image.Quantize.MEDIANCUT)
        palette.save(path, format="PNG", optimize=True)


def _percent_axis(axes: Axes, total: float, label: str) -> None:
    """A right-hand axis reading the left one's GPUs as % of `total`."""
    scale = 100.0 / max(total, 1.0)

    def to_percent(gpus: ArrayLike) -> FloatArray:
        return np.asarray(gpus, dtype=np.float64) * scale

    def to_gpus(percent: ArrayLike) -> FloatArray:
        return np.asarray(percent, dtype=np.float64) / scale

    right = axes.secondary_yaxis("right", functions=(to_percent, to_gpus))
    right.set_ylabel(label)


def identical_runs(runs: Sequence[tuple[str, UsageSeries]]) -> dict[int, str]:
    """Index of a run -> the policy of an earlier run with the very same series (its line would
    hide under that one's: it is drawn dashed and its legend entry says so)."""
    twins: dict[int, str] = {}
    for index, (_, series) in enumerate(runs):
        for policy, earlier in runs[:index]:
            if (series.gpus_requested, series.allocated, series.fragmented) == (
                earlier.gpus_requested,
                earlier.allocated,
                earlier.fragmented,
            ):
                twins[index] = policy
                break
    return twins


def plot_simulation(
    runs: Sequence[tuple[str, UsageSeries]], path: Path, title: str, largest_gpus: int
) -> None:
    """Three panels over the arrivals (x: GPUs requested so far, % of the cluster's GPUs):
    GPUs allocated, fragmented (free but unusable by a `largest_gpus`-GPU pod) and idle, one
    line per (policy, series) of `runs`, all of one cluster. Writes a PNG of `SIMULATION_SIZE`."""
    figure, panels = _figure(SIMULATION_SIZE, 3)
    total = max((series.gpus_total for _, series in runs), default=0)
    article = "an" if str(largest_gpus).startswith("8") or largest_gpus in (11, 18) else "a"
    pod = f"{article} {largest_gpus}-GPU pod"
    quantities = (
        ("allocated", "GPUs allocated", "requested by the pods placed so far"),
        ("fragmented", "GPUs fragmented", f"free, on nodes that cannot take {pod} now"),
        ("idle", "GPUs idle", f"free, on nodes that could still take {pod}"),
    )
    colors = [f"C{i}" for i in range(10)]
    twins = identical_runs(runs)
    for axes, (field, label, meaning) in zip(panels, quantities, strict=True):
        for index, (policy, series) in enumerate(runs):
            twin = twins.get(index)
            axes.plot(
                series.demand_pct,
                getattr(series, field),
                label=policy if twin is None else f"{policy} (same as {twin})",
                color=colors[index % len(colors)],
                linewidth=2.4 if policy == EMPHASIZED else 1.3,
                linestyle="-" if twin is None else (0, (4, 3)),
                zorder=3 if policy == EMPHASIZED else 2,
            )
        axes.set_title(f"{label}: {meaning}", loc="left", fontsize="medium")
        axes.set_ylabel("GPUs")
        axes.set_ylim(bottom=0)
        axes.axvline(100.0, color="0.5", linestyle="--", linewidth=0.8)
        axes.grid(True, alpha=0.3)
        _percent_axis(axes, total, "% of all GPUs")
    panels[0].set_ylim(0, total * 1.02 if total else 1)
    handles, labels = panels[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5))
    panels[0].annotate(
        "requests = all GPUs",
        xy=(100.0, 0.05),
        xycoords=("data", "axes fraction"),
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        color="0.35",
        fontsize="small",
    )
    panels[-1].set_xlabel(
        "GPUs requested by the pods arrived so far, % of the cluster's GPUs "
        "(pods arrive one by one, none leave)"
    )
    panels[-1].set_xlim(left=0)
    figure.suptitle(title)
    _save(figure, path)


def time_unit(window_s: float) -> tuple[float, str]:
    """(seconds per unit, unit name) for a time axis spanning `window_s` seconds."""
    for longer_than, seconds, name in TIME_UNITS:
        if window_s > longer_than:
            return seconds, name
    return 1.0, "seconds"


def trailing_mean(values: FloatArray, times: FloatArray, span_s: float) -> FloatArray:
    """Per point of `values` (points,) at increasing `times` (points,): the mean of the points
    in `(t - span_s, t]`, itself included. Returns (points,)."""
    last = np.arange(1, times.size + 1)  # last: (points,), one past each point
    first = np.minimum(np.searchsorted(times, times - span_s, side="right"), last - 1)  # (points,)
    sums = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))  # sums: (points + 1,)
    means: FloatArray = (sums[last] - sums[first]) / (last - first)  # means: (points,)
    return means


def broken_at_gaps(values: FloatArray, times: FloatArray, step_s: float) -> FloatArray:
    """`values` (points,) with a NaN inserted wherever `times` (points,) skip more than one
    step, so the line breaks where a namespace had no measured GPU time: (points + gaps,)."""
    gaps = np.flatnonzero(np.diff(times) > 1.5 * step_s) + 1  # gaps: (gaps,)
    return np.insert(values.astype(np.float64), gaps, np.nan)


def plot_busy_share(history: BusyHistory, path: Path, title: str) -> list[NamespaceHistory]:
    """Two panels over the window (x: time before its end, in `time_unit`s): the busy share of
    measured GPU time in %, and the GPUs measured, one line per namespace, for the
    `MAX_NAMESPACES_DRAWN` namespaces with the most measured GPU time. Writes a PNG of
    `BUSY_SHARE_SIZE`; returns the histories drawn."""
    figure, (share, gpus) = _figure(BUSY_SHARE_SIZE, 2)
    unit_s, unit = time_unit(history.end - history.start)
    drawn = list(history.namespaces[:MAX_NAMESPACES_DRAWN])
    for namespace in drawn:
        times = np.asarray(namespace.timestamps, dtype=np.float64)  # times: (points,)
        when = broken_at_gaps((times - history.end) / unit_s, times, history.step_s)
        percent = broken_at_gaps(100.0 * np.asarray(namespace.busy_share), times, history.step_s)
        mean_gpus = trailing_mean(np.asarray(namespace.measured_gpus), times, history.gpus_mean_s)
        measured = broken_at_gaps(mean_gpus, times, history.step_s)
        (line,) = share.plot(when, percent, label=namespace.namespace, linewidth=1.6)
        gpus.plot(when, measured, color=line.get_color(), linewidth=1.3)
    share.set_title(
        f"busy share: busy GPU time over measured GPU time, rate over {history.range_s:g} s",
        loc="left",
        fontsize="medium",
    )
    share.set_ylabel("busy share (%)")
    share.set_ylim(0, 105)
    gpus.set_title(
        f"GPUs measured (held, with usage samples), mean over the last {history.gpus_mean_s:g} s",
        loc="left",
        fontsize="medium",
    )
    gpus.set_ylabel("GPUs")
    gpus.set_ylim(bottom=0)
    gpus.set_xlim((history.start - history.end) / unit_s, 0.0)
    end = datetime.fromtimestamp(history.end, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    gpus.set_xlabel(f"{unit} before {end}")
    for axes in (share, gpus):
        axes.grid(True, alpha=0.3)
    if drawn:
        longest = max(len(namespace.namespace) for namespace in drawn)
        columns = max(1, min(len(drawn), LEGEND_WIDTH_CHARS // (longest + 6)))
        handles, labels = share.get_legend_handles_labels()
        figure.legend(handles, labels, loc="outside lower center", ncols=columns)
    left_out = len(history.namespaces) - len(drawn)
    more = f" ({left_out} more namespaces with less GPU time not drawn)" if left_out else ""
    figure.suptitle(title + more)
    _save(figure, path)
    return drawn
