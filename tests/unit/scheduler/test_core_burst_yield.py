"""The scheduling loop yields to the event loop between two cycles: in a burst (pods queued one
after the other, so `SchedulingQueue.pop` never suspends) the binding tasks of the first pods
send their Bindings before the last pods' cycles run, instead of waiting for the whole burst
(their writes have timeouts counted from when they start)."""

from __future__ import annotations

import asyncio

from scheduler.core.cycle import Scheduler
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import harness

PODS = 20


class CountingCycles:
    """Wraps `Scheduler.schedule_one` to note how many Bindings were sent before each cycle."""

    def __init__(self, scheduler: Scheduler, sent: list[object]) -> None:
        self.scheduler = scheduler
        self.sent = sent
        self.seen: list[int] = []
        self.inner = scheduler.schedule_one

    def __call__(self, queued: object) -> None:
        self.seen.append(len(self.sent))
        self.inner(queued)  # type: ignore[arg-type]


async def test_bindings_go_out_between_the_cycles_of_a_burst() -> None:
    h = harness(cluster(*(make_node(f"n{i}", gpus=8) for i in range(PODS))))
    for index in range(PODS):
        h.add(pod_info(f"p{index}", gpus=1))
    counting = CountingCycles(h.scheduler, h.core.bindings)
    h.scheduler.schedule_one = counting  # type: ignore[method-assign]
    loop = asyncio.create_task(h.scheduler.run())
    try:
        for _ in range(1000):
            if len(counting.seen) == PODS:
                break
            await asyncio.sleep(0)
    finally:
        h.queue.close()
        await asyncio.wait([loop], timeout=5)
        await h.settle()
    assert len(counting.seen) == PODS
    # Before the last cycle most of the earlier pods' Bindings were sent already.
    assert counting.seen[-1] >= PODS // 2
    assert len(h.core.bindings) == PODS
