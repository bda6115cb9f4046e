"""Prometheus text exposition (format 0.0.4) of the fleet, labelled like dcgm-exporter.

Contract: :func:`render` is a pure function of the GPUs, their energy counters and ``now``.
Every physical GPU yields one series per holder in each family (time-sliced sharing gives one
series per pod, all with the GPU's value), or one series without pod labels when nobody holds it
and for a MIG host GPU. A GPU held by several pods on a node with per-process attribution
(``PhysicalGpu.per_process``, as dcgm-exporter's per-process metrics with
``--kubernetes-virtual-gpus``) gives DCGM_FI_DEV_GPU_UTIL as the GPU's series without pod labels
plus one series per pod with that pod's own utilization; the other families stay the GPU's.
Label names and order follow dcgm-exporter:

``gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID,] Hostname,
DCGM_FI_DRIVER_VERSION, [container, namespace, pod]``

Families: DCGM_FI_DEV_GPU_UTIL (gauge, %), DCGM_FI_DEV_POWER_USAGE (gauge, W),
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (counter, mJ, integer), DCGM_FI_DEV_FB_USED (gauge, MiB),
DCGM_FI_DEV_XID_ERRORS (gauge, the last Xid code, 0 for none) and DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
(counter, volatile double-bit ECC errors), both 0 unless a fault is injected
(`hack.fake_dcgm.faults`), and,
for GPUs with profiling on, DCGM_FI_PROF_GR_ENGINE_ACTIVE (gauge, 0..1). GR engine activity is the
mean utilization over the trailing ``engine_window_s`` seconds (DCGM averages profiling counters
over its sampling period instead of point-sampling them); MIG instances get their own
GR_ENGINE_ACTIVE series with GPU_I_PROFILE and GPU_I_ID, the other families stay per GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hack.fake_dcgm.holders import Holder, MigInstance
from hack.fake_dcgm.identity import gpu_uuid
from hack.fake_dcgm.model import GpuKey, PhysicalGpu, Reading, mean_util

DEFAULT_DRIVER_VERSION = "580.159.04"  # the H200 of tests/data/h200

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Family:
    """One metric family: name, type, help text."""

    name: str
    kind: str
    help: str


GPU_UTIL = Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
POWER_USAGE = Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).")
TOTAL_ENERGY = Family(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "counter",
    "Total energy consumption since boot (in mJ).",
)
FB_USED = Family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).")
XID_ERRORS = Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
ECC_DBE_VOLATILE = Family(
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."
)
GR_ENGINE_ACTIVE = Family(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."
)


@dataclass(frozen=True)
class RenderOptions:
    """Values the real exporter reads from the driver or its own configuration."""

    driver_version: str = DEFAULT_DRIVER_VERSION
    engine_window_s: float = 1.0  # trailing window averaged by GR_ENGINE_ACTIVE


def escape(value: str) -> str:
    """Escape a label value: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integral values without a fraction, others as the shortest round-tripping float."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


KNOWN_MODEL_NAMES = {
    "NVIDIA-H200": "NVIDIA H200",
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
}
"""GPU feature discovery writes the NVML name with spaces turned into '-'; the way back is
ambiguous, so known products map explicitly to the name dcgm-exporter reports."""


def model_name(product: str | None) -> str:
    """``nvidia.com/gpu.product`` as dcgm-exporter's ``modelName``: ``NVIDIA-H200`` ->
    ``NVIDIA H200``; unknown products get every '-' turned back into a space."""
    if not product:
        return ""
    return KNOWN_MODEL_NAMES.get(product, product.replace("-", " "))


def _gpu_labels(gpu: PhysicalGpu, mig: MigInstance | None, options: RenderOptions) -> Labels:
    labels = [
        ("gpu", str(gpu.index)),
        ("UUID", gpu_uuid(gpu.node, gpu.index)),
        ("pci_bus_id", f"00000000:{(0x18 + gpu.index) % 256:02X}:00.0"),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", model_name(gpu.product)),
    ]
    if mig is not None:
        labels += [("GPU_I_PROFILE", mig.profile), ("GPU_I_ID", str(mig.instance_id))]
    labels += [("Hostname", gpu.node), ("DCGM_FI_DRIVER_VERSION", options.driver_version)]
    return tuple(labels)


def _holder_labels(holder: Holder) -> Labels:
    return (("container", holder.container), ("namespace", holder.namespace), ("pod", holder.pod))


def _series(gpu: PhysicalGpu, options: RenderOptions) -> list[Labels]:
    base = _gpu_labels(gpu, None, options)
    if not gpu.holders:
        return [base]
    return [base + _holder_labels(h) for h in gpu.holders]


def _line(name: str, labels: Labels, value: float) -> str:
    inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {format_value(value)}"


def _family(family: Family, samples: Iterable[tuple[Labels, float]]) -> list[str]:
    lines = [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
    lines += [_line(family.name, labels, value) for labels, value in samples]
    return lines


def render(
    gpus: Sequence[PhysicalGpu],
    energy_mj: Callable[[GpuKey], float],
    now: float,
    options: RenderOptions,
) -> str:
    """The /metrics body for ``gpus`` at wall time ``now``; ends with a newline."""
    readings: list[tuple[PhysicalGpu, Reading, list[Labels]]] = [
        (gpu, gpu.reading(now), _series(gpu, options)) for gpu in gpus
    ]
    point: list[tuple[Family, Callable[[PhysicalGpu, Reading], float]]] = [
        (GPU_UTIL, lambda g, r: r.util_pct),
        (POWER_USAGE, lambda g, r: r.power_w),
        (TOTAL_ENERGY, lambda g, r: math.floor(energy_mj(g.key))),
        (FB_USED, lambda g, r: r.fb_used_mib),
        (XID_ERRORS, lambda g, r: g.faults.xid),
        (ECC_DBE_VOLATILE, lambda g, r: g.faults.ecc_dbe),
    ]
    lines: list[str] = []
    for family, value in point:
        samples = [(labels, value(g, r)) for g, r, series in readings for labels in series]
        if family is GPU_UTIL:
            samples = [s for g, r, series in readings for s in _util_samples(g, r, series, now)]
        lines += _family(family, samples)
    profiled = [g for g in gpus if g.profiling]
    if profiled:
        lines += _family(GR_ENGINE_ACTIVE, _engine_samples(profiled, now, options))
    return "\n".join(lines) + "\n"


def _util_samples(
    gpu: PhysicalGpu, reading: Reading, series: list[Labels], now: float
) -> list[tuple[Labels, float]]:
    """DCGM_FI_DEV_GPU_UTIL of one GPU: the GPU's value on each series, or per process."""
    if not (gpu.per_process and len(gpu.holders) > 1):
        return [(labels, reading.util_pct) for labels in series]
    pairs = zip(series, gpu.loads, strict=True)
    own = [(labels, load.sample(now).util_pct) for labels, load in pairs]
    device = series[0][: -len(_holder_labels(gpu.holders[0]))]  # the GPU's, no pod labels
    return [(device, reading.util_pct), *own]


def _engine_samples(
    gpus: Sequence[PhysicalGpu], now: float, options: RenderOptions
) -> list[tuple[Labels, float]]:
    start = now - options.engine_window_s
    samples: list[tuple[Labels, float]] = []
    for gpu in gpus:
        ratio = gpu.mean_util(start, now) / 100.0
        samples += [(labels, ratio) for labels in _series(gpu, options)]
        for slot in gpu.mig:
            labels = _gpu_labels(gpu, slot.instance, options)
            if slot.load is None or slot.instance.holder is None:
                samples.append((labels, 0.0))
                continue
            instance_ratio = mean_util(slot.load, start, now) / 100.0
            samples.append((labels + _holder_labels(slot.instance.holder), instance_ratio))
    return samples
