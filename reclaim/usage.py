"""The idle verdict: is a pod measurably idle on every GPU it holds, over the whole window?

Pure: no asyncio, no Kubernetes client. Inputs are `reclaim.signals.GpuWindow` values (one per GPU
or MIG instance the pod holds); the output is a `Verdict` that carries the numbers events and logs
quote.

Calling a working pod idle kills someone's job, so every rule below errs towards "busy":

- Each signal gives a usage estimate in percent; a GPU's usage is the MAXIMUM of its available
  estimates (the most cautious reading wins):
  util    mean of DCGM_FI_DEV_GPU_UTIL
  energy  duty from the mean power that the DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION increase gives
  power   duty from the mean of DCGM_FI_DEV_POWER_USAGE samples
  engine  100 x mean of DCGM_FI_PROF_GR_ENGINE_ACTIVE
  Power duty = 100 * (mean_w - idle_w) / (max_w - idle_w), clipped to [0, 100], with `idle_w`
  and `max_w` from the GPU model's `PowerModel`. The energy counter is the preferred source of
  mean power: its increase is an exact integral that no sampling can alias. The power samples'
  mean is used as well when present, so that a stuck or reset counter cannot make a GPU look idle.
- A signal is available only with enough samples: at least `min_coverage * window_s /
  scrape_interval_s` (the energy counter: at least 2 samples, and either a span of at least
  `min_coverage * window_s` or, when the span is not known, that many samples). Without any
  available signal the GPU is not idle ("insufficient samples").
- Monotone: raising any signal's reading never turns a busy verdict into idle, and a signal that
  reads at or above the threshold keeps the GPU busy whatever the others say.
- Utilization alone never proves idle. It is a point-sampled gauge that aliases against periodic
  work: on the H200 recording a job running kernels 10 % of the time read 0 % in all 50 one-second
  samples, while its mean power (185 W against 118 W idle and 690 W full) gave a 12 % duty. So a
  GPU is idle only if at least one of energy, power or engine is available; util can only add
  caution (prove busy). A GPU model without a power model therefore relies on GR_ENGINE_ACTIVE.
- MIG instance: utilization and power belong to the whole physical GPU, so only the instance's
  GR_ENGINE_ACTIVE counts; without it the instance is never idle.
- Time-sliced GPU (`sharing_pods > 1`): the whole GPU's usage is attributed to each pod holding
  it, undivided: a pod is idle there only if the GPU is.
- The pod is idle only if every GPU it holds is idle: usage strictly below the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reclaim.signals import GpuWindow

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


@dataclass(frozen=True)
class PowerModel:
    """Power draw of one GPU model: `idle_w` with a process holding memory but running no kernels,
    `max_w` at full load. Requires 0 <= idle_w < max_w."""

    idle_w: float
    max_w: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_w) and math.isfinite(self.max_w)):
            raise ValueError(f"power model must be finite, got {self.idle_w}, {self.max_w}")
        if not 0.0 <= self.idle_w < self.max_w:
            raise ValueError(f"power model needs 0 <= idle_w < max_w, got {self}")

    def duty_pct(self, mean_w: float) -> float:
        """100 * (mean_w - idle_w) / (max_w - idle_w), clipped to [0, 100]."""
        duty = PERCENT * (mean_w - self.idle_w) / (self.max_w - self.idle_w)
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
    """Available signals' usage estimates in percent, keyed by signal name."""
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

    On a MIG instance only the engine signal is considered. Power-based estimates need a power
    model. Signals without enough samples, or with a non-finite value, are left out.
    """
    need = required_samples(window.window_s, scrape_interval_s, min_coverage)
    estimates: dict[str, float] = {}
    if window.mig_instance is None:
        if window.util_samples >= need and _finite(window.util_mean_pct):
            assert window.util_mean_pct is not None
            estimates[SIGNAL_UTIL] = min(PERCENT, max(0.0, window.util_mean_pct))
        if power_model is not None:
            energy_w = _energy_mean_w(window, need, min_coverage)
            if energy_w is not None:
                estimates[SIGNAL_ENERGY] = power_model.duty_pct(energy_w)
            if window.power_samples >= need and _finite(window.power_mean_w):
                assert window.power_mean_w is not None
                estimates[SIGNAL_POWER] = power_model.duty_pct(window.power_mean_w)
    if window.engine_samples >= need and _finite(window.engine_mean):
        assert window.engine_mean is not None
        estimates[SIGNAL_ENGINE] = min(PERCENT, max(0.0, PERCENT * window.engine_mean))
    return estimates


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
    elif not (math.isfinite(span) and span >= min_coverage * window.window_s and span > 0):
        return None
    return increase / MJ_PER_J / span


def gpu_usage(
    window: GpuWindow,
    threshold_pct: float,
    power_model: PowerModel | None,
    scrape_interval_s: float,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
) -> GpuUsage:
    """The verdict on one GPU: idle only if an idle-capable signal is available and the maximum of
    all available estimates is below `threshold_pct`."""
    estimates = gpu_estimates(window, power_model, scrape_interval_s, min_coverage)
    usage = max(estimates.values()) if estimates else None
    sharing = f" (shared by {window.sharing_pods} pods)" if window.sharing_pods > 1 else ""
    name = f"GPU {window.gpu}" + (f" MIG {window.mig_instance}" if window.mig_instance else "")
    if usage is None:
        if window.mig_instance is not None:
            reason = f"{name}: no GR_ENGINE_ACTIVE for the MIG instance ({REASON_INSUFFICIENT})"
        else:
            reason = f"{name}: {REASON_INSUFFICIENT}"
        return GpuUsage(window.gpu, window.mig_instance, estimates, None, False, reason)
    if usage >= threshold_pct:
        reason = f"{name}{sharing}: usage {usage:.1f} % >= {threshold_pct:g} %"
        return GpuUsage(window.gpu, window.mig_instance, estimates, usage, False, reason)
    if not IDLE_CAPABLE_SIGNALS.intersection(estimates):
        missing = (
            "" if power_model is not None else f" (no power model for GPU model {window.model!r})"
        )
        reason = (
            f"{name}: utilization alone cannot prove idle{missing}: "
            "it aliases against periodic work; power, energy or GR_ENGINE_ACTIVE is needed"
        )
        return GpuUsage(window.gpu, window.mig_instance, estimates, usage, False, reason)
    reason = f"{name}{sharing}: usage {usage:.1f} % < {threshold_pct:g} %"
    return GpuUsage(window.gpu, window.mig_instance, estimates, usage, True, reason)


def idle_verdict(
    windows: Sequence[GpuWindow],
    threshold_pct: float,
    power_models: Mapping[str, PowerModel],
    *,
    scrape_interval_s: float,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
) -> Verdict:
    """Whether the pod holding `windows` (one per GPU or MIG instance) is idle over the window.

    Idle only if there is at least one window and every one is idle (see the module docstring).
    `power_models` is keyed by `GpuWindow.model`. Raises ValueError for a threshold outside
    [0, 100], a non-positive scrape interval or a coverage outside (0, 1].
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
    if values.size < 2:
        return 0.0
    steps = np.diff(values)  # (n - 1,)
    resets = steps < 0
    return float(np.sum(np.where(resets, values[1:], steps)))


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
) -> GpuWindow:
    """A `GpuWindow` over (end_s - window_s, end_s] from raw sample arrays aligned with `t_s`.

    Each signal array has the shape of `t_s`; NaN marks a missing sample of that signal. Gauges
    become a count and a mean of their finite samples in the window; the cumulative energy
    counter becomes its increase between its first and last finite samples in the window (resets
    counted as in `counter_increase`) and that span. Raises ValueError when shapes differ or
    window_s is not positive.
    """
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"window must be positive, got {window_s}")
    times = np.asarray(t_s, dtype=np.float64)  # (n,)
    inside = (times > end_s - window_s) & (times <= end_s)  # (n,)

    def select(values: FloatArray | None) -> FloatArray:
        if values is None:
            return np.empty(0, dtype=np.float64)
        array = np.asarray(values, dtype=np.float64)  # (n,)
        if array.shape != times.shape:
            raise ValueError(f"signal shape {array.shape} differs from t_s {times.shape}")
        kept = array[inside]  # (k,)
        return kept[np.isfinite(kept)]

    def gauge(values: FloatArray | None) -> tuple[int, float | None]:
        kept = select(values)
        return int(kept.size), (float(np.mean(kept)) if kept.size else None)

    util_n, util_mean = gauge(util_pct)
    power_n, power_mean = gauge(power_w)
    engine_n, engine_mean = gauge(engine_active)
    energy_n, increase, span = 0, None, None
    if energy_mj is not None:
        energy = np.asarray(energy_mj, dtype=np.float64)  # (n,)
        if energy.shape != times.shape:
            raise ValueError(f"signal shape {energy.shape} differs from t_s {times.shape}")
        mask = inside & np.isfinite(energy)  # (n,)
        energy_n = int(np.count_nonzero(mask))
        if energy_n >= MIN_ENERGY_SAMPLES:
            order = np.argsort(times[mask], kind="stable")
            increase = counter_increase(energy[mask][order])
            span = float(times[mask][order][-1] - times[mask][order][0])
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
    )
