"""The scheduling cycle's metrics: kube-scheduler's names, labels and buckets, recorded by
`SchedulingMetrics` on its own and by the `Scheduler` through a cycle against the in-memory
API."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from metrics.scheduling import (
    EXTENSION_POINT_BUCKETS,
    SLI_BUCKETS,
    VICTIM_BUCKETS,
    SchedulingMetrics,
    attempts_label,
    exponential_buckets,
)
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import harness

PROFILE = "gpu-scheduler"
BIND_COUNT = "scheduler_framework_extension_point_duration_seconds_count"


def value(metrics: SchedulingMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def attempts(metrics: SchedulingMetrics, result: str) -> float | None:
    return value(metrics, "scheduler_schedule_attempts_total", result=result, profile=PROFILE)


@pytest.mark.parametrize(
    ("count", "label"), [(1, "1"), (2, "2"), (14, "14"), (15, "15+"), (16, "15+"), (900, "15+")]
)
def test_attempts_label_is_capped_at_fifteen(count: int, label: str) -> None:
    assert attempts_label(count) == label


def test_buckets_are_kube_schedulers() -> None:
    assert exponential_buckets(1, 2, 3) == (1, 2, 4)
    assert SLI_BUCKETS[0] == 0.01 and len(SLI_BUCKETS) == 20
    assert SLI_BUCKETS[-1] == pytest.approx(0.01 * 2**19)  # ~88 minutes
    assert EXTENSION_POINT_BUCKETS[0] == 0.0001 and len(EXTENSION_POINT_BUCKETS) == 12
    assert VICTIM_BUCKETS == (1, 2, 4, 8, 16, 32, 64)
    with pytest.raises(ValueError, match="factor > 1"):
        exponential_buckets(1, 1, 3)


def test_every_result_is_exported_at_zero_before_anything_happens() -> None:
    metrics = SchedulingMetrics(CollectorRegistry(), PROFILE)
    for result in ("scheduled", "unschedulable", "error"):
        assert attempts(metrics, result) == 0
    assert value(metrics, "scheduler_preemption_attempts_total") == 0
    assert value(metrics, "scheduler_preemption_victims_count") == 0


def test_scheduled_counts_the_attempt_and_observes_the_sli_by_attempts() -> None:
    metrics = SchedulingMetrics(CollectorRegistry(), PROFILE)
    metrics.scheduled(2, 0.03)
    metrics.scheduled(20, 100.0)
    assert attempts(metrics, "scheduled") == 2
    sli = "scheduler_pod_scheduling_sli_duration_seconds"
    assert value(metrics, f"{sli}_count", attempts="2") == 1
    assert value(metrics, f"{sli}_bucket", attempts="2", le="0.02") == 0
    assert value(metrics, f"{sli}_bucket", attempts="2", le="0.04") == 1
    assert value(metrics, f"{sli}_sum", attempts="15+") == 100.0
    assert value(metrics, f"{sli}_count", attempts="20") is None


def test_two_daemons_metrics_never_share_a_registry() -> None:
    first = SchedulingMetrics(CollectorRegistry(), PROFILE)
    second = SchedulingMetrics(CollectorRegistry(), PROFILE)
    first.unschedulable()
    assert attempts(first, "unschedulable") == 1
    assert attempts(second, "unschedulable") == 0
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        SchedulingMetrics(first.registry, "other")


async def test_timed_bind_records_success_error_and_cancellation() -> None:
    metrics = SchedulingMetrics(CollectorRegistry(), PROFILE)
    point = "scheduler_framework_extension_point_duration_seconds_count"

    async def ok(node: str) -> str:
        return node

    async def refused(node: str) -> str:
        raise RuntimeError(f"refused on {node}")

    async def stuck(node: str) -> str:
        await asyncio.Event().wait()
        return node

    assert await metrics.timed_bind(ok)("n1") == "n1"
    with pytest.raises(RuntimeError, match="refused on n2"):
        await metrics.timed_bind(refused)("n2")
    task = asyncio.create_task(metrics.timed_bind(stuck)("n3"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    success = {"extension_point": "Bind", "status": "Success", "profile": PROFILE}
    failed = {**success, "status": "Error"}
    assert value(metrics, point, **success) == 1
    assert value(metrics, point, **failed) == 2


def test_preemption_counts_attempts_and_observes_victims_when_there_are_some() -> None:
    metrics = SchedulingMetrics(CollectorRegistry(), PROFILE)
    metrics.preemption(3)
    metrics.preemption(0)
    assert value(metrics, "scheduler_preemption_attempts_total") == 2
    assert value(metrics, "scheduler_preemption_victims_count") == 1
    assert value(metrics, "scheduler_preemption_victims_bucket", le="2.0") == 0
    assert value(metrics, "scheduler_preemption_victims_bucket", le="4.0") == 1


# -- recorded by the scheduling cycle --------------------------------------------------------------


async def test_a_bound_pod_counts_as_scheduled_with_its_time_since_first_queued() -> None:
    h = harness(cluster(make_node("n", gpus=8)))
    h.add(pod_info("train", gpus=4))
    h.clock.now += 2.5  # waited 2.5 s in the queue
    await h.cycle()
    metrics = h.scheduler.metrics
    assert attempts(metrics, "scheduled") == 1
    assert attempts(metrics, "error") == 0
    sli = "scheduler_pod_scheduling_sli_duration_seconds"
    assert value(metrics, f"{sli}_sum", attempts="1") == pytest.approx(2.5)
    bind = {"extension_point": "Bind", "status": "Success", "profile": PROFILE}
    assert value(metrics, BIND_COUNT, **bind) == 1


async def test_a_pod_that_fits_nowhere_counts_as_unschedulable() -> None:
    h = harness(cluster(make_node("n", gpus=2)))
    h.add(pod_info("big", gpus=4))
    await h.cycle()
    assert attempts(h.scheduler.metrics, "unschedulable") == 1
    assert attempts(h.scheduler.metrics, "scheduled") == 0


async def test_a_rejected_binding_counts_as_an_error_and_the_retry_as_scheduled() -> None:
    h = harness(cluster(make_node("n", gpus=8)))
    h.core.bind_outcomes.append(500)
    h.add(pod_info("train", gpus=1))
    await h.cycle()
    metrics = h.scheduler.metrics
    assert attempts(metrics, "error") == 1
    failed = {"extension_point": "Bind", "status": "Error", "profile": PROFILE}
    assert value(metrics, BIND_COUNT, **failed) == 1
    h.after_backoff(1)
    await h.cycle()
    assert attempts(metrics, "scheduled") == 1
    sli = "scheduler_pod_scheduling_sli_duration_seconds_count"
    assert value(metrics, sli, attempts="2") == 1


async def test_a_cycle_that_raises_counts_as_an_error() -> None:
    h = harness(cluster(make_node("n", gpus=8)))
    h.add(pod_info("train", gpus=1))

    def broken(queued: object) -> None:
        raise RuntimeError("a bug in the cycle")

    h.scheduler.schedule_one = broken  # type: ignore[method-assign]
    loop = asyncio.create_task(h.scheduler.run())
    for _ in range(100):  # bounded: until the cycle ran
        if attempts(h.scheduler.metrics, "error"):
            break
        await asyncio.sleep(0)
    h.queue.close()
    await asyncio.wait_for(loop, 5)
    assert attempts(h.scheduler.metrics, "error") == 1
    assert h.queue.where("default/train") == "backoff"
