"""Every exit of the binding cycle settles the pod: bound, or forgotten and requeued. Leadership
lost (the scheduler cancels its binding tasks) while a lost Binding's outcome is being read back,
or before a binding task ran at all, leaves no pod assumed and no queue entry in flight; a write
that never left the process is a plain failure, not an outcome to read back."""

from __future__ import annotations

import asyncio

import aiohttp
from structlog.testing import capture_logs

from scheduler.kube.apierrors import APINotSentError
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import Harness, harness

KEY = "default/train"


def one_node() -> Harness:
    return harness(cluster(make_node("n", gpus=8)))


async def until(condition: object, what: str) -> None:
    """Let the event loop run until `condition()` holds (bounded by iterations, not time)."""
    for _ in range(1000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what} never happened")


async def test_leadership_lost_during_the_read_back_forgets_and_requeues_the_pod() -> None:
    h = one_node()
    h.core.bind_outcomes.append(aiohttp.ServerDisconnectedError())  # outcome unknown
    h.core.read_gate = asyncio.Event()  # the read-back hangs until cancelled
    h.add(pod_info("train", gpus=2))
    queued = h.queue.pop_nowait()
    assert queued is not None
    with capture_logs() as logs:
        h.scheduler.schedule_one(queued)
        await until(lambda: h.core.reads == 1, "the read-back")
        await h.scheduler.finish_binds(timeout=0)  # what losing the Lease does

    assert KEY not in h.cache.pods  # no GPUs stay reserved for it
    assert int(h.cache.node_gpus_used("n").sum()) == 0
    assert h.queue.where(KEY) == "backoff"  # not stuck in flight: it will be tried again
    assert "bind_abandoned" in [e["event"] for e in logs]

    h.core.read_gate = None  # leader again: the pod pops and binds
    h.after_backoff(attempts=1)
    assert await h.cycle() == KEY
    assert h.scheduler.bound == 1


async def test_a_binding_task_cancelled_before_its_first_step_settles_its_pod() -> None:
    h = one_node()
    h.add(pod_info("train", gpus=2))
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)  # assumed; the bind task has not run yet
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"scheduler:bind:{KEY}"]
    task.cancel()
    await h.settle()
    assert h.core.bindings == []
    assert KEY not in h.cache.pods
    assert h.queue.where(KEY) == "backoff"


async def test_a_binding_never_sent_is_a_plain_failure_and_is_not_read_back() -> None:
    h = one_node()
    h.core.bind_outcomes.append(APINotSentError("not sent: POST binding: TimeoutError: ..."))
    h.add(pod_info("train", gpus=2))
    with capture_logs() as logs:
        await h.cycle()
    assert h.core.reads == 0
    assert KEY not in h.cache.pods
    assert h.queue.where(KEY) == "backoff"
    events = [e["event"] for e in logs]
    assert "bind_failed" in events and "bind_outcome_unknown" not in events
