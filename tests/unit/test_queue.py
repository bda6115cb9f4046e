"""The scheduling queue: ordering, backoff, moves between pools, in-flight pods and waiting."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.core.queue import QueueClosed, QueuedPod, SchedulingQueue


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_queue(
    clock: FakeClock,
    backoff_initial: float = 1.0,
    backoff_max: float = 10.0,
    unschedulable_flush: float = 60.0,
) -> SchedulingQueue[str]:
    return SchedulingQueue[str](
        clock=clock,
        backoff_initial=backoff_initial,
        backoff_max=backoff_max,
        unschedulable_flush=unschedulable_flush,
    )


def pop(queue: SchedulingQueue[str]) -> QueuedPod[str]:
    pod = queue.pop_nowait()
    assert pod is not None, "activeQ is empty"
    return pod


def drain(queue: SchedulingQueue[str]) -> list[str]:
    keys = []
    while (pod := queue.pop_nowait()) is not None:
        keys.append(pod.key)
    return keys


def test_active_order_is_priority_then_first_queued_then_key() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/late-low", 0, "x")
    clock.advance(1)
    queue.add("ns/b-high", 100, "x")
    queue.add("ns/a-high", 100, "x")
    clock.advance(1)
    queue.add("ns/newest-high", 100, "x")
    queue.add("ns/mid", 50, "x")
    assert drain(queue) == ["ns/a-high", "ns/b-high", "ns/newest-high", "ns/mid", "ns/late-low"]


def test_requeued_pod_keeps_its_first_queued_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/old", 0, "x")
    old = pop(queue)
    clock.advance(5)
    queue.add("ns/new", 0, "x")
    queue.requeue_backoff(old)
    clock.advance(10)
    assert drain(queue) == ["ns/old", "ns/new"]


def test_pop_counts_attempts_and_cycles() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    first = pop(queue)
    assert (first.attempts, first.cycle) == (1, 1)
    queue.requeue_backoff(first)
    clock.advance(1)
    second = pop(queue)
    assert (second.attempts, second.cycle) == (2, 2)
    assert second.initial_queued_at == first.initial_queued_at == 1000.0


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (99, 10.0)],
)
def test_backoff_doubles_and_is_capped(attempts: int, seconds: float) -> None:
    assert make_queue(FakeClock()).backoff_duration(attempts) == seconds


def test_backoff_cap_holds_for_absurd_attempt_counts() -> None:
    assert make_queue(FakeClock()).backoff_duration(10_000) == 10.0


def test_backoff_queue_releases_pods_when_their_backoff_expires() -> None:
    clock = FakeClock()
    queue = make_queue(clock, backoff_initial=1.0, backoff_max=3.0)
    queue.add("ns/p", 0, "x")
    waits = []
    for _ in range(4):
        pod = pop(queue)
        queue.requeue_backoff(pod)
        assert queue.where("ns/p") == "backoff"
        start = clock.now
        while queue.flush_backoff() == 0:
            clock.advance(0.5)
        waits.append(clock.now - start)
        assert queue.where("ns/p") == "active"
    assert waits == [1.0, 2.0, 3.0, 3.0]


def test_invalid_backoff_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        SchedulingQueue[str](backoff_initial=0)
    with pytest.raises(ValueError):
        SchedulingQueue[str](backoff_initial=2, backoff_max=1)
    with pytest.raises(ValueError):
        SchedulingQueue[str](unschedulable_flush=0)


def test_unschedulable_pod_waits_for_an_event() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    queue.requeue_unschedulable(pop(queue), ["2 Insufficient nvidia.com/gpu"], ["GPUFit"])
    assert queue.where("ns/p") == "unschedulable"
    clock.advance(30)
    assert queue.flush_backoff() == 0
    assert queue.pop_nowait() is None

    assert queue.move_all_to_active_or_backoff("PodDeleted") == 1
    assert queue.where("ns/p") == "active"
    assert queue.moves["PodDeleted"] == 1
    pod = pop(queue)
    assert pod.unschedulable_reasons == ("2 Insufficient nvidia.com/gpu",)
    assert pod.unschedulable_plugins == frozenset({"GPUFit"})


def test_event_moves_a_pod_still_backing_off_to_backoff_queue() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    queue.requeue_unschedulable(pop(queue))
    clock.advance(0.5)  # backoff after one attempt is 1 s
    # A pod popped in a later cycle: the event below is not "during" ns/p's cycle.
    assert queue.move_all_to_active_or_backoff("NodeAdd") == 1
    assert queue.where("ns/p") == "backoff"
    clock.advance(0.5)
    assert queue.flush_backoff() == 1
    assert queue.where("ns/p") == "active"


def test_move_request_during_the_cycle_sends_the_pod_to_backoff() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    pod = pop(queue)
    assert queue.move_all_to_active_or_backoff("PodDeleted") == 0  # nothing parked yet
    queue.requeue_unschedulable(pod)
    assert queue.where("ns/p") == "backoff"


def test_move_request_before_the_pop_does_not_count() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    queue.move_all_to_active_or_backoff("NodeAdd")
    queue.requeue_unschedulable(pop(queue))
    assert queue.where("ns/p") == "unschedulable"


def test_move_request_during_a_later_pods_cycle_still_counts_for_an_earlier_one() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/a", 1, "x")
    queue.add("ns/b", 0, "x")
    a, b = pop(queue), pop(queue)
    queue.requeue_unschedulable(b)  # b finished before the event: parked
    queue.move_all_to_active_or_backoff("NodeUpdate")  # moves b, and counts for a in flight
    queue.requeue_unschedulable(a)
    assert queue.where("ns/a") == "backoff"
    assert queue.where("ns/b") == "backoff"


def test_long_unschedulable_pods_are_flushed() -> None:
    clock = FakeClock()
    queue = make_queue(clock, unschedulable_flush=60.0)
    queue.add("ns/a-old", 0, "x")
    queue.add("ns/b-new", 0, "x")
    queue.requeue_unschedulable(pop(queue))
    clock.advance(30)
    queue.requeue_unschedulable(pop(queue))
    clock.advance(30)
    assert queue.flush_unschedulable() == 0  # exactly 60 s is not longer than 60 s
    clock.advance(1)
    assert queue.flush_unschedulable() == 1
    assert queue.where("ns/a-old") == "active"
    assert queue.where("ns/b-new") == "unschedulable"


@pytest.mark.parametrize("pool", ["active", "backoff", "unschedulable"])
def test_delete_removes_a_queued_pod(pool: str) -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "x")
    if pool == "backoff":
        queue.requeue_backoff(pop(queue))
    elif pool == "unschedulable":
        queue.requeue_unschedulable(pop(queue))
    assert queue.where("ns/p") == pool
    queue.delete("ns/p")
    assert "ns/p" not in queue
    assert len(queue) == 0
    clock.advance(100)
    queue.move_all_to_active_or_backoff("NodeAdd")
    queue.flush_unschedulable()
    assert queue.pop_nowait() is None


@pytest.mark.parametrize("outcome", ["unschedulable", "backoff", "done"])
def test_pod_deleted_in_flight_is_not_requeued(outcome: str) -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p", 0, "x")
    pod = pop(queue)
    assert queue.where("ns/p") == "in_flight"
    queue.delete("ns/p")
    assert "ns/p" not in queue
    if outcome == "unschedulable":
        queue.requeue_unschedulable(pod)
    elif outcome == "backoff":
        queue.requeue_backoff(pod)
    else:
        queue.done(pod)
    assert "ns/p" not in queue
    assert queue.pools() == {"active": 0, "backoff": 0, "unschedulable": 0, "in_flight": 0}


def test_stale_cycle_cannot_requeue_or_end_a_recreated_pod() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p", 0, "first")
    stale = pop(queue)
    queue.delete("ns/p")
    queue.add("ns/p", 0, "second")  # recreated with the same name
    current = pop(queue)
    queue.requeue_unschedulable(stale)
    queue.done(stale)
    assert queue.where("ns/p") == "in_flight"
    queue.requeue_backoff(current)
    assert queue.where("ns/p") == "backoff"


def test_done_forgets_a_bound_pod() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p", 0, "x")
    pod = pop(queue)
    queue.done(pod.key)
    assert "ns/p" not in queue
    queue.requeue_backoff(pod)  # late error report after done: ignored
    assert "ns/p" not in queue


def test_add_of_a_known_pod_only_replaces_it() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "v1")
    queue.requeue_unschedulable(pop(queue))
    queue.add("ns/p", 5, "v2")
    assert queue.where("ns/p") == "unschedulable"
    queue.move_all_to_active_or_backoff("NodeAdd")
    clock.advance(1)
    pod = pop(queue)
    assert (pod.obj, pod.priority, pod.attempts) == ("v2", 5, 2)


def test_update_in_active_queue_replaces_object_and_resorts_by_priority() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/a", 10, "a1")
    queue.add("ns/b", 5, "b1")
    queue.update("ns/b", 20, "b2")
    queue.update("ns/a", 10, "a2")
    first, second = pop(queue), pop(queue)
    assert (first.key, first.obj, first.priority) == ("ns/b", "b2", 20)
    assert (second.key, second.obj) == ("ns/a", "a2")
    assert queue.pop_nowait() is None


def test_update_in_backoff_queue_keeps_the_backoff() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "v1")
    queue.requeue_backoff(pop(queue))
    queue.update("ns/p", 0, "v2")
    assert queue.where("ns/p") == "backoff"
    clock.advance(1)
    assert pop(queue).obj == "v2"


def test_update_moves_an_unschedulable_pod_out() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "v1")
    queue.requeue_unschedulable(pop(queue))
    queue.update("ns/p", 0, "v2")
    assert queue.where("ns/p") == "backoff"  # its 1 s backoff has not passed
    clock.advance(1)
    assert pop(queue).obj == "v2"


def test_update_during_the_cycle_is_kept_and_avoids_the_unschedulable_pool() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p", 0, "v1")
    pod = pop(queue)
    queue.update("ns/p", 7, "v2")
    assert pod.obj == "v1"  # what the running cycle holds does not change under it
    queue.requeue_unschedulable(pod)
    assert queue.where("ns/p") == "backoff"
    clock.advance(1)
    again = pop(queue)
    assert (again.obj, again.priority) == ("v2", 7)


def test_add_during_the_cycle_is_kept_but_still_parks_the_pod() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p", 0, "v1")
    pod = pop(queue)
    queue.add("ns/p", 0, "v2")
    queue.requeue_unschedulable(pod)
    assert queue.where("ns/p") == "unschedulable"
    queue.move_all_to_active_or_backoff("NodeAdd")
    assert queue.where("ns/p") in {"active", "backoff"}


def test_update_of_an_unknown_pod_adds_it() -> None:
    queue = make_queue(FakeClock())
    queue.update("ns/p", 0, "v1")
    assert queue.where("ns/p") == "active"


def test_sizes_and_membership() -> None:
    queue = make_queue(FakeClock())
    for name in "abcd":
        queue.add(f"ns/{name}", 0, name)
    queue.requeue_backoff(pop(queue))
    queue.requeue_unschedulable(pop(queue))
    pop(queue)
    assert queue.pools() == {"active": 1, "backoff": 1, "unschedulable": 1, "in_flight": 1}
    assert len(queue) == 3
    assert all(f"ns/{name}" in queue for name in "abcd")
    assert "ns/e" not in queue
    assert 42 not in queue


async def test_pop_waits_and_wakes_on_add() -> None:
    queue = make_queue(FakeClock())
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    queue.add("ns/p", 0, "x")
    pod = await asyncio.wait_for(waiter, 1)
    assert pod.key == "ns/p"


async def test_two_waiters_get_one_pod_each() -> None:
    queue = make_queue(FakeClock())
    waiters = [asyncio.create_task(queue.pop()) for _ in range(2)]
    await asyncio.sleep(0.01)
    queue.add("ns/a", 0, "x")
    await asyncio.sleep(0.01)
    assert sum(w.done() for w in waiters) == 1
    queue.add("ns/b", 0, "x")
    popped = await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert sorted(p.key for p in popped) == ["ns/a", "ns/b"]


async def test_pop_wakes_when_the_earliest_backoff_expires() -> None:
    queue = SchedulingQueue[str](backoff_initial=0.05, backoff_max=0.05)  # the real clock
    queue.add("ns/p", 0, "x")
    queue.requeue_backoff(await queue.pop())
    pod = await asyncio.wait_for(queue.pop(), 2)
    assert pod.attempts == 2


async def test_close_wakes_waiters_with_queue_closed() -> None:
    queue = make_queue(FakeClock())
    waiters = [asyncio.create_task(queue.pop()) for _ in range(2)]
    await asyncio.sleep(0.01)
    queue.close()
    for waiter in waiters:
        with pytest.raises(QueueClosed):
            await asyncio.wait_for(waiter, 1)
    queue.add("ns/p", 0, "x")
    with pytest.raises(QueueClosed):
        await queue.pop()
    assert queue.closed


async def test_run_flushes_periodically_until_closed() -> None:
    clock = FakeClock()
    queue = make_queue(clock, unschedulable_flush=10.0)
    queue.add("ns/p", 0, "x")
    queue.requeue_unschedulable(pop(queue))
    ticks = 0

    async def sleep(_: float) -> None:
        nonlocal ticks
        ticks += 1
        clock.advance(6)
        if ticks == 3:
            queue.close()
        await asyncio.sleep(0)

    await asyncio.wait_for(queue.run(sleep=sleep), 1)
    assert ticks == 3
    assert queue.where("ns/p") == "active"


KEYS = st.sampled_from([f"ns/p{i}" for i in range(5)])


class QueueMachine(RuleBasedStateMachine):
    """Every added, not deleted, not finished key is in exactly one place, whatever happens."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue = SchedulingQueue[int](clock=self.clock, unschedulable_flush=30.0)
        self.live: set[str] = set()
        self.popped: dict[str, QueuedPod[int]] = {}
        self.version = 0

    def _obj(self) -> int:
        self.version += 1
        return self.version

    @rule(key=KEYS, priority=st.integers(-3, 3))
    def add(self, key: str, priority: int) -> None:
        self.queue.add(key, priority, self._obj())
        self.live.add(key)

    @rule(key=KEYS, priority=st.integers(-3, 3))
    def update(self, key: str, priority: int) -> None:
        self.queue.update(key, priority, self._obj())
        self.live.add(key)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.queue.delete(key)
        self.live.discard(key)
        self.popped.pop(key, None)

    @rule()
    def pop(self) -> None:
        pod = self.queue.pop_nowait()
        if pod is not None:
            assert pod.key in self.live
            assert pod.key not in self.popped
            self.popped[pod.key] = pod

    @precondition(lambda self: self.popped)
    @rule(data=st.data(), outcome=st.sampled_from(["unschedulable", "backoff", "done"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.popped)))
        pod = self.popped.pop(key)
        if outcome == "unschedulable":
            self.queue.requeue_unschedulable(pod, ["no fit"])
        elif outcome == "backoff":
            self.queue.requeue_backoff(pod)
        else:
            self.queue.done(pod)
            self.live.discard(key)

    @rule(event=st.sampled_from(["PodDeleted", "NodeAdd"]))
    def move(self, event: str) -> None:
        self.queue.move_all_to_active_or_backoff(event)

    @rule(seconds=st.sampled_from([0.5, 1.0, 5.0, 40.0]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.queue.flush_backoff()
        self.queue.flush_unschedulable()
        if seconds > 30.0:  # beyond both the backoff cap and the unschedulable flush
            sizes = self.queue.pools()
            assert sizes["backoff"] == sizes["unschedulable"] == 0

    @invariant()
    def every_live_key_is_in_exactly_one_place(self) -> None:
        for key in self.live:
            assert self.queue.where(key) is not None, key
            assert (self.queue.where(key) == "in_flight") == (key in self.popped), key
        # Each live key is somewhere and there are no more entries than live keys: exactly once.
        assert sum(self.queue.pools().values()) == len(self.live)
        assert len(self.queue) == len(self.live) - len(self.popped)


QueueMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_queue_state_machine = QueueMachine.TestCase


def test_oldest_queued_at_covers_every_pool_and_flight() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    assert queue.oldest_queued_at() is None
    queue.add("ns/first", 0, "first")
    clock.advance(5)
    queue.add("ns/second", 0, "second")
    queue.add("ns/third", 0, "third")
    first = pop(queue)  # in flight
    assert queue.oldest_queued_at() == 1000.0
    queue.requeue_unschedulable(first)  # unschedulable pool
    assert queue.oldest_queued_at() == 1000.0
    queue.requeue_backoff(pop(queue))  # "second" to backoffQ
    queue.delete("ns/first")
    assert queue.oldest_queued_at() == 1005.0
    queue.delete("ns/second")
    queue.delete("ns/third")
    assert queue.oldest_queued_at() is None
