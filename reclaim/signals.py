"""What the idle verdict is computed from: per-GPU usage signals over one window.

The Prometheus adapter (`reclaim.prometheus`) builds these from one batched query; the offline
replay (`reclaim.replay`) builds them from CSV samples. `reclaim.usage.idle_verdict` reads them.
Pure data: no asyncio, no Kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuWindow:
    """Usage of one GPU (or one MIG instance) held by a pod, over the last `window_s` seconds.

    A signal that is absent has 0 samples and None for its value. Means are over the samples
    the window holds; the energy increase is the counter's increase over the window (exact,
    however the gauge was sampled).
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
