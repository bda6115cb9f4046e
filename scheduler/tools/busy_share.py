"""Busy share of measured GPU time per namespace over the accounting history, read from
Prometheus, for `gpu-scheduler idle-report --plot`.

The daemon exports three counters per (namespace, priority_class) (`metrics.gpu_time`):
`gpu_scheduler_gpu_allocated_seconds_total`, `..._busy_seconds_total` and
`..._unmeasured_seconds_total`. Two range queries over the last `window_s` seconds, one point per
`step_s`, give per namespace

    busy(t)     = sum over its classes of rate(busy[range])
    measured(t) = sum over its classes of rate(allocated[range]) - rate(unmeasured[range])
    share(t)    = busy(t) / measured(t)   (only where measured(t) > 0)

`measured(t)` is in GPUs: the GPUs whose usage was measured, on average over `[t - range, t]`.
The counters grow once per accounting period, so `range` spans at least two periods and four
scrapes (`step_and_range`); the share is that of the GPU time accounted in the range. Busy and
measured time grow at the same instants, so their ratio does not depend on how many of those
instants a range holds; `measured(t)` alone does (a range of two periods holds one or two of
them), which is why the figure draws it as a trailing mean over `gpus_mean_s`
(`scheduler.tools.plots.trailing_mean`).

Replicas: every replica accounts the whole cluster and exports the same totals, so per
(namespace, priority_class) the largest rate over the replicas is taken, never their sum
(docs/operations.md, "Replicas"). Labels: when Prometheus adds a `namespace` target label (the
shipped scrape config does) the daemon's own `namespace` label arrives as `exported_namespace`;
the queries keep both and the workload's namespace is `exported_namespace` where present.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reclaim.prometheus import PrometheusClient, RangeSeries

BUSY = "gpu_scheduler_gpu_busy_seconds_total"
ALLOCATED = "gpu_scheduler_gpu_allocated_seconds_total"
UNMEASURED = "gpu_scheduler_gpu_unmeasured_seconds_total"
NAMESPACE_LABELS = ("namespace", "exported_namespace")
DEFAULT_WINDOW_S = 86_400.0
"""How far back `idle-report --plot` looks by default: one day."""
GPUS_MEAN_PERIODS = 10
"""The GPUs measured are drawn as a mean over this many accounting periods (or the range)."""
POINTS = 240
"""Steps per window: enough for a line across a figure, cheap for Prometheus."""
MIN_STEP_S = 1.0


@dataclass(frozen=True)
class NamespaceHistory:
    """One namespace's points, in time order, where some of its GPU time was measured.

    `timestamps` are epoch seconds; `busy_share` is busy over measured time in 0..1;
    `measured_gpus` the GPUs measured on average over each point's range.
    """

    namespace: str
    timestamps: tuple[float, ...]
    busy_share: tuple[float, ...]
    measured_gpus: tuple[float, ...]

    def measured_gpu_seconds(self, step_s: float) -> float:
        """About the GPU-seconds measured over the window (each point standing for a step)."""
        return sum(self.measured_gpus) * step_s


@dataclass(frozen=True)
class BusyHistory:
    """The window read (`start`..`end`, epoch seconds, one point per `step_s`, rates over
    `range_s`), one history per namespace, most measured GPU time first, and the span over
    which the figure averages the GPUs measured (`gpus_mean_s`)."""

    start: float
    end: float
    step_s: float
    range_s: float
    namespaces: tuple[NamespaceHistory, ...]
    gpus_mean_s: float = 0.0


def step_and_range(window_s: float, period_s: float, scrape_s: float) -> tuple[float, float]:
    """(step, rate range) in whole seconds for a window: `POINTS` steps (at least `MIN_STEP_S`),
    a range of at least one step, two accounting periods (`period_s`) and four scrapes."""
    step = max(MIN_STEP_S, math.ceil(window_s / POINTS))
    return step, float(math.ceil(max(step, 2 * period_s, 4 * scrape_s)))


def _per_namespace(expression: str) -> str:
    """`expression` (a rate per series) as the largest over replicas per (namespace, class),
    summed per namespace."""
    labels = ", ".join(NAMESPACE_LABELS)
    return f"sum by ({labels}) (max by ({labels}, priority_class) ({expression}))"


def history_queries(range_s: float) -> tuple[str, str]:
    """(busy, measured) PromQL: GPUs busy and GPUs measured per namespace (module docstring)."""
    window = f"[{range_s:g}s]"
    busy = _per_namespace(f"rate({BUSY}{window})")
    measured = _per_namespace(f"rate({ALLOCATED}{window}) - rate({UNMEASURED}{window})")
    return busy, measured


def _by_namespace(series: Iterable[RangeSeries]) -> dict[str, dict[float, float]]:
    """Namespace -> timestamp -> value; where two series name one namespace (two scrape jobs),
    the larger value, as for replicas."""
    found: dict[str, dict[float, float]] = defaultdict(dict)
    for one in series:
        name = one.labels.get("exported_namespace") or one.labels.get("namespace") or ""
        points = found[name]
        for timestamp, value in one.points:
            if math.isfinite(value):
                points[timestamp] = max(value, points.get(timestamp, value))
    return found


def _settled(times: Iterable[float], step_s: float, settle_s: float) -> list[float]:
    """`times` (increasing) without those less than `settle_s` after the start of their run
    (a run: points no more than one and a half steps apart)."""
    kept: list[float] = []
    previous = run_start = -math.inf
    for when in times:
        if when - previous > 1.5 * step_s:
            run_start = when
        previous = when
        if when - run_start >= settle_s:
            kept.append(when)
    return kept


def combine(
    busy: Iterable[RangeSeries],
    measured: Iterable[RangeSeries],
    step_s: float,
    namespace: str | None = None,
    settle_s: float = 0.0,
) -> list[NamespaceHistory]:
    """The answers of the two `history_queries` as histories (only `namespace`'s when given),
    most measured GPU time first, then by name. A point is kept where measured > 0, and
    `settle_s` (the rate range) or more after the start of its run of points: the range of an
    earlier point reaches back to before the namespace's GPU time was counted, and its rate
    reads low (the window's first run loses its first range too). Pure."""
    busy_by = _by_namespace(busy)
    histories = []
    for name, measured_at in _by_namespace(measured).items():
        if namespace is not None and name != namespace:
            continue
        busy_at: Mapping[float, float] = busy_by.get(name, {})
        present = sorted(t for t, gpus in measured_at.items() if gpus > 0 and t in busy_at)
        times = _settled(present, step_s, settle_s)
        if not times:
            continue
        histories.append(
            NamespaceHistory(
                name,
                tuple(times),
                tuple(busy_at[t] / measured_at[t] for t in times),
                tuple(measured_at[t] for t in times),
            )
        )
    histories.sort(key=lambda h: (-h.measured_gpu_seconds(step_s), h.namespace))
    return histories


async def read_busy_history(
    prometheus: PrometheusClient,
    window_s: float,
    end: float,
    period_s: float,
    scrape_s: float,
    namespace: str | None = None,
) -> BusyHistory:
    """The busy share per namespace over `[end - window_s, end]` (two range queries). Raises
    what `PrometheusClient.query_range` raises."""
    step, range_s = step_and_range(window_s, period_s, scrape_s)
    start = end - window_s
    busy_query, measured_query = history_queries(range_s)
    busy = await prometheus.query_range(busy_query, start, end, step)
    measured = await prometheus.query_range(measured_query, start, end, step)
    histories = combine(busy, measured, step, namespace, settle_s=range_s)
    gpus_mean_s = max(range_s, GPUS_MEAN_PERIODS * period_s)
    return BusyHistory(start, end, step, range_s, tuple(histories), gpus_mean_s)
