"""The `allocationTracking` section: on device-plugin nodes the kubelet and the device plugin
pick a pod's GPUs, not the scheduler; the tracker (`scheduler.core.allocation`) reads which GPUs
dcgm-exporter reports each pod holds and corrects the GPU indices the cache assumed. It reads the
Prometheus of `reclaim.prometheusUrl`; without that URL nothing is corrected."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.readers import boolean, number
from scheduler.config.tree import check_settings, reads


@dataclass(frozen=True, slots=True)
class AllocationTrackingConfig:
    """The correction of GPU indices from dcgm-exporter; see docs/scoring.md."""

    enabled: bool = field(default=True, metadata=reads(boolean))
    """Correct the cache's GPU indices from dcgm-exporter every `periodSeconds` (every replica,
    read-only)."""
    period_seconds: float = field(default=30.0, metadata=reads(number(minimum=1.0)))
    """How often the one query for the GPUs' holders is sent. Prometheus scrapes dcgm-exporter
    every 30 s by default (`reclaim.scrapeIntervalSeconds`); a shorter period finds no newer
    samples."""

    def __post_init__(self) -> None:
        check_settings(self)
