"""The one value every long-lived part of the daemon shares.

The daemon builds a `SchedulerContext` once (`scheduler.daemon.Daemon`) and hands it to the
scheduling loop, the PostFilters, the handlers and the periodic tasks, instead of threading the
same settings, cache, API client, recorder, clocks and metrics through each constructor by hand.
Tests build one with `tests.unit.scheduler.context.make_context`.

What belongs here: what is created once per process and read by several parts. What does not: a
part's own collaborators (the queue of the loop, the framework of a profile), which stay explicit
constructor arguments so that a reader sees what each part really uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes_asyncio import client

from metrics.scheduling import SchedulingMetrics
from scheduler.config import SchedulerConfig
from scheduler.kube.client import fence_of
from scheduler.kube.events import EventRecorder
from scheduler.kube.fence import WriteFence
from scheduler.state.cache import ClusterCache


def _always_leader() -> bool:
    return True


@dataclass(frozen=True)
class SchedulerContext:
    """Settings, cluster state, API access, clocks and metrics of one scheduler process."""

    settings: SchedulerConfig
    """The validated configuration (`scheduler.config`)."""
    cache: ClusterCache
    """The cluster as the informers see it, plus this scheduler's assumptions."""
    api_client: client.ApiClient
    """The API client every request goes through (its writes pass the write fence)."""
    recorder: EventRecorder
    """Writes Kubernetes Events in the background."""
    metrics: SchedulingMetrics
    """kube-scheduler's scheduling metrics, registered in the daemon's registry."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds: timeouts, backoff, cooldowns, durations."""
    wall_clock: Callable[[], float] = time.time
    """Unix seconds: ages compared with API timestamps (e.g. a pod's start time)."""
    is_leader: Callable[[], bool] = field(default=_always_leader)
    """Whether this replica holds the Lease now (always true without leader election)."""

    @property
    def scheduler_name(self) -> str:
        return self.settings.scheduler_name

    @property
    def fence(self) -> WriteFence | None:
        """The write fence of `api_client` (None for a client not made by `api_client_for`)."""
        return fence_of(self.api_client)
