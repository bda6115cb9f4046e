"""`make_context`: a `SchedulerContext` for unit tests, on plain data and in-memory doubles."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from metrics.scheduling import SchedulingMetrics
from scheduler.config import SchedulerConfig
from scheduler.kube.events import EventRecorder
from scheduler.state.cache import ClusterCache
from scheduler.state.context import SchedulerContext

NO_CLIENT: Any = object()
"""Stands in for the ApiClient the generated API classes keep (never used by the fakes)."""


def make_context(
    cache: ClusterCache | None = None,
    *,
    settings: SchedulerConfig | None = None,
    api_client: Any = NO_CLIENT,
    recorder: EventRecorder | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    is_leader: Callable[[], bool] = lambda: True,
) -> SchedulerContext:
    """A context over `cache` (an empty one by default) with default settings, an API client
    that must not be called (tests replace the generated API objects with doubles), a recorder
    writing to that client unless one is given, unregistered metrics and the given clocks."""
    settings = settings or SchedulerConfig()
    return SchedulerContext(
        settings=settings,
        cache=cache if cache is not None else ClusterCache(),
        api_client=api_client,
        recorder=recorder
        or EventRecorder(api_client, settings.scheduler_name, "test", clock=clock),
        metrics=SchedulingMetrics.unregistered(settings.scheduler_name),
        clock=clock,
        wall_clock=wall_clock,
        is_leader=is_leader,
    )
