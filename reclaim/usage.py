"""The idle verdict: is a pod measurably idle on every GPU it holds, over the whole window?

Pure: no asyncio, no Kubernetes client. Inputs are `reclaim.signals.GpuWindow` values (one per GPU
or MIG instance the pod holds); the output is a `Verdict` that carries the numbers events and logs
quote.

Calling a working pod idle kills someone's job, so every rule below errs towards "busy":

- Each signal gives a usage estimate in percent; a GPU's usage is the MAXIMUM of its available
  estimates (the most cautious reading wins):
  util    DCGM_FI_DEV_GPU_UTIL
  energy  duty from the mean power that DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's increase gives
  power   duty from DCGM_FI_DEV_POWER_USAGE samples
  engine  100 x DCGM_FI_PROF_GR_ENGINE_ACTIVE
- Usage must stay under the threshold for the WHOLE window, not on average: each signal's
  estimate is the larger of its mean over the window and its peak, the highest mean over any
  sub-window (`reclaim.signals.subwindow_length`: ten scrape intervals, the most recent
  sub-window included). A pod idle for 55 minutes and busy for the last 5 averages about 8 %, but
  its last sub-window reads its real load. A peak without enough samples for the mean can still
  prove busy, never idle.
- Power duty = 100 * (P - idle) / (max_w - idle), clipped to [0, 100]. `idle` is CALIBRATED per
  GPU, not the model's constant: real GPUs of one model idle tens of watts apart, and a constant
  above a GPU's real idle draw reads a busy job as idle. The calibration is the lowest power the
  GPU showed while the pod held it over a long lookback (`GpuWindow.power_floor_w`), minus
  `CALIBRATION_MARGIN_W`, when that floor lies within the model's plausible idle range
  (`PowerModel.idle_bounds_w`, the model's idle draw +- `IDLE_RANGE_W`); otherwise, and without a
  floor, the range's lower end (the most cautious value the model allows). A floor above the
  range means the GPU never idled in the lookback: no evidence of its idle draw. See
  `PowerModel.calibrated_idle_w`.
- The energy counter is the preferred source of mean power: its increase is an exact integral
  that no sampling can alias. The power samples are used as well when present, so that a stuck or
  reset counter cannot make a GPU look idle.
- A signal is available only with enough samples: at least `min_coverage * window_s /
  scrape_interval_s` (the energy counter: at least 2 samples, and either a span of at least
  `min_coverage * window_s` or, when the span is not known, that many samples). A NaN or infinite
  value is missing, never 0 %. Without any available signal the GPU is not idle ("insufficient
  samples").
- A pod that started less than the window before its end (`GpuWindow.history_s`) is not idle:
  samples early in the window carry its namespace and name but may be a predecessor's (series
  carry no pod UID), so its own samples cannot cover the window.
- Monotone: raising any signal's reading never turns a busy verdict into idle, and a signal that
  reads at or above the threshold keeps the GPU busy whatever the others say.
- Utilization alone never proves idle. It is a point-sampled gauge that aliases against periodic
  work: on the H200 recording a job running kernels 10 % of the time read 0 % in all 50 one-second
  samples, while its mean power (185 W against 118 W idle and 690 W full) gave a 12 % duty. So a
  GPU is idle only if at least one of energy, power or engine is available; util can only add
  caution (prove busy). A GPU model without a power model therefore relies on GR_ENGINE_ACTIVE.
- MIG instance: utilization and power belong to the whole physical GPU, so only the instance's
  GR_ENGINE_ACTIVE counts; without it the instance is never idle.
- Time-sliced GPU (`sharing_pods > 1`): by default the whole GPU's usage is attributed to each
  pod holding it, undivided: a pod is idle there only if the GPU is, i.e. only if all its
  sharers are. When the exporter attributes utilization per process (`GpuWindow.own_usage`),
  the pod's own utilization is its usage there and decides alone: power, energy and
  GR_ENGINE_ACTIVE are the whole GPU's, every sharer's together, and cannot tell an idle sharer
  from a busy one. This is the one case where utilization may prove idle: it needs enough
  samples and both its mean and its peak under the threshold; it is on only when the settings
  say the exporter gives per-process series.
- The pod is idle only if every GPU it holds is idle: usage strictly below the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reclaim.signals import GpuWindow, subwindow_length

SIGNAL_UTIL = "util"
SIGNAL_ENERGY = "energy"
SIGNAL_POWER = "power"
SIGNAL_ENGINE = "engine"
SIGNALS = (SIGNAL_UTIL, SIGNAL_ENERGY, SIGNAL_POWER, SIGNAL_ENGINE)
"""Every signal name, in the order estimates are reported."""
IDLE_CAPABLE_SIGNALS = frozenset({SIGNAL_ENERGY, SIGNAL_POWER, SIGNAL_ENGINE})
"""Signals that may call a GPU idle; utilization alone can only prove it busy."""

DEFAULT_MIN_COVERAGE = 0.8
"""Share of the window's expected samples a signal needs to count."""
MIN_ENERGY_SAMPLES = 2
"""An increase needs two counter readings."""
PERCENT = 100.0
MJ_PER_J = 1000.0

REASON_NO_GPUS = "no GPU samples for the pod"
REASON_INSUFFICIENT = "insufficient samples"


IDLE_RANGE_W = 40.0
"""Plausible idle draw of one GPU: its model's `idle_w` +- this. GPUs of one model differ by
board, firmware, clocks and temperature; the verdict is proven on +-30 W."""
CALIBRATION_MARGIN_W = 5.0
"""Subtracted from a GPU's measured power floor: the floor is a minimum of noisy samples, and a
lower idle draw errs towards busy. The H200 idle holder's samples spread over 0.4 W."""


@dataclass(frozen=True)
class PowerModel:
    """Power draw of one GPU model: `idle_w` with a process holding memory but running no kernels,
    `max_w` at full load, `idle_range_w` how far a single GPU's idle draw may plausibly lie from
    `idle_w`. Requires 0 <= idle_w < max_w and a finite idle_range_w >= 0."""

    idle_w: float
    max_w: float
    idle_range_w: float = IDLE_RANGE_W

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_w) and math.isfinite(self.max_w)):
            raise ValueError(f"power model must be finite, got {self.idle_w}, {self.max_w}")
        if not 0.0 <= self.idle_w < self.max_w:
            raise ValueError(f"power model needs 0 <= idle_w < max_w, got {self}")
        if not (math.isfinite(self.idle_range_w) and self.idle_range_w >= 0.0):
            raise ValueError(f"idle range must be finite and >= 0, got {self.idle_range_w}")

    @property
    def idle_bounds_w(self) -> tuple[float, float]:
        """(lowest, highest) plausible idle draw: idle_w -+ idle_range_w, within [0, max_w)."""
        low = max(0.0, self.idle_w - self.idle_range_w)
        high = min(self.idle_w + self.idle_range_w, self.max_w - CALIBRATION_MARGIN_W)
        return low, max(low, high)

    def calibrated_idle_w(self, floor_w: float | None) -> float:
        """The idle draw the duty of one GPU is measured from.

        `floor_w` is the lowest power the GPU showed while held (None: unknown). Within the
        plausible idle range it is the GPU's own idle draw: the floor minus
        `CALIBRATION_MARGIN_W`, not below the range. Unknown, not finite or outside the range:
        the range's lowest value, the most cautious (a lower idle draw reads more duty).
        """
        low, high = self.idle_bounds_w
        if floor_w is None or not math.isfinite(floor_w) or not low <= floor_w <= high:
            return low
        return max(low, floor_w - CALIBRATION_MARGIN_W)

    def duty_pct(self, mean_w: float, idle_w: float | None = None) -> float:
        """100 * (mean_w - idle) / (max_w - idle), clipped to [0, 100]; `idle` is `idle_w` (the
        calibrated draw of `calibrated_idle_w`) or the model's nominal draw. NaN for NaN."""
        idle = self.idle_w if idle_w is None else idle_w
        if math.isnan(mean_w):
            return math.nan
        duty = PERCENT * (mean_w - idle) / (self.max_w - idle)
        return min(PERCENT, max(0.0, duty))


DEFAULT_POWER_MODELS: Mapping[str, PowerModel] = {
    # Measured on the H200 recording (shared/data/h200-gpu-trace): idle holder 118 W, steady
    # bf16 training 690 W.
    "NVIDIA H200": PowerModel(idle_w=118.0, max_w=690.0),
    # H100 SXM5: 700 W maximum TDP (NVIDIA H100 datasheet). Idle-holder draw is an ESTIMATE: the
    # H200 (same GH100 die) drew 118 W; rounded down, because a low idle_w errs towards busy.
    "NVIDIA H100 80GB HBM3": PowerModel(idle_w=100.0, max_w=700.0),
    # A100 SXM4 80GB: 400 W maximum TDP (NVIDIA A100 datasheet). Idle-holder draw is an ESTIMATE
    # (about 60 W), rounded down for the same reason.
    "NVIDIA A100-SXM4-80GB": PowerModel(idle_w=60.0, max_w=400.0),
}
"""Power models keyed by dcgm-exporter's `modelName` label; callers may pass their own."""


@dataclass(frozen=True)
class GpuUsage:
    """The verdict on one GPU (or MIG instance) of the pod."""

    gpu: str
    mig_instance: str | None
    estimates: Mapping[str, float]
    """Usage estimates in percent, keyed by signal name: the available signals' (mean or peak,
    whichever is higher) and the peaks of signals without enough samples."""
    usage_pct: float | None
    """Maximum of the estimates, None when none is available."""
    idle: bool
    reason: str


@dataclass(frozen=True)
class Verdict:
    """Whether the pod is idle over the window, with the numbers behind it."""

    idle: bool
    usage_pct: float | None
    """Maximum over the pod's GPUs of each GPU's usage; None when no GPU had any estimate."""
    estimates: Mapping[str, float]
    """Per signal, the maximum of its estimates over the pod's GPUs (for events and logs)."""
    reason: str
    gpus: tuple[GpuUsage, ...] = ()

    def describe(self) -> str:
        """e.g. "usage 1.8 % (util 0.0 %, energy 1.7 %, power 1.8 %)"."""
        parts = ", ".join(f"{name} {self.estimates[name]:.1f} %" for name in self.estimates)
        usage = "unknown" if self.usage_pct is None else f"{self.usage_pct:.1f} %"
        return f"usage {usage} ({parts})" if parts else f"usage {usage}"


def required_samples(window_s: float, scrape_interval_s: float, min_coverage: float) -> float:
    """Samples a gauge needs in the window to count: min_coverage * window_s / scrape_interval_s."""
    return min_coverage * window_s / scrape_interval_s


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def gpu_estimates(
    window: GpuWindow,
    power_model: PowerModel | None,
    scrape_interval_s: float,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
) -> dict[str, float]:
    """Usage estimates (percent) of the signals that `window` holds with enough samples.

    Each is the larger of the signal's window mean and its sub-window peak (`peak_estimates`).
    On a MIG instance only the engine signal is considered. Power-based estimates need a power
    model and use the GPU's calibrated idle draw. Signals without enough samples, or with a
    non-finite mean, are left out (missing, never 0 %); so is everything when the window's length
    is not a positive number.
    """
    if not (math.isfinite(window.window_s) and window.window_s > 0):
        return {}  # no window, no coverage
    need = required_samples(window.window_s, scrape_interval_s, min_coverage)
    means: dict[str, float] = {}
    if window.mig_instance is None:
        if window.util_samples >= need and _finite(window.util_mean_pct):
            assert window.util_mean_pct is not None
            means[SIGNAL_UTIL] = _percent(window.util_mean_pct)
        if power_model is not None:
            idle_w = power_model.calibrated_idle_w(window.power_floor_w)
            energy_w = _energy_mean_w(window, need, min_coverage)
            if energy_w is not None:
                means[SIGNAL_ENERGY] = power_model.duty_pct(energy_w, idle_w)
            if window.power_samples >= need and _finite(window.power_mean_w):
                assert window.power_mean_w is not None
                means[SIGNAL_POWER] = power_model.duty_pct(window.power_mean_w, idle_w)
    if window.engine_samples >= need and _finite(window.engine_mean):
        assert window.engine_mean is not None
        means[SIGNAL_ENGINE] = _percent(PERCENT * window.engine_mean)
    peaks = peak_estimates(window, power_model)
    return {signal: max(value, peaks.get(signal, value)) for signal, value in means.items()}


def peak_estimates(window: GpuWindow, power_model: PowerModel | None) -> dict[str, float]:
    """Usage estimates (percent) of the signals' sub-window peaks that are finite.

    Whatever their sample count, peaks only add caution: `gpu_usage` lets a peak prove a GPU
    busy, never idle. Same MIG and power-model rules as `gpu_estimates`.
    """
    peaks: dict[str, float] = {}
    if window.mig_instance is None:
        if _finite(window.util_peak_pct):
            assert window.util_peak_pct is not None
            peaks[SIGNAL_UTIL] = _percent(window.util_peak_pct)
        if power_model is not None:
            idle_w = power_model.calibrated_idle_w(window.power_floor_w)
            for signal, watts in (
                (SIGNAL_ENERGY, window.energy_peak_w),
                (SIGNAL_POWER, window.power_peak_w),
            ):
                if _finite(watts):
                    assert watts is not None
                    peaks[signal] = power_model.duty_pct(watts, idle_w)
    if _finite(window.engine_peak):
        assert window.engine_peak is not None
        peaks[SIGNAL_ENGINE] = _percent(PERCENT * window.engine_peak)
    return peaks


def _percent(value: float) -> float:
    return min(PERCENT, max(0.0, value))


def _energy_mean_w(window: GpuWindow, need: float, min_coverage: float) -> float | None:
    """Mean power from the counter increase, or None when the counter does not cover the window."""
    increase = window.energy_increase_mj
    if increase is None or not math.isfinite(increase) or increase < 0:
        return None
    if window.energy_samples < MIN_ENERGY_SAMPLES:
        return None
    span = window.energy_span_s
    if span is None:
        if window.energy_samples < need:
            return None
        span = window.window_s
    elif not (math.isfinite(span) and span >= min_coverage * window.window_s):
        return None
    return increase / MJ_PER_J / span


def gpu_usage(
    window: GpuWindow,
    threshold_pct: float,
    power_model: PowerModel | None,
    scrape_interval_s: float,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
) -> GpuUsage:
    """The verdict on one GPU: idle only if the pod's own history covers the window, an
    idle-capable signal is available, and the maximum of all estimates and peaks is below
    `threshold_pct`."""
    own = window.own_usage and window.sharing_pods > 1 and window.mig_instance is None
    estimates = gpu_estimates(window, power_model, scrape_interval_s, min_coverage)
    readings = {**peak_estimates(window, power_model), **estimates}
    if own:  # only the pod's own utilization is its usage (module docstring)
        estimates = {k: v for k, v in estimates.items() if k == SIGNAL_UTIL}
        readings = {k: v for k, v in readings.items() if k == SIGNAL_UTIL}
    usage = max(readings.values()) if readings else None
    sharing = ""
    if window.sharing_pods > 1:
        whose = "; its own utilization" if own else ""
        sharing = f" (shared by {window.sharing_pods} pods{whose})"
    name = f"GPU {window.gpu}" + (f" MIG {window.mig_instance}" if window.mig_instance else "")
    if usage is not None and usage >= threshold_pct:
        reason = f"{name}{sharing}: usage {usage:.1f} % >= {threshold_pct:g} %"
        return GpuUsage(window.gpu, window.mig_instance, readings, usage, False, reason)
    history = window.history_s
    if history is not None and not (math.isfinite(history) and history >= window.window_s):
        reason = (
            f"{name}: the pod started {history:.0f} s before the window's end, less than the "
            f"{window.window_s:g} s window (earlier samples under its name may be a predecessor's)"
        )
        return GpuUsage(window.gpu, window.mig_instance, readings, usage, False, reason)
    if not estimates:
        if window.mig_instance is not None:
            reason = f"{name}: no GR_ENGINE_ACTIVE for the MIG instance ({REASON_INSUFFICIENT})"
        else:
            reason = f"{name}: {REASON_INSUFFICIENT}"
        return GpuUsage(window.gpu, window.mig_instance, readings, usage, False, reason)
    assert usage is not None
    if not own and not IDLE_CAPABLE_SIGNALS.intersection(estimates):
        missing = (
            "" if power_model is not None else f" (no power model for GPU model {window.model!r})"
        )
        reason = (
            f"{name}: utilization alone cannot prove idle{missing}: "
            "it aliases against periodic work; power, energy or GR_ENGINE_ACTIVE is needed"
        )
        return GpuUsage(window.gpu, window.mig_instance, readings, usage, False, reason)
    reason = f"{name}{sharing}: usage {usage:.1f} % < {threshold_pct:g} %"
    return GpuUsage(window.gpu, window.mig_instance, readings, usage, True, reason)


def idle_verdict(
    windows: Sequence[GpuWindow],
    threshold_pct: float,
    power_models: Mapping[str, PowerModel],
    *,
    scrape_interval_s: float,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    held_gpus: int | None = None,
) -> Verdict:
    """Whether the pod holding `windows` (one per GPU or MIG instance) is idle over the window.

    Idle only if there is at least one window and every one is idle (see the module docstring).
    `held_gpus`, the whole GPUs the pod holds, when given: fewer whole-GPU windows than that
    leave a GPU unmeasured, and the pod is not idle. `power_models` is keyed by
    `GpuWindow.model`. Raises ValueError for a threshold outside [0, 100], a non-positive scrape
    interval or a coverage outside (0, 1].
    """
    if not 0.0 <= threshold_pct <= PERCENT:
        raise ValueError(f"threshold must be within [0, 100], got {threshold_pct}")
    if not (math.isfinite(scrape_interval_s) and scrape_interval_s > 0):
        raise ValueError(f"scrape interval must be positive, got {scrape_interval_s}")
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"coverage must be within (0, 1], got {min_coverage}")
    if not windows:
        return Verdict(False, None, {}, REASON_NO_GPUS)
    gpus = tuple(
        gpu_usage(w, threshold_pct, power_models.get(w.model), scrape_interval_s, min_coverage)
        for w in windows
    )
    estimates: dict[str, float] = {}
    for signal in SIGNALS:
        values = [g.estimates[signal] for g in gpus if signal in g.estimates]
        if values:
            estimates[signal] = max(values)
    known = [g.usage_pct for g in gpus if g.usage_pct is not None]
    usage = max(known) if known else None
    busy = [g for g in gpus if not g.idle]
    measured = sum(1 for w in windows if w.mig_instance is None)
    if held_gpus is not None and measured < held_gpus:
        reason = f"not idle: samples for {measured} of the pod's {held_gpus} GPUs"
        return Verdict(False, usage, estimates, reason, gpus)
    if busy:
        reason = "not idle: " + "; ".join(g.reason for g in busy)
        return Verdict(False, usage, estimates, reason, gpus)
    assert usage is not None
    reason = f"idle: usage {usage:.1f} % < {threshold_pct:g} % on all {len(gpus)} GPU(s)"
    return Verdict(True, usage, estimates, reason, gpus)


FloatArray = npt.NDArray[np.float64]


def counter_increase(values: FloatArray) -> float:
    """Increase of a cumulative counter over consecutive readings, counting a drop as a reset
    to zero (as Prometheus `increase()` does): the reading after a drop is added whole."""
    # values: (n,)
    cumulative = counter_cumulative(values)  # (n,)
    return float(cumulative[-1] - cumulative[0]) if cumulative.size else 0.0


def counter_cumulative(values: FloatArray) -> FloatArray:
    """Reset-corrected increase of a counter since its first reading, at every reading: a step
    down is a reset to zero, so the reading after it is added whole; an equal reading adds 0."""
    # values: (n,)
    if values.size < 2:
        return np.zeros(values.shape, dtype=np.float64)
    steps = np.diff(values)  # (n - 1,)
    gains = np.where(steps < 0, values[1:], steps)  # (n - 1,)
    return np.concatenate(([0.0], np.cumsum(gains)))  # (n,)


IndexArray = npt.NDArray[np.intp]


def _ending_subwindows(times: FloatArray, start_s: float, subwindow_s: float) -> IndexArray:
    """Index of the first sample of the sub-window (t - subwindow_s, t] ending at each sample t.
    Only sub-windows that lie wholly inside the window (t - subwindow_s >= start_s) count; when
    none does, the one ending at the last sample stands for them. Returns -1 for the others."""
    # times: (k,) sorted
    first = np.searchsorted(times, times - subwindow_s, side="right")  # (k,)
    whole = times - subwindow_s >= start_s  # (k,)
    if times.size and not whole.any():
        whole[-1] = True
    return np.where(whole, first, -1)  # (k,)


def _gauge_peak(
    times: FloatArray, values: FloatArray, start_s: float, sub_s: float
) -> float | None:
    """Highest mean over the sub-windows ending at each sample (see `_ending_subwindows`)."""
    # times, values: (k,) finite samples inside the window, sorted by time
    if values.size == 0:
        return None
    first = _ending_subwindows(times, start_s, sub_s)  # (k,)
    ends = np.flatnonzero(first >= 0)  # (m,)
    totals = np.concatenate(([0.0], np.cumsum(values)))  # (k + 1,)
    sums = totals[ends + 1] - totals[first[ends]]  # (m,)
    return float(np.max(sums / (ends + 1 - first[ends])))


def _energy_peak_w(times: FloatArray, mj: FloatArray, start_s: float, sub_s: float) -> float | None:
    """Highest mean power (W) of the counter over the sub-windows ending at each reading, from
    the first to the last reading of each; None when no sub-window holds two readings."""
    # times, mj: (k,) finite readings inside the window, sorted by time
    first = _ending_subwindows(times, start_s, sub_s)  # (k,)
    ends = np.flatnonzero(first >= 0)  # (m,)
    starts = first[ends]  # (m,)
    spans = times[ends] - times[starts]  # (m,)
    usable = spans > 0  # (m,)
    if not usable.any():
        return None
    cumulative = counter_cumulative(mj)  # (k,)
    gains = cumulative[ends[usable]] - cumulative[starts[usable]]  # (u,)
    return float(np.max(gains / spans[usable])) / MJ_PER_J


def _median_step(times: FloatArray) -> float | None:
    steps = np.diff(np.unique(times))  # (distinct - 1,)
    return float(np.median(steps)) if steps.size else None


def window_from_samples(
    t_s: FloatArray,
    *,
    end_s: float,
    window_s: float,
    gpu: str = "0",
    model: str = "",
    util_pct: FloatArray | None = None,
    power_w: FloatArray | None = None,
    energy_mj: FloatArray | None = None,
    engine_active: FloatArray | None = None,
    mig_instance: str | None = None,
    sharing_pods: int = 1,
    subwindow_s: float | None = None,
    floor_lookback_s: float | None = None,
    started_s: float | None = None,
) -> GpuWindow:
    """A `GpuWindow` over (end_s - window_s, end_s] from raw sample arrays aligned with `t_s`,
    with the figures the live Prometheus query gives.

    Each signal array has the shape of `t_s`; NaN (or an infinity) marks a missing sample of that
    signal. Gauges become a count, a mean and a peak of their finite samples in the window; the
    cumulative energy counter becomes its increase between its first and last finite samples in
    the window (resets counted as in `counter_increase`), that span, and its peak mean power.
    Peaks are over sub-windows of `subwindow_s` seconds (default: `SUBWINDOW_SCRAPES` times the
    median sample step, at most the window) lying inside the window, one ending at each sample: a
    superset of the live query's, which steps by half a sub-window, so a peak here is never lower.
    The power floor is the lowest finite power sample in (end_s - floor_lookback_s, end_s]
    (default: every sample up to end_s). With `started_s` (the pod's start), samples up to it
    are left out of everything and `history_s` is end_s - started_s. Raises ValueError when
    shapes differ or window_s is not positive.
    """
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"window must be positive, got {window_s}")
    times = np.asarray(t_s, dtype=np.float64)  # (n,)
    start_s = end_s - window_s
    owned = times <= end_s  # (n,)
    if started_s is not None:
        owned &= times > started_s
    inside = owned & (times > start_s)  # (n,)
    if subwindow_s is None:
        step = _median_step(times[inside])
        sub_s = None if step is None else subwindow_length(window_s, step)
    elif math.isfinite(subwindow_s) and subwindow_s > 0:
        sub_s = min(window_s, subwindow_s)
    else:
        raise ValueError(f"sub-window must be positive, got {subwindow_s}")

    def array(values: FloatArray | None) -> FloatArray | None:
        if values is None:
            return None
        result = np.asarray(values, dtype=np.float64)  # (n,)
        if result.shape != times.shape:
            raise ValueError(f"signal shape {result.shape} differs from t_s {times.shape}")
        return result

    def select(values: FloatArray | None) -> tuple[FloatArray, FloatArray]:
        """(times, values) of the finite samples in the window, sorted by time."""
        if values is None:
            return np.empty(0), np.empty(0)
        mask = inside & np.isfinite(values)  # (n,)
        order = np.argsort(times[mask], kind="stable")  # (k,)
        return times[mask][order], values[mask][order]

    def gauge(values: FloatArray | None) -> tuple[int, float | None, float | None]:
        kept_t, kept = select(values)
        if kept.size == 0:
            return 0, None, None
        peak = None if sub_s is None else _gauge_peak(kept_t, kept, start_s, sub_s)
        return int(kept.size), float(np.mean(kept)), peak

    util = array(util_pct)
    power = array(power_w)
    util_n, util_mean, util_peak = gauge(util)
    power_n, power_mean, power_peak = gauge(power)
    engine_n, engine_mean, engine_peak = gauge(array(engine_active))
    floor = None
    if power is not None:
        lookback = owned & np.isfinite(power)  # (n,)
        if floor_lookback_s is not None:
            lookback &= times > end_s - floor_lookback_s
        floor = float(np.min(power[lookback])) if lookback.any() else None
    increase, span, energy_peak = None, None, None
    energy_t, energy = select(array(energy_mj))
    energy_n = int(energy.size)
    if energy_n >= MIN_ENERGY_SAMPLES:
        increase = counter_increase(energy)
        span = float(energy_t[-1] - energy_t[0])
        if sub_s is not None:
            energy_peak = _energy_peak_w(energy_t, energy, start_s, sub_s)
    return GpuWindow(
        gpu=gpu,
        model=model,
        window_s=window_s,
        util_samples=util_n,
        util_mean_pct=util_mean,
        power_samples=power_n,
        power_mean_w=power_mean,
        energy_samples=energy_n,
        energy_increase_mj=increase,
        energy_span_s=span,
        engine_samples=engine_n,
        engine_mean=engine_mean,
        mig_instance=mig_instance,
        sharing_pods=sharing_pods,
        util_peak_pct=util_peak,
        power_peak_w=power_peak,
        energy_peak_w=energy_peak,
        engine_peak=engine_peak,
        subwindow_s=sub_s,
        power_floor_w=floor,
        history_s=None if started_s is None else end_s - started_s,
    )
