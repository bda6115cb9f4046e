"""What the scheduling cycle records while it runs, under kube-scheduler's metric names.

Names, labels and buckets are those of kube-scheduler (pkg/scheduler/metrics), so dashboards and
alerts written for it read this scheduler too:

    scheduler_schedule_attempts_total                      counter    result, profile
    scheduler_pod_scheduling_sli_duration_seconds          histogram  attempts
    scheduler_framework_extension_point_duration_seconds   histogram  extension_point, status,
                                                                      profile
    scheduler_preemption_attempts_total                    counter
    scheduler_preemption_victims                           histogram

- `result` is `scheduled` (the Binding succeeded), `unschedulable` (no node fits, or the pod
  cannot be scheduled as it is) or `error` (the Binding failed, or the cycle raised). `profile`
  is the scheduler name, as kube-scheduler's profile name is.
- The SLI duration runs from the pod's first entry in the queue (a gated pod enters when its
  last gate goes) to its successful Binding; `attempts` is the number of scheduling cycles it
  took, "15+" from 15 on (kube-scheduler caps it there to bound the label's values).
- Bind latency: kube-scheduler's metrics list has no metric of its own for the Binding call
  (no `scheduler_binding_duration_seconds`); the latency of the Bind extension
  point is `scheduler_framework_extension_point_duration_seconds{extension_point="Bind"}`, whose
  meaning is the same here (the Binding POST, GPU annotations included), so that is the name
  used, with `status` `Success` or `Error` and kube-scheduler's buckets (0.1 ms to ~200 ms).
  `scheduler_plugin_execution_duration_seconds` is per plugin and sampled, and
  `scheduler_scheduling_attempt_duration_seconds` covers the whole attempt: neither means bind
  latency.
- Preemption counts priority preemption (a PostFilter that evicts lower-priority pods): the
  PostFilter calls `preemption(len(victims))` once per run that looked for victims (0 when it
  found none), as kube-scheduler counts an attempt per DefaultPreemption run and observes the
  victims it chose. Reclaim of idle GPUs is not priority preemption and has its own
  `gpu_scheduler_reclaim_*` counters (`metrics.collectors`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

T = TypeVar("T")
P = ParamSpec("P")

SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"
RESULTS = (SCHEDULED, UNSCHEDULABLE, ERROR)

BIND = "Bind"
SUCCESS = "Success"
FAILED = "Error"

MAX_ATTEMPTS_LABEL = 15
"""From this many attempts on, the `attempts` label reads "15+" (kube-scheduler's cap)."""


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """`count` upper bounds `start * factor**i` (Go client's ExponentialBuckets)."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError(f"need start > 0, factor > 1, count >= 1; got {start}, {factor}, {count}")
    return tuple(start * factor**i for i in range(count))


SLI_BUCKETS = exponential_buckets(0.01, 2, 20)
"""10 ms up to ~88 min, as kube-scheduler's pod_scheduling_sli_duration_seconds."""
EXTENSION_POINT_BUCKETS = exponential_buckets(0.0001, 2, 12)
"""0.1 ms up to ~200 ms, as kube-scheduler's framework_extension_point_duration_seconds."""
VICTIM_BUCKETS = exponential_buckets(1, 2, 7)
"""1 up to 64 victims, as kube-scheduler's preemption_victims."""


def attempts_label(attempts: int) -> str:
    """The `attempts` label of the SLI histogram: the count, or "15+" from 15 on."""
    return f"{MAX_ATTEMPTS_LABEL}+" if attempts >= MAX_ATTEMPTS_LABEL else str(attempts)


class SchedulingMetrics:
    """The scheduling cycle's metrics for one profile, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry, profile: str) -> None:
        self.registry = registry
        self.profile = profile
        self.attempts = Counter(
            "scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
            "could not be scheduled, while 'error' means an internal scheduler problem or a "
            "failed Binding.",
            ("result", "profile"),
            registry=registry,
        )
        for result in RESULTS:  # every result exported from the start, at 0
            self.attempts.labels(result, profile)
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
            "queue to its successful Binding; may involve multiple scheduling attempts.",
            ("attempts",),
            buckets=SLI_BUCKETS,
            registry=registry,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point (here: Bind, the "
            "Binding call).",
            ("extension_point", "status", "profile"),
            buckets=EXTENSION_POINT_BUCKETS,
            registry=registry,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts_total",
            "Total preemption attempts in the cluster till now.",
            registry=registry,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims.",
            buckets=VICTIM_BUCKETS,
            registry=registry,
        )

    @classmethod
    def unregistered(cls, profile: str) -> SchedulingMetrics:
        """Metrics in a registry of their own that nothing serves (for a scheduler built
        without a daemon, e.g. in tests and tools)."""
        return cls(CollectorRegistry(), profile)

    def scheduled(self, attempts: int, seconds_since_queued: float) -> None:
        """A pod was bound after `attempts` cycles, `seconds_since_queued` after it entered
        the queue."""
        self.attempts.labels(SCHEDULED, self.profile).inc()
        self.sli_duration.labels(attempts_label(attempts)).observe(max(seconds_since_queued, 0))

    def unschedulable(self) -> None:
        """A scheduling cycle found no node for the pod."""
        self.attempts.labels(UNSCHEDULABLE, self.profile).inc()

    def error(self) -> None:
        """A cycle raised, or a Binding failed."""
        self.attempts.labels(ERROR, self.profile).inc()

    def timed_bind(self, call: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        """`call` (the Binding) recording its latency as the Bind extension point's: status
        Success when it returns, Error when it raises (cancellation included)."""

        async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.perf_counter()
            status = FAILED
            try:
                result = await call(*args, **kwargs)
                status = SUCCESS
                return result
            finally:
                self.extension_point_duration.labels(BIND, status, self.profile).observe(
                    time.perf_counter() - started
                )

        return timed

    def preemption(self, victims: int) -> None:
        """A preemption attempt that chose `victims` pods (0 when it found none)."""
        self.preemption_attempts.inc()
        if victims > 0:
            self.preemption_victims.observe(victims)
