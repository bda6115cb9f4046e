"""The scheduling queue against a model: what pops, in which order, with which priority.

`tests/unit/test_queue.py` checks that every pod is in exactly one place. This state machine checks
the order of pops against a model that knows only what the informer and the scheduling loop told
the queue (the latest priority and object of each pod, and when it first entered the queue):

- a non-empty active pool yields a pod;
- pops come in priority order, first-queued first within a priority, then by key;
- a deleted or bound pod never pops;
- the priority and object a pod pops with are the latest ones it was added or updated with,
  whichever pool it was in when the update came.

A `churn` rule changes one pod's priority many times in a row, so stale heap entries pile up past
the queue's slack and the heap is rebuilt; `test_model_reaches_the_heap_rebuild` checks that the
runs really went through that path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from scheduler.core.queue import QueuedPod, SchedulingQueue
from tests.unit.test_queue import FakeClock

KEYS = st.sampled_from([f"ns/p{i}" for i in range(5)])
PRIORITIES = st.integers(-3, 3)
# Long enough to pass the queue's slack of 64 stale heap entries in one go, often enough to
# happen in most runs.
CHURN_LENGTHS = st.sampled_from([1, 3, 70])


@dataclass
class Expected:
    """What the model knows of one live pod."""

    priority: int
    obj: int
    initial_queued_at: float
    queued_at: float
    """When the pod was added or last requeued; its backoff counts from here."""
    attempts: int = 0


class QueueOrderMachine(RuleBasedStateMachine):
    """Pops checked against the model; heap rebuilds counted in `rebuilds` across runs."""

    rebuilds: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue = SchedulingQueue[int](clock=self.clock, unschedulable_flush=30.0)
        self.live: dict[str, Expected] = {}
        self.popped: dict[str, QueuedPod[int]] = {}
        self.version = 0

    def _announce(self, key: str, priority: int, *, as_update: bool) -> None:
        self.version += 1
        if as_update:
            self.queue.update(key, priority, self.version)
        else:
            self.queue.add(key, priority, self.version)
        known = self.live.get(key)
        if known is None:
            self.live[key] = Expected(priority, self.version, self.clock.now, self.clock.now)
        else:
            known.priority, known.obj = priority, self.version

    @rule(key=KEYS, priority=PRIORITIES)
    def add(self, key: str, priority: int) -> None:
        self._announce(key, priority, as_update=False)

    @rule(key=KEYS, priority=PRIORITIES)
    def update(self, key: str, priority: int) -> None:
        self._announce(key, priority, as_update=True)

    @rule(key=KEYS, length=CHURN_LENGTHS, priority=PRIORITIES, as_update=st.booleans())
    def churn(self, key: str, length: int, priority: int, as_update: bool) -> None:
        """The pod's priority flips `length` times (e.g. its PriorityClass is edited)."""
        for step in range(length):
            self._announce(key, priority + step % 2, as_update=as_update)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.queue.delete(key)
        self.live.pop(key, None)
        self.popped.pop(key, None)

    @rule()
    def pop(self) -> None:
        self.queue.flush_backoff()
        active = [key for key in self.live if self.queue.where(key) == "active"]
        pod = self.queue.pop_nowait()
        if not active:
            assert pod is None
            return
        assert pod is not None, f"active pool holds {active} but nothing popped"
        expected_key = min(
            active, key=lambda k: (-self.live[k].priority, self.live[k].initial_queued_at, k)
        )
        assert pod.key == expected_key
        expected = self.live[pod.key]
        assert (pod.priority, pod.obj) == (expected.priority, expected.obj)
        assert pod.initial_queued_at == expected.initial_queued_at
        assert pod.queued_at == expected.queued_at
        expected.attempts += 1
        assert pod.attempts == expected.attempts
        assert self.queue.where(pod.key) == "in_flight"
        self.popped[pod.key] = pod

    @precondition(lambda self: self.popped)
    @rule(data=st.data(), outcome=st.sampled_from(["unschedulable", "backoff", "done"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.popped)))
        pod = self.popped.pop(key)
        self.live[key].queued_at = self.clock.now
        if outcome == "unschedulable":
            self.queue.requeue_unschedulable(pod, ["no fit"])
        elif outcome == "backoff":
            self.queue.requeue_backoff(pod)
        else:
            self.queue.done(pod)
            del self.live[key]

    @rule(event=st.sampled_from(["PodDeleted", "NodeAdd"]))
    def move(self, event: str) -> None:
        self.queue.move_all_to_active_or_backoff(event)

    @rule(seconds=st.sampled_from([0.5, 1.0, 5.0, 40.0]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.queue.flush_backoff()
        self.queue.flush_unschedulable()

    @invariant()
    def pools_hold_exactly_the_live_pods(self) -> None:
        waiting = {key for key in self.live if key not in self.popped}
        assert {key for key in waiting if self.queue.where(key) in (None, "in_flight")} == set()
        assert all(self.queue.where(key) == "in_flight" for key in self.popped)
        assert len(self.queue) == len(waiting)
        assert sum(self.queue.pools().values()) == len(self.live)

    @invariant()
    def no_expired_backoff_is_left_waiting(self) -> None:
        """Every rule that moves the clock flushes backoffQ, so a pod in it has time left."""
        for key, expected in self.live.items():
            if self.queue.where(key) == "backoff":
                backoff = min(2.0 ** (expected.attempts - 1), 10.0)  # 1 s doubling, capped
                assert expected.queued_at + backoff > self.clock.now, key

    def teardown(self) -> None:
        QueueOrderMachine.rebuilds.update(self.queue.heap_rebuilds)


MODEL_SETTINGS = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_model_reaches_the_heap_rebuild() -> None:
    QueueOrderMachine.rebuilds.clear()
    run_state_machine_as_test(QueueOrderMachine, settings=MODEL_SETTINGS)
    assert QueueOrderMachine.rebuilds["active"] > 0, "no run passed the heap's stale-entry slack"
