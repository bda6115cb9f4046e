"""popFromBackoff (kube-scheduler's SchedulerPopFromBackoffQ): with activeQ empty, a pop takes
the backoffQ pod whose backoff ends first, never one that backs off after an error."""

from __future__ import annotations

import asyncio

from scheduler.core.queue import SchedulingQueue
from tests.unit.test_queue import FakeClock, pop


def queue_with(clock: FakeClock, enabled: bool = True) -> SchedulingQueue[str]:
    return SchedulingQueue[str](clock=clock, pop_from_backoff=enabled)


def moved_to_backoff(queue: SchedulingQueue[str], key: str, priority: int = 0) -> None:
    """`key` added, popped and found unschedulable while a cluster event came: in backoffQ."""
    queue.add(key, priority, key)
    pod = pop(queue)
    queue.move_all_to_active_or_backoff("PodDeleted")
    queue.requeue_unschedulable(pod)
    assert queue.where(key) == "backoff"


def test_an_empty_activeq_takes_the_pod_whose_backoff_ends_first() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    moved_to_backoff(queue, "ns/first")
    clock.advance(0.1)
    moved_to_backoff(queue, "ns/second", priority=100)
    taken = pop(queue)
    assert taken.key == "ns/first" and taken.attempts == 2
    assert queue.where("ns/first") == "in_flight"
    assert queue.popped_from_backoff == 1
    assert pop(queue).key == "ns/second"
    assert queue.popped_from_backoff == 2
    assert queue.pop_nowait() is None


def test_a_ready_pod_in_activeq_goes_before_any_backoff() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    moved_to_backoff(queue, "ns/waiting", priority=100)
    queue.add("ns/new", 0, "new")
    assert pop(queue).key == "ns/new"
    assert pop(queue).key == "ns/waiting"


def test_equal_backoff_ends_go_by_priority() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    for key, priority in (("ns/a", 0), ("ns/b", 7)):
        queue.add(key, priority, key)
    popped = [pop(queue), pop(queue)]
    queue.move_all_to_active_or_backoff("NodeAdd")
    for pod in popped:
        queue.requeue_unschedulable(pod)
    assert [pop(queue).key, pop(queue).key] == ["ns/b", "ns/a"]


def test_a_pod_backing_off_after_an_error_waits_its_backoff_out() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    queue.add("ns/failed-bind", 0, "x")
    queue.requeue_backoff(pop(queue))
    assert queue.pop_nowait() is None
    assert queue.where("ns/failed-bind") == "backoff"
    clock.advance(1.0)
    assert pop(queue).key == "ns/failed-bind"


def test_a_pod_backing_off_after_an_error_does_not_hide_the_pods_after_it() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    queue.add("ns/failed-bind", 0, "x")
    queue.requeue_backoff(pop(queue))  # first in backoffQ
    moved_to_backoff(queue, "ns/moved")
    assert pop(queue).key == "ns/moved"
    assert queue.where("ns/failed-bind") == "backoff"


def test_an_error_then_unschedulable_pod_may_be_taken_early_again() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    queue.add("ns/p", 0, "x")
    queue.requeue_backoff(pop(queue))
    clock.advance(1.0)
    pod = pop(queue)
    queue.move_all_to_active_or_backoff("NodeAdd")
    queue.requeue_unschedulable(pod)
    assert queue.where("ns/p") == "backoff"
    assert pop(queue).key == "ns/p"


def test_disabled_the_backoff_is_waited_out() -> None:
    clock = FakeClock()
    queue = queue_with(clock, enabled=False)
    moved_to_backoff(queue, "ns/p")
    assert queue.pop_nowait() is None
    clock.advance(1.0)
    assert pop(queue).key == "ns/p"
    assert queue.popped_from_backoff == 0


async def test_a_waiting_pop_wakes_for_a_pod_moved_to_backoff() -> None:
    clock = FakeClock()
    queue = queue_with(clock)
    queue.add("ns/p", 0, "x")
    pod = pop(queue)
    waiter = asyncio.ensure_future(queue.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.move_all_to_active_or_backoff("PodDeleted")
    queue.requeue_unschedulable(pod)  # backoff of 1 s on a clock that does not move
    taken = await asyncio.wait_for(waiter, timeout=5)
    assert taken.key == "ns/p"
