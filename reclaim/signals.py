"""What the idle verdict is computed from: per-GPU usage signals over one window.

The Prometheus adapter (`reclaim.prometheus`) builds these from one batched query; the offline
replay (`reclaim.replay`) builds them from CSV samples. `reclaim.usage.idle_verdict` reads them.
Pure data: no asyncio, no Kubernetes client.

Besides each signal's mean over the window, a window carries the signal's PEAK: the highest mean
over any sub-window of `subwindow_s` seconds inside the window (the most recent sub-window, ending
at the window's end, included). A pod busy for the last five minutes of an idle hour has a mean
near zero but a peak near its real load; the verdict reads both (see `reclaim.usage`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

SUBWINDOW_SCRAPES = 10
"""A sub-window spans this many scrape intervals: 5 min at dcgm-exporter's default 30 s scrape,
150 s at 15 s. Ten samples keep one noisy sample from deciding, and at 30 s a burst of work of a
few minutes still fills a good part of some sub-window."""
MIN_SUBWINDOW_S = 1.0
"""Sub-windows never shorter than this, however fast the scrape."""


def subwindow_length(window_s: float, scrape_interval_s: float) -> float:
    """Sub-window length for the peaks: `SUBWINDOW_SCRAPES` scrape intervals (at least
    `MIN_SUBWINDOW_S`), never longer than the window. ValueError for a non-positive or non-finite
    window or interval."""
    for name, value in (("window", window_s), ("scrape interval", scrape_interval_s)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive, got {value!r}")
    return min(window_s, max(MIN_SUBWINDOW_S, SUBWINDOW_SCRAPES * scrape_interval_s))


@dataclass(frozen=True)
class GpuWindow:
    """Usage of one GPU (or one MIG instance) held by a pod, over the last `window_s` seconds.

    A signal that is absent has 0 samples and None for its value. Means are over the samples
    the window holds; the energy increase is the counter's increase over the window (exact,
    however the gauge was sampled). Peaks are the highest sub-window means (None when unknown);
    a peak can only add caution, never make a GPU idle.
    """

    gpu: str
    """GPU index on the node, as dcgm-exporter's `gpu` label."""
    model: str
    """`modelName` label, e.g. "NVIDIA H200"; picks the idle and max power of the model."""
    window_s: float
    util_samples: int = 0
    util_mean_pct: float | None = None
    """Mean of DCGM_FI_DEV_GPU_UTIL (percent)."""
    power_samples: int = 0
    power_mean_w: float | None = None
    """Mean of DCGM_FI_DEV_POWER_USAGE (watts)."""
    energy_samples: int = 0
    energy_increase_mj: float | None = None
    """Increase of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION over the window (millijoules)."""
    energy_span_s: float | None = None
    """Seconds between the first and the last counter sample the increase was taken over. None
    when the increase already stands for the whole window (Prometheus `increase()` extrapolates
    to the window's bounds); then the samples' count alone says whether the window is covered."""
    engine_samples: int = 0
    engine_mean: float | None = None
    """Mean of DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio 0..1), of the GPU or of the MIG instance."""
    mig_instance: str | None = None
    """GPU_I_ID when the pod holds a MIG instance, not the whole GPU."""
    sharing_pods: int = 1
    """How many pods hold this GPU (time-slicing); 1 when the pod has it alone."""
    own_usage: bool = False
    """On a shared GPU (`sharing_pods` > 1): the utilization series is the pod's own
    (per-process attribution, dcgm-exporter's per-process DCGM_FI_DEV_GPU_UTIL), not a copy of
    the GPU's. Power, energy and GR_ENGINE_ACTIVE stay the whole GPU's. The series do not say
    which they are: the caller sets it from its settings (`with_own_usage`)."""
    util_peak_pct: float | None = None
    """Highest sub-window mean of DCGM_FI_DEV_GPU_UTIL (percent)."""
    power_peak_w: float | None = None
    """Highest sub-window mean of DCGM_FI_DEV_POWER_USAGE (watts)."""
    energy_peak_w: float | None = None
    """Highest sub-window mean power from the energy counter's rate (watts)."""
    engine_peak: float | None = None
    """Highest sub-window mean of DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio 0..1)."""
    subwindow_s: float | None = None
    """Length of the sub-windows the peaks are over; None when there are no peaks."""
    power_floor_w: float | None = None
    """Lowest DCGM_FI_DEV_POWER_USAGE sample of this GPU while the pod held it, over a lookback
    longer than the window (24 h live): calibrates the GPU's own idle draw."""
    history_s: float | None = None
    """Seconds from the pod's start to the window's end; None when the start is unknown. Shorter
    than `window_s` means samples early in the window may belong to a predecessor with the same
    namespace and name, so the pod cannot be idle for the window."""


def with_own_usage(windows: Sequence[GpuWindow], per_process: bool) -> list[GpuWindow]:
    """`windows` with `own_usage` set on the shared ones when the exporter attributes a shared
    GPU's utilization per process (`per_process`); unchanged otherwise."""
    if not per_process:
        return list(windows)
    return [replace(w, own_usage=True) if w.sharing_pods > 1 else w for w in windows]
