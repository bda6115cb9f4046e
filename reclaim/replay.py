"""`gpu-scheduler reclaim replay`: the idle verdict, offline, over a CSV of samples.

    gpu-scheduler reclaim replay --trace FILE --series-column NAME --threshold PCT
        [--window-seconds S] [--idle-power-w W --max-power-w W | --gpu-model NAME] [-o json]

The CSV has a time column `t_s` (seconds) and any of `gpu_util_pct`, `power_w`, `energy_mj`
(cumulative counter), `fb_used_mib`, `gr_engine_active` (ratio 0..1); empty cells are missing
samples. Rows are grouped by the series column (one GPU each), in order of first appearance.
Each series is judged by `reclaim.usage.idle_verdict`, exactly as the live verdict:

- the sample interval (for coverage) is the median step between the series' distinct times;
  peaks are over sub-windows of ten intervals (`reclaim.signals.SUBWINDOW_SCRAPES`), and the
  power floor that calibrates the GPU's idle draw is the series' lowest power up to the window's
  end;
- without --window-seconds the whole series is one window, from one interval before its first
  sample to its last; with it, the verdict is over the LAST window of each series, ending at its
  last sample (what the scheduler would decide at that moment);
- power estimates need a power model: --idle-power-w and --max-power-w, or --gpu-model picking a
  default model; without one only utilization and GR_ENGINE_ACTIVE are read, and utilization
  alone never makes a series idle: a series busy only for that reason reads "busy, needs
  --gpu-model" in the table (with a line under it naming the flags and the known models), and
  has `needs_power_model: true` in JSON.

Exit codes: 0 on success; 2 when the file cannot be read, a column is missing, a value is not a
number, there are no rows, or the flags are inconsistent (the message on stderr names the file or
column).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from reclaim.usage import (
    DEFAULT_MIN_COVERAGE,
    DEFAULT_POWER_MODELS,
    SIGNALS,
    FloatArray,
    PowerModel,
    Verdict,
    idle_verdict,
    window_from_samples,
)

TIME_COLUMN = "t_s"
UTIL_COLUMN = "gpu_util_pct"
POWER_COLUMN = "power_w"
ENERGY_COLUMN = "energy_mj"
FB_COLUMN = "fb_used_mib"
ENGINE_COLUMN = "gr_engine_active"
SIGNAL_COLUMNS = (UTIL_COLUMN, POWER_COLUMN, ENERGY_COLUMN, ENGINE_COLUMN)
"""Columns the verdict reads; `fb_used_mib` is accepted but memory held says nothing of work."""
REPLAY_MODEL = "from --idle-power-w/--max-power-w"
"""The GPU model name the replay gives its series when the power model comes from flags."""
UNSPECIFIED_MODEL = "unspecified"
"""The GPU model name of series replayed without any power model."""
EXIT_USAGE = 2
MODEL_FLAGS = "--gpu-model NAME or --idle-power-w/--max-power-w"
"""The flags that give the replay a power model, named wherever their absence decided a verdict."""


class ReplayError(Exception):
    """The trace cannot be replayed; the message names the file or column."""


@dataclass(frozen=True)
class Series:
    """One series' samples, sorted by time; NaN marks a missing sample."""

    name: str
    t_s: FloatArray
    columns: dict[str, FloatArray]


@dataclass(frozen=True)
class SeriesResult:
    series: str
    samples: int
    """Rows of the series inside the judged window."""
    window_s: float
    interval_s: float | None
    mean_util_pct: float | None
    verdict: Verdict
    subwindow_s: float | None = None
    """Length of the sub-windows the peaks were taken over."""
    power_floor_w: float | None = None
    """Lowest power sample up to the window's end: the GPU's idle-draw calibration."""
    needs_power_model: bool = False
    """Busy only because no power model was given: its usage is below the threshold, but
    utilization alone never proves idle (see `power_model_hint`)."""

    @property
    def label(self) -> str:
        """The verdict as the table shows it, naming the missing flag when that decided it."""
        if self.verdict.idle:
            return "idle"
        return "busy, needs --gpu-model" if self.needs_power_model else "busy"

    def as_json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "samples": self.samples,
            "window_s": self.window_s,
            "interval_s": self.interval_s,
            "subwindow_s": self.subwindow_s,
            "power_floor_w": self.power_floor_w,
            "mean_util_pct": self.mean_util_pct,
            "estimates_pct": dict(self.verdict.estimates),
            "usage_pct": self.verdict.usage_pct,
            "verdict": "idle" if self.verdict.idle else "busy",
            "reason": self.verdict.reason,
            "needs_power_model": self.needs_power_model,
        }


def _number(path: Path, line: int, column: str, text: str) -> float:
    if text.strip() == "":
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise ReplayError(f"{path}:{line}: column {column!r}: not a number: {text!r}") from None
    return value


def read_trace(path: Path, series_column: str) -> list[Series]:
    """The CSV's series in order of first appearance. Raises ReplayError when the file cannot be
    read, lacks `t_s`, the series column or every signal column, has a non-numeric value, or has
    no rows."""
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            for needed in (TIME_COLUMN, series_column):
                if needed not in header:
                    raise ReplayError(
                        f"{path}: no column {needed!r} (columns: {', '.join(header)})"
                    )
            present = [c for c in SIGNAL_COLUMNS if c in header]
            if not present:
                raise ReplayError(
                    f"{path}: none of the signal columns {', '.join(SIGNAL_COLUMNS)} is present"
                )
            rows: dict[str, list[list[float]]] = {}
            for line, row in enumerate(reader, start=2):
                t = _number(path, line, TIME_COLUMN, row.get(TIME_COLUMN) or "")
                if not math.isfinite(t):
                    raise ReplayError(f"{path}:{line}: column {TIME_COLUMN!r} is empty")
                values = [_number(path, line, c, row.get(c) or "") for c in present]
                rows.setdefault(row.get(series_column) or "", []).append([t, *values])
    except OSError as error:
        raise ReplayError(f"{path}: cannot read: {error.strerror or error}") from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise ReplayError(f"{path}: not a readable CSV: {error}") from None
    if not rows:
        raise ReplayError(f"{path}: no rows")
    result = []
    for name, samples in rows.items():
        table = np.asarray(samples, dtype=np.float64)  # (rows, 1 + signals)
        table = table[np.argsort(table[:, 0], kind="stable")]
        columns = {c: table[:, 1 + i] for i, c in enumerate(present)}
        result.append(Series(name, table[:, 0], columns))
    return result


def sample_interval(t_s: FloatArray) -> float | None:
    """Median step between distinct sample times, None with fewer than two."""
    steps = np.diff(np.unique(t_s))  # (distinct - 1,)
    return float(np.median(steps)) if steps.size else None


def replay_series(
    series: Series,
    threshold_pct: float,
    power_models: dict[str, PowerModel],
    model: str,
    window_seconds: float | None,
) -> SeriesResult:
    """The verdict over the series' last window (the whole series without `window_seconds`)."""
    interval = sample_interval(series.t_s)
    end = float(series.t_s[-1])
    if window_seconds is not None:
        window = window_seconds
    else:
        window = end - float(series.t_s[0]) + (interval or 1.0)
    inside = (series.t_s > end - window) & (series.t_s <= end)  # (n,)
    util = series.columns.get(UTIL_COLUMN)
    util_inside = util[inside][np.isfinite(util[inside])] if util is not None else None
    mean_util = (
        float(np.mean(util_inside)) if util_inside is not None and util_inside.size else None
    )
    gpu_window = window_from_samples(
        series.t_s,
        end_s=end,
        window_s=window,
        gpu=series.name,
        model=model,
        util_pct=util,
        power_w=series.columns.get(POWER_COLUMN),
        energy_mj=series.columns.get(ENERGY_COLUMN),
        engine_active=series.columns.get(ENGINE_COLUMN),
    )
    if interval is None:
        verdict = Verdict(False, None, {}, "not idle: insufficient samples (one sample time)")
    else:
        verdict = idle_verdict(
            [gpu_window],
            threshold_pct,
            power_models,
            scrape_interval_s=interval,
            min_coverage=DEFAULT_MIN_COVERAGE,
        )
    return SeriesResult(
        series.name,
        int(np.count_nonzero(inside)),
        window,
        interval,
        mean_util,
        verdict,
        gpu_window.subwindow_s,
        gpu_window.power_floor_w,
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_table(results: Sequence[SeriesResult]) -> str:
    """A fixed-width table: one row per series, every estimate, the usage taken, the verdict."""
    header = ["series", "samples", "util_mean%", *(f"{s}%" for s in SIGNALS), "usage%", "verdict"]
    rows = [
        [
            r.series,
            str(r.samples),
            _fmt(r.mean_util_pct),
            *(_fmt(r.verdict.estimates.get(s)) for s in SIGNALS),
            _fmt(r.verdict.usage_pct),
            r.label,
        ]
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    head = "  ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True))
    reasons = [f"{r.series}: {r.verdict.reason}" for r in results]
    hint = [power_model_hint()] if any(r.needs_power_model for r in results) else []
    return "\n".join([head.rstrip(), *(line.rstrip() for line in lines), "", *hint, *reasons])


def power_model_hint() -> str:
    """The line under the table when a missing power model decided some verdict."""
    known = ", ".join(repr(name) for name in sorted(DEFAULT_POWER_MODELS))
    return (
        "no power model given: utilization alone never makes a series idle (it aliases against "
        f"periodic work); give {MODEL_FLAGS} (--gpu-model knows {known})"
    )


def power_models_from_args(args: argparse.Namespace) -> tuple[dict[str, PowerModel], str]:
    """The power models and the model name to give every series. Raises ReplayError on
    inconsistent flags."""
    idle, peak, gpu_model = args.idle_power_w, args.max_power_w, args.gpu_model
    if (idle is None) != (peak is None):
        raise ReplayError("--idle-power-w and --max-power-w go together")
    if idle is not None:
        if gpu_model is not None:
            raise ReplayError("give either --gpu-model or --idle-power-w/--max-power-w")
        try:
            return {REPLAY_MODEL: PowerModel(idle_w=idle, max_w=peak)}, REPLAY_MODEL
        except ValueError as error:
            raise ReplayError(str(error)) from None
    if gpu_model is not None:
        if gpu_model not in DEFAULT_POWER_MODELS:
            known = ", ".join(sorted(DEFAULT_POWER_MODELS))
            raise ReplayError(f"--gpu-model {gpu_model!r} is unknown (known: {known})")
        return dict(DEFAULT_POWER_MODELS), gpu_model
    return {}, UNSPECIFIED_MODEL


def run_replay(args: argparse.Namespace) -> int:
    """The `reclaim replay` handler: prints the table (or JSON) and returns the exit code."""
    try:
        if not 0.0 <= args.threshold <= 100.0:
            raise ReplayError(f"--threshold must be within 0-100, got {args.threshold:g}")
        if args.window_seconds is not None and not args.window_seconds > 0:
            raise ReplayError(f"--window-seconds must be positive, got {args.window_seconds:g}")
        power_models, model = power_models_from_args(args)
        series = read_trace(Path(args.trace), args.series_column)
    except ReplayError as error:
        print(f"gpu-scheduler reclaim replay: {error}", file=sys.stderr)
        return EXIT_USAGE
    results = [
        replay_series(s, args.threshold, power_models, model, args.window_seconds) for s in series
    ]
    if not power_models:  # name the flag where its absence decided the verdict
        results = [
            replace(r, needs_power_model=True)
            if not r.verdict.idle
            and r.verdict.usage_pct is not None
            and r.verdict.usage_pct < args.threshold
            else r
            for r in results
        ]
    if args.output == "json":
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print(render_table(results))
    return 0


def add_reclaim_parser(commands: Any) -> None:
    """Add `reclaim replay` to the CLI's subparsers (`commands`, from `add_subparsers`)."""
    reclaim = commands.add_parser("reclaim", help="reclaim of idle GPUs: offline tools")
    verbs = reclaim.add_subparsers(dest="reclaim_command", metavar="VERB", required=True)
    replay = verbs.add_parser(
        "replay",
        help="run the idle verdict over a CSV of GPU samples",
        description="Run the idle verdict offline over a CSV of samples (t_s and any of "
        "gpu_util_pct, power_w, energy_mj, fb_used_mib, gr_engine_active), one verdict per series.",
    )
    replay.add_argument("--trace", required=True, help="CSV file of samples")
    replay.add_argument("--series-column", required=True, help="column that names each series")
    replay.add_argument("--threshold", required=True, type=float, help="idle threshold, percent")
    replay.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help="judge the last window of this length (default: the whole series)",
    )
    replay.add_argument("--idle-power-w", type=float, default=None, help="idle-holder power, W")
    replay.add_argument("--max-power-w", type=float, default=None, help="full-load power, W")
    replay.add_argument(
        "--gpu-model",
        default=None,
        help=f"use a default power model ({', '.join(sorted(DEFAULT_POWER_MODELS))})",
    )
    replay.add_argument("-o", "--output", choices=("table", "json"), default="table")
    replay.set_defaults(handler=run_replay)
