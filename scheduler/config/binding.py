"""The `binding` section: the asynchronous binding cycle."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.readers import integer, number, positive_seconds
from scheduler.config.tree import check_settings, reads


@dataclass(frozen=True, slots=True)
class BindingConfig:
    """The asynchronous binding cycle (POST pods/{name}/binding)."""

    concurrency: int = field(default=1000, metadata=reads(integer(1)))
    """Bindings in flight at once; further placed pods wait for a slot. A safety cap: `qps`
    is what bounds the binds (kube-scheduler binds each pod in its own goroutine)."""
    timeout_seconds: float = field(default=5.0, metadata=reads(positive_seconds))
    """Time allowed for one binding call; past it the pod is forgotten and requeued. With leader
    election on, at most `renewDeadlineSeconds - retryPeriodSeconds` (see `SchedulerConfig`)."""
    qps: float = field(default=100.0, metadata=reads(number(0.0)))
    """Client-side rate limit of Binding calls a second (client-go's token bucket, what bounds
    kube-scheduler's binds); 0 means none, only `concurrency` bounds them."""
    burst: int = field(default=200, metadata=reads(integer(0)))
    """Binding calls the rate limit lets through at once after a quiet spell; 0 means twice
    `qps` (at least 1)."""

    def __post_init__(self) -> None:
        check_settings(self)
