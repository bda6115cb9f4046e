"""GPU time accounting: allocated, busy, unmeasured and idle GPU time from the usage windows.

Pure: plain data in (`Holder`s, `reclaim.signals.GpuWindow`s per pod), increments out
(`PeriodIncrements`), added up by a `Ledger`. No asyncio, no Kubernetes client, no Prometheus
client: `reclaim.accounting_query` measures, the daemon's sampler calls `account_period` once per
period.

Definitions, for one sampling period of `period_s` seconds ending at `now`:

- A HOLDER is a pod bound to a node, not finished, requesting `gpus` > 0 whole GPUs
  (``nvidia.com/gpu``), whoever scheduled it. Its HELD seconds in the period are `period_s`, or
  `now - started_at` when it started inside the period (never below 0).
- ALLOCATED GPU seconds = `gpus` x held seconds.
- A GPU's measured UTILIZATION FRACTION over the period is the maximum of the usage estimates
  that `reclaim.usage.gpu_estimates` gives for the period's window, divided by 100: the same
  signals (utilization, energy-counter mean power, power samples, GR_ENGINE_ACTIVE), the same
  sample-coverage rule (`min_coverage`) and the same per-GPU power calibration as the idle
  verdict, but over window MEANS only: a sub-window peak measures a part of the window, not the
  window, so it is left out of a time integral. The maximum over signals keeps reclaim's caution
  (a signal reading higher wins) and makes the fraction an upper estimate when signals disagree.
  A GPU is MEASURED when at least one signal has enough samples; a MIG instance's window does not
  count towards whole GPUs. A time-sliced GPU (`sharing_pods` > 1) is split among the pods on
  it equally, each holding one replica: a pod's fraction there is the GPU's divided by the
  number of sharers, so the sharers' busy seconds add up to the GPU's. When the exporter
  attributes utilization per process (`GpuWindow.own_usage`), the pod's own utilization is its
  fraction instead (undivided: it is already its own share).
- BUSY GPU seconds = held seconds x the sum of the fractions of the pod's measured GPUs (its
  `gpus` highest, when more windows than GPUs answered, e.g. a predecessor's series).
- UNMEASURED GPU seconds = held seconds x the pod's GPUs without a measured window; when the
  query failed, all of the pod's allocated seconds. Unmeasured seconds are allocated, neither
  busy nor idle: busy / (allocated - unmeasured) is the measured share, and unmeasured /
  allocated says how much of the cluster that share covers.
- IDLE GPUs per namespace: the GPUs of holders that `reclaim.usage.idle_verdict` finds idle over
  the idle window (a separate, longer window: every GPU under the threshold for the whole window,
  the pod's own history covering it). A failed query makes no pod idle.

Invariants (tested): 0 <= busy + unmeasured <= allocated per pod and per group; every quantity is
finite and not negative; a failed query adds no busy seconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from reclaim.signals import GpuWindow, with_own_usage
from reclaim.usage import (
    PERCENT,
    SIGNAL_UTIL,
    PowerModel,
    Verdict,
    gpu_estimates,
    idle_verdict,
)

GroupKey = tuple[str, str]
"""(namespace, PriorityClass name; "" for a pod without one)."""
PodKey = tuple[str, str]
"""(namespace, pod name)."""


@dataclass(frozen=True)
class Holder:
    """A pod holding whole GPUs, as the scheduler's cache (or the API) sees it."""

    namespace: str
    name: str
    uid: str
    priority_class: str
    gpus: int
    """Whole GPUs requested (``nvidia.com/gpu``), > 0."""
    started_at: float | None
    """Epoch seconds it was scheduled (else created); None when unknown."""
    node: str = ""

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def group(self) -> GroupKey:
        return (self.namespace, self.priority_class)


@dataclass(frozen=True)
class Measure:
    """How windows are read: the reclaim settings that the idle verdict uses, plus the idle
    window and threshold of the idle gauge."""

    scrape_interval_s: float
    min_coverage: float
    power_models: Mapping[str, PowerModel]
    idle_window_s: float
    idle_threshold_pct: float
    per_process_shared_usage: bool = False
    """`reclaim.signals.with_own_usage`: shared GPUs' utilization series are the pods' own."""


@dataclass(frozen=True)
class PodPeriod:
    """One holder's GPU seconds in one period."""

    allocated_s: float
    busy_s: float
    unmeasured_s: float


def held_seconds(holder: Holder, period_s: float, now: float) -> float:
    """Seconds of the period (now - period_s, now] the holder held its GPUs: the whole period,
    or since `started_at` when that lies inside it; 0 for a start after `now`."""
    if holder.started_at is None or not math.isfinite(holder.started_at):
        return period_s
    return min(period_s, max(0.0, now - holder.started_at))


def gpu_fraction(window: GpuWindow, measure: Measure) -> float | None:
    """Measured utilization fraction (0..1) of one whole GPU over its window: the highest
    window-mean estimate / 100 (peaks left out), on a time-sliced GPU the pod's share of it
    (module docstring); None when no signal has enough samples or the window is a MIG
    instance's."""
    if window.mig_instance is not None:
        return None
    means_only = replace(
        window, util_peak_pct=None, power_peak_w=None, energy_peak_w=None, engine_peak=None
    )
    estimates = gpu_estimates(
        means_only,
        measure.power_models.get(window.model),
        measure.scrape_interval_s,
        measure.min_coverage,
    )
    sharers = max(1, window.sharing_pods)
    if window.own_usage and sharers > 1:  # the pod's own share, measured per process
        estimates = {k: v for k, v in estimates.items() if k == SIGNAL_UTIL}
        sharers = 1
    if not estimates:
        return None
    return min(1.0, max(0.0, max(estimates.values()) / PERCENT)) / sharers


def pod_period(
    holder: Holder,
    windows: Sequence[GpuWindow] | None,
    period_s: float,
    now: float,
    measure: Measure,
) -> PodPeriod:
    """The holder's allocated, busy and unmeasured GPU seconds for the period (module docstring).
    `windows` None means the query failed: everything allocated is unmeasured."""
    held = held_seconds(holder, period_s, now)
    allocated = holder.gpus * held
    if windows is None:
        return PodPeriod(allocated, 0.0, allocated)
    windows = with_own_usage(windows, measure.per_process_shared_usage)
    fractions = sorted(
        (f for w in windows if (f := gpu_fraction(w, measure)) is not None), reverse=True
    )[: holder.gpus]
    busy = held * math.fsum(fractions)
    unmeasured = held * (holder.gpus - len(fractions))
    return PodPeriod(allocated, busy, unmeasured)


def pod_idle_verdict(
    holder: Holder, windows: Sequence[GpuWindow] | None, measure: Measure
) -> Verdict | None:
    """The idle verdict over the idle window, as reclaim computes it (`held_gpus` included);
    None when the query failed."""
    if windows is None:
        return None
    return idle_verdict(
        with_own_usage(windows, measure.per_process_shared_usage),
        measure.idle_threshold_pct,
        measure.power_models,
        scrape_interval_s=measure.scrape_interval_s,
        min_coverage=measure.min_coverage,
        held_gpus=holder.gpus,
    )


@dataclass(frozen=True)
class PeriodIncrements:
    """What one period adds to the counters, and the idle gauge's new value."""

    allocated_s: Mapping[GroupKey, float]
    busy_s: Mapping[GroupKey, float]
    unmeasured_s: Mapping[GroupKey, float]
    idle_gpus: Mapping[str, int]
    """Namespace -> GPUs held by idle pods; every namespace holding GPUs has an entry (0)."""
    idle_pods: Mapping[PodKey, Verdict] = field(default_factory=dict)
    """The holders found idle over the idle window, with their verdicts."""


def account_period(
    holders: Iterable[Holder],
    period_windows: Mapping[PodKey, Sequence[GpuWindow]] | None,
    idle_windows: Mapping[PodKey, Sequence[GpuWindow]] | None,
    period_s: float,
    now: float,
    measure: Measure,
) -> PeriodIncrements:
    """Increments of one period for every holder. `period_windows` / `idle_windows` None: the
    query failed (no busy seconds, everything unmeasured, nobody idle); a holder missing from a
    mapping has no windows (unmeasured, not idle). ValueError for a period that is not a positive
    finite number."""
    if not (math.isfinite(period_s) and period_s > 0):
        raise ValueError(f"period must be positive, got {period_s!r}")
    allocated: dict[GroupKey, float] = defaultdict(float)
    busy: dict[GroupKey, float] = defaultdict(float)
    unmeasured: dict[GroupKey, float] = defaultdict(float)
    idle_gpus: dict[str, int] = {}
    idle_pods: dict[PodKey, Verdict] = {}
    for holder in holders:
        if holder.gpus <= 0:
            continue
        windows = None if period_windows is None else period_windows.get(holder.key, [])
        part = pod_period(holder, windows, period_s, now, measure)
        allocated[holder.group] += part.allocated_s
        busy[holder.group] += part.busy_s
        unmeasured[holder.group] += part.unmeasured_s
        idle_gpus.setdefault(holder.namespace, 0)
        held = None if idle_windows is None else idle_windows.get(holder.key, [])
        verdict = pod_idle_verdict(holder, held, measure)
        if verdict is not None and verdict.idle:
            idle_gpus[holder.namespace] += holder.gpus
            idle_pods[holder.key] = verdict
    return PeriodIncrements(dict(allocated), dict(busy), dict(unmeasured), idle_gpus, idle_pods)


@dataclass
class Ledger:
    """Running totals since the process started (counters) and the latest idle gauge."""

    allocated_s: dict[GroupKey, float] = field(default_factory=dict)
    busy_s: dict[GroupKey, float] = field(default_factory=dict)
    unmeasured_s: dict[GroupKey, float] = field(default_factory=dict)
    idle_gpus: dict[str, int] = field(default_factory=dict)
    periods: int = 0
    failed_periods: int = 0

    def add(self, increments: PeriodIncrements, failed: bool = False) -> None:
        """Add a period's increments to the counters and replace the idle gauge."""
        for totals, part in (
            (self.allocated_s, increments.allocated_s),
            (self.busy_s, increments.busy_s),
            (self.unmeasured_s, increments.unmeasured_s),
        ):
            for key, seconds in part.items():
                totals[key] = totals.get(key, 0.0) + seconds
        self.idle_gpus = dict(increments.idle_gpus)
        self.periods += 1
        self.failed_periods += int(failed)

    def measured_share(self, namespace: str) -> float | None:
        """Busy / (allocated - unmeasured) over every PriorityClass of `namespace`; None when
        nothing of it was measured."""
        busy = sum(v for (ns, _), v in self.busy_s.items() if ns == namespace)
        allocated = sum(v for (ns, _), v in self.allocated_s.items() if ns == namespace)
        unmeasured = sum(v for (ns, _), v in self.unmeasured_s.items() if ns == namespace)
        measured = allocated - unmeasured
        return busy / measured if measured > 0 else None
