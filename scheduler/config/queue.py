"""The `backoff` and `queue` sections: per-pod retry backoff and the scheduling queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.errors import ConfigError
from scheduler.config.readers import boolean, fmt, positive_seconds
from scheduler.config.tree import check_settings, reads


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """Per-pod backoff after a failed attempt: doubles from the initial value up to the maximum."""

    initial_seconds: float = field(default=1.0, metadata=reads(positive_seconds))
    """Backoff after the first failed attempt (kube-scheduler's podInitialBackoffSeconds)."""
    max_seconds: float = field(default=10.0, metadata=reads(positive_seconds))
    """Backoff ceiling (kube-scheduler's podMaxBackoffSeconds); at least `initialSeconds`."""

    def __post_init__(self) -> None:
        check_settings(self)
        if self.max_seconds < self.initial_seconds:
            raise ConfigError(
                "maxSeconds",
                f"must be >= initialSeconds ({fmt(self.initial_seconds)}), "
                f"got {fmt(self.max_seconds)}",
                related=("initialSeconds",),
            )


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The scheduling queue."""

    unschedulable_flush_seconds: float = field(default=60.0, metadata=reads(positive_seconds))
    """Pods in the unschedulable pool longer than this are retried even without a cluster event
    that could help them (kube-scheduler's podMaxInUnschedulablePodsDuration, default 5 min)."""
    pop_from_backoff: bool = field(default=True, metadata=reads(boolean))
    """When activeQ is empty, try the pod in backoffQ whose backoff ends first instead of waiting
    (kube-scheduler's SchedulerPopFromBackoffQ, beta and on by default since 1.33); pods backing
    off after an error still wait their backoff out."""

    def __post_init__(self) -> None:
        check_settings(self)
