"""The `reclaim`, `accounting` and `preemption` sections: the PostFilter's idle reclaim and
priority preemption, and the GPU time accounting that reads the same Prometheus."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.config.errors import Invalid
from scheduler.config.readers import boolean, finite, fraction, number, positive_seconds, show
from scheduler.config.tree import check_settings, reads

RECLAIM_MODES = ("off", "dry-run", "enforce")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _reclaim_mode(value: object) -> str:
    if isinstance(value, str) and value in RECLAIM_MODES:
        return value
    raise Invalid(f"must be one of {', '.join(RECLAIM_MODES)}, got {show(value)}")


def _optional_url(value: object) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str) and re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        return value.rstrip("/")
    raise Invalid(f"must be an http(s) URL or empty, got {show(value)}")


def _label_name(value: object) -> str:
    if isinstance(value, str) and _LABEL_NAME.fullmatch(value):
        return value
    raise Invalid(f"must be a Prometheus label name, got {show(value)}")


def _power_models(value: object) -> dict[str, dict[str, float]]:
    """`{modelName: {idleWatts: W, maxWatts: W}}` with 0 <= idle < max."""
    if not isinstance(value, Mapping):
        raise Invalid(f"must be a mapping of GPU model name to watts, got {show(value)}")
    models: dict[str, dict[str, float]] = {}
    for model, watts in value.items():
        if not isinstance(model, str) or not isinstance(watts, Mapping):
            raise Invalid(f"{show(model)}: must map to {{idleWatts, maxWatts}}")
        if set(watts) != {"idleWatts", "maxWatts"}:
            raise Invalid(f"{model}: needs exactly idleWatts and maxWatts, got {sorted(watts)}")
        idle = finite(watts["idleWatts"], "a number")
        full = finite(watts["maxWatts"], "a number")
        if not 0 <= idle < full:
            raise Invalid(f"{model}: needs 0 <= idleWatts < maxWatts, got {idle:g} and {full:g}")
        models[model] = {"idleWatts": idle, "maxWatts": full}
    return models


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """Reclaim of idle GPUs (the PostFilter); see docs/reclaim.md."""

    mode: str = field(default="off", metadata=reads(_reclaim_mode))
    """off: no reclaim; dry-run: decide, log, count and report "would evict" events, evict
    nothing; enforce: evict through the Eviction API."""
    cooldown_seconds: float = field(default=30.0, metadata=reads(positive_seconds))
    """Minimum time between two reclaim attempts for the same pending pod."""
    prometheus_url: str = field(default="", metadata=reads(_optional_url))
    """Base URL of the Prometheus that scrapes dcgm-exporter; empty: reclaim is skipped."""
    prometheus_timeout_seconds: float = field(default=5.0, metadata=reads(positive_seconds))
    """Time allowed for the usage query; slower means no eviction."""
    scrape_interval_seconds: float = field(default=30.0, metadata=reads(positive_seconds))
    """How often Prometheus scrapes dcgm-exporter; sets how many samples a window must hold."""
    min_coverage: float = field(default=0.8, metadata=reads(fraction))
    """Share of a window's expected samples a signal needs to count (fewer: not idle)."""
    namespace_label: str = field(default="namespace", metadata=reads(_label_name))
    """Label carrying the pod's namespace on DCGM series (e.g. exported_namespace)."""
    pod_label: str = field(default="pod", metadata=reads(_label_name))
    """Label carrying the pod's name on DCGM series (e.g. exported_pod)."""
    power_models: dict[str, dict[str, float]] = field(
        default_factory=dict, metadata=reads(_power_models)
    )
    """Idle and full-load power per dcgm `modelName`, added to or replacing the built-in ones."""
    reservation_seconds: float = field(default=300.0, metadata=reads(positive_seconds))
    """How long the room freed for a nominated pod stays reserved for it."""
    per_process_shared_usage: bool = field(default=False, metadata=reads(boolean))
    """The exporter attributes a time-sliced GPU's utilization to each pod by its processes
    (dcgm-exporter with --kubernetes-virtual-gpus and per-process metrics): a sharer's own
    utilization then decides its idle verdict and its busy time. false: a shared GPU's usage is
    every sharer's (a sharer is idle only if the GPU is; busy time split equally)."""


MAX_IDLE_WINDOW_SECONDS = 30 * 86400
"""accounting.idleWindowSeconds: at most 30 days, as a reclaim policy's idle window."""


def _idle_window(value: object) -> float:
    seconds = finite(value, "a number of seconds")
    if not 1.0 <= seconds <= MAX_IDLE_WINDOW_SECONDS:
        raise Invalid(
            f"must be from 1 to {MAX_IDLE_WINDOW_SECONDS} seconds (30 days), got {show(value)}"
        )
    return seconds


def _threshold_percent(value: object) -> float:
    number = finite(value, "a number")
    if not 0.0 < number <= 100.0:
        raise Invalid(f"must be a number greater than 0 and at most 100, got {show(value)}")
    return number


@dataclass(frozen=True, slots=True)
class AccountingConfig:
    """GPU time accounting: allocated, busy and idle GPU time (see reclaim.accounting). Reads the
    Prometheus of `reclaim.prometheusUrl` with the reclaim settings for scrape interval, coverage,
    labels and power models; without that URL nothing is measured."""

    enabled: bool = field(default=True, metadata=reads(boolean))
    """Sample GPU time and export it (read-only: every replica exports)."""
    period_seconds: float = field(default=60.0, metadata=reads(number(minimum=1.0)))
    """How often the one batched usage query is sent; each period adds to the counters."""
    idle_window_seconds: float = field(default=3600.0, metadata=reads(_idle_window))
    """A pod counts in gpu_scheduler_idle_gpus once idle over this whole window."""
    idle_usage_threshold_percent: float = field(default=5.0, metadata=reads(_threshold_percent))
    """Usage strictly below this, on every GPU of the pod, over the idle window, is idle."""


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """Priority preemption (kube-scheduler's DefaultPreemption), the PostFilter's second step
    after idle reclaim; see docs/reclaim.md."""

    enabled: bool = field(default=True, metadata=reads(boolean))
    """true (the default, as in kube-scheduler): a pod that fits nowhere, and for which idle
    reclaim made no room, may evict pods of strictly lower priority; false: it never does."""

    def __post_init__(self) -> None:
        check_settings(self)
