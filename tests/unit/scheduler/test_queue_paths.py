"""The scheduling queue's less travelled paths, each pinned exactly: priority updates in every
pool, stale heap entries, the heap rebuild thresholds, boundaries of backoff and flush, defaults.
"""

from __future__ import annotations

import asyncio

import pytest

from scheduler.core.queue import QueuedPod, SchedulingQueue
from tests.unit.test_queue import FakeClock, drain, make_queue, pop


def park(queue: SchedulingQueue[str], key: str, pool: str) -> QueuedPod[str] | None:
    """Put the known, active `key` into `pool` (one pop; never a move request). Returns the
    popped pod when `pool` is "in_flight"."""
    if pool == "active":
        return None
    pod = pop(queue)
    assert pod.key == key
    if pool == "backoff":
        queue.requeue_backoff(pod)
    elif pool == "unschedulable":
        queue.requeue_unschedulable(pod)
    assert queue.where(key) == pool
    return pod if pool == "in_flight" else None


@pytest.mark.parametrize("verb", ["add", "update"])
@pytest.mark.parametrize("pool", ["active", "backoff", "unschedulable", "in_flight"])
def test_a_new_priority_is_kept_in_every_pool(pool: str, verb: str) -> None:
    """A priority change reaches the pod wherever it waits: it pops with the new priority, and
    ahead of (or behind) the other pods accordingly."""
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "v1")
    in_flight = park(queue, "ns/p", pool)
    queue.add("ns/mid", 5, "m")
    getattr(queue, verb)("ns/p", 9, "v2")
    if in_flight is not None:
        queue.requeue_backoff(in_flight)
    clock.advance(60)  # past any backoff
    queue.move_all_to_active_or_backoff("NodeAdd")
    queue.flush_backoff()
    first = pop(queue)
    assert (first.key, first.priority, first.obj) == ("ns/p", 9, "v2")
    assert pop(queue).key == "ns/mid"


@pytest.mark.parametrize("pool", ["active", "backoff", "unschedulable"])
def test_a_lowered_priority_sends_the_pod_behind(pool: str) -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 9, "v1")
    park(queue, "ns/p", pool)
    queue.add("ns/mid", 5, "m")
    queue.update("ns/p", 1, "v2")
    clock.advance(60)
    queue.move_all_to_active_or_backoff("NodeAdd")
    assert drain(queue) == ["ns/mid", "ns/p"]


def test_pop_skips_a_stale_top_entry() -> None:
    """The heap's top belongs to a deleted pod: the next live pod still pops."""
    queue = make_queue(FakeClock())
    queue.add("ns/top", 9, "x")
    queue.add("ns/next", 1, "x")
    queue.delete("ns/top")
    assert pop(queue).key == "ns/next"


def test_pop_skips_the_old_entry_of_a_resorted_pod() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/a", 9, "x")
    queue.add("ns/b", 5, "x")
    queue.update("ns/a", 1, "x")  # a's old entry (priority 9) stays on top, stale
    assert drain(queue) == ["ns/b", "ns/a"]


def test_flush_backoff_moves_every_expired_pod_past_stale_entries() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key, 0, "x")
    for _ in range(3):
        queue.requeue_backoff(pop(queue))
        clock.advance(0.1)
    queue.delete("ns/a")  # the earliest backoff entry is now stale
    clock.advance(1)
    assert queue.flush_backoff() == 2
    assert queue.pools()["active"] == 2
    assert drain(queue) == ["ns/b", "ns/c"]


def test_a_stale_backoff_entry_does_not_release_a_recreated_pod_early() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "first")
    queue.requeue_backoff(pop(queue))  # backoff until 1001.0
    queue.delete("ns/p")
    clock.advance(0.5)
    queue.add("ns/p", 0, "second")
    queue.requeue_backoff(pop(queue))  # the recreated pod: backoff until 1001.5
    clock.advance(0.5)
    assert queue.flush_backoff() == 0
    assert queue.where("ns/p") == "backoff"
    clock.advance(0.5)
    assert queue.flush_backoff() == 1
    assert pop(queue).obj == "second"


def test_a_pod_whose_backoff_ends_exactly_now_goes_to_active() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    queue.requeue_unschedulable(pop(queue))
    clock.advance(1.0)  # exactly the backoff after one attempt
    assert queue.move_all_to_active_or_backoff("NodeAdd") == 1
    assert queue.where("ns/p") == "active"


def test_popped_pod_carries_its_queue_times() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    clock.advance(3)
    pod = pop(queue)
    assert (pod.initial_queued_at, pod.queued_at) == (1000.0, 1000.0)
    queue.requeue_backoff(pod)
    clock.advance(1)
    again = pop(queue)
    assert (again.initial_queued_at, again.queued_at) == (1000.0, 1003.0)


def test_moves_and_flushes_count_every_pod() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key, 0, "x")
    for _ in range(3):
        queue.requeue_unschedulable(pop(queue))
    clock.advance(5)
    assert queue.move_all_to_active_or_backoff("NodeAdd") == 3
    for _ in range(2):
        queue.requeue_unschedulable(pop(queue))
    assert queue.move_all_to_active_or_backoff("NodeAdd") == 2
    assert queue.moves == {"NodeAdd": 5}
    clock.advance(5)
    assert queue.flush_backoff() == 2


def test_defaults_and_settings() -> None:
    clock = FakeClock()
    queue = SchedulingQueue[str](clock=clock)
    assert queue.closed is False
    assert [queue.backoff_duration(n) for n in (1, 4, 5)] == [1.0, 8.0, 10.0]
    queue.add("ns/p", 0, "x")
    queue.requeue_unschedulable(pop(queue))
    clock.advance(60)
    assert queue.flush_unschedulable() == 0
    clock.advance(0.5)
    assert queue.flush_unschedulable() == 1  # the default flush is after 60 s
    assert SchedulingQueue[str](unschedulable_flush=0.5).closed is False


NEED_ORDERED_BACKOFF = r"^need 0 < backoff_initial <= backoff_max$"


@pytest.mark.parametrize(
    ("initial", "maximum", "flush", "message"),
    [
        (0.0, 10.0, 60.0, NEED_ORDERED_BACKOFF),
        (2.0, 1.0, 60.0, NEED_ORDERED_BACKOFF),
        (1.0, 10.0, 0.0, r"^unschedulable_flush must be positive$"),
    ],
)
def test_invalid_settings_name_the_setting(
    initial: float, maximum: float, flush: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulingQueue[str](
            backoff_initial=initial, backoff_max=maximum, unschedulable_flush=flush
        )


async def test_run_sleeps_the_interval_between_flushes() -> None:
    queue = make_queue(FakeClock())
    intervals: list[float] = []

    async def sleep(seconds: float) -> None:
        intervals.append(seconds)
        if len(intervals) == 2:
            queue.close()
        await asyncio.sleep(0)

    await asyncio.wait_for(queue.run(sleep=sleep), 1)
    await asyncio.wait_for(queue.run(0.25, sleep=sleep), 1)  # closed: returns at once
    assert intervals == [1.0, 1.0]


async def test_a_waiting_pop_skips_a_deleted_pods_backoff() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/a", 1, "x")
    queue.add("ns/b", 0, "x")
    queue.requeue_backoff(pop(queue))
    queue.requeue_backoff(pop(queue))
    queue.delete("ns/a")  # the earliest backoff entry is now stale
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(0.01)  # the pop computes how long to wait, past the stale entry
    assert not waiter.done()
    clock.advance(1)
    assert queue.flush_backoff() == 1  # wakes the waiter
    pod = await asyncio.wait_for(waiter, 1)
    assert pod.key == "ns/b"


# -- heap rebuilds: the heaps keep at most 2 x live entries + 64 -------------------------------


def test_active_heap_is_rebuilt_exactly_past_its_slack() -> None:
    queue = make_queue(FakeClock())
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key, 0, "x")
    # 3 live pods: the heap may hold 2 * 3 + 64 = 70 entries; each re-sort adds one.
    for step in range(67):
        queue.update("ns/a", 1 + step % 2, "x")
    assert queue.heap_rebuilds["active"] == 0
    queue.update("ns/a", 5, "x")  # the 71st entry
    assert queue.heap_rebuilds["active"] == 1
    for step in range(68):
        queue.update("ns/c", 10 + step % 2, "x")
    assert queue.heap_rebuilds["active"] == 2
    assert drain(queue) == ["ns/c", "ns/a", "ns/b"]


def test_backoff_heap_is_rebuilt_exactly_past_its_slack() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key, 0, "x")
        queue.requeue_backoff(pop(queue))
        clock.advance(0.1)
    # Each pod that backs off and is deleted leaves a stale entry; with 3 live pods plus the one
    # just requeued, the heap may hold 2 * 4 + 64 = 72 entries.
    for index in range(69):
        queue.add(f"ns/gone-{index}", 0, "x")
        queue.requeue_backoff(pop(queue))
        queue.delete(f"ns/gone-{index}")
    assert queue.heap_rebuilds["backoff"] == 0
    queue.add("ns/gone-last", 0, "x")
    queue.requeue_backoff(pop(queue))
    assert queue.heap_rebuilds["backoff"] == 1
    queue.delete("ns/gone-last")
    for index in range(70):
        queue.add(f"ns/again-{index}", 0, "x")
        queue.requeue_backoff(pop(queue))
        queue.delete(f"ns/again-{index}")
    assert queue.heap_rebuilds["backoff"] == 2
    clock.advance(0.75)  # a's backoff (1 s from 1000.0) ends; b's and c's not yet
    assert queue.flush_backoff() == 1
    assert queue.where("ns/a") == "active"
    clock.advance(0.2)
    assert queue.flush_backoff() == 2
    assert drain(queue) == ["ns/a", "ns/b", "ns/c"]


async def test_a_waiting_pop_waits_exactly_until_the_earliest_backoff_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait is computed from the queue's clock, not polled: no backoff, no deadline."""
    delays: list[float | None] = []
    real_timeout = asyncio.timeout

    def recording_timeout(delay: float | None) -> asyncio.Timeout:
        delays.append(delay)
        return real_timeout(delay)

    monkeypatch.setattr(asyncio, "timeout", recording_timeout)
    clock = FakeClock()
    queue = make_queue(clock)
    first = asyncio.create_task(queue.pop())
    await asyncio.sleep(0)
    assert delays == [None]  # nothing in backoffQ: wait for an add
    queue.add("ns/p", 0, "x")
    queue.requeue_backoff(await asyncio.wait_for(first, 1))
    clock.advance(0.75)
    second = asyncio.create_task(queue.pop())
    await asyncio.sleep(0)
    assert delays == [None, 0.25]  # 1 s of backoff, 0.75 s of it gone
    clock.advance(0.25)
    queue.flush_backoff()
    assert (await asyncio.wait_for(second, 1)).attempts == 2


@pytest.mark.parametrize("pool", ["active", "backoff", "unschedulable", "in_flight"])
def test_oldest_queued_at_finds_the_oldest_pod_in_any_pool(pool: str) -> None:
    """The oldest pod alone in `pool`, a younger one in activeQ (in "active", both there)."""
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/old", 0, "x")
    park(queue, "ns/old", pool)
    clock.advance(5)
    queue.add("ns/young", 0, "y")
    assert queue.oldest_queued_at() == 1000.0


def test_take_skips_keys_not_waiting_wherever_they_are_in_the_list() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key, 0, "x")
    flying = pop(queue)
    taken = queue.take(["ns/missing", flying.key, "ns/b", "ns/gone", "ns/c"])
    assert [pod.key for pod in taken] == ["ns/b", "ns/c"]


def test_a_flight_ends_with_its_requeue_a_later_pop_or_a_delete() -> None:
    """`flying` is true only for the latest pop of a key while its cycle runs."""
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    first = pop(queue)
    assert queue.flying(first)
    queue.requeue_backoff(first)
    assert not queue.flying(first)  # requeued: no flight at all
    clock.advance(1)
    second = pop(queue)
    assert queue.flying(second)
    assert not queue.flying(first)  # a flight, but of a later pop
    queue.delete("ns/p")
    assert not queue.flying(second)
    queue.add("ns/q", 0, "x")
    done = pop(queue)
    queue.done(done)
    assert not queue.flying(done)
