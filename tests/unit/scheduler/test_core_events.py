"""Event writes: every client error is handled and logged as one structured line (no exception
escapes a write task), the queue of pending writes is bounded (drops are counted and logged),
and repeats are still suppressed."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import aiohttp
import pytest
from structlog.testing import capture_logs

from scheduler.kube.events import WARNING, EventRecorder, ObjectRef, RecorderOptions
from tests.unit.scheduler.core_api_double import NO_CLIENT, FakeClock, FakeEventsV1


def recorder(events: FakeEventsV1, **kwargs: Any) -> EventRecorder:
    made = EventRecorder(NO_CLIENT, "gpu-scheduler", "test", RecorderOptions(**kwargs), FakeClock())
    made.api = cast(Any, events)
    return made


def ref(name: str) -> ObjectRef:
    return ObjectRef("Pod", name, "default", f"uid-{name}")


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(aiohttp.ServerDisconnectedError(), id="server-disconnected"),
        pytest.param(aiohttp.ClientConnectionError("reset"), id="client-connection"),
        pytest.param(aiohttp.ClientPayloadError("cut"), id="payload"),
        pytest.param(TimeoutError(), id="timeout"),
        pytest.param(ConnectionRefusedError(111, "refused"), id="refused"),
        pytest.param(503, id="http-503"),
    ],
)
async def test_failed_event_write_is_logged_not_raised(failure: Any) -> None:
    events = FakeEventsV1(outcomes=[failure])
    rec = recorder(events)
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        with capture_logs() as logs:
            assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
            await rec.drain(timeout=30)
    finally:
        loop.set_exception_handler(previous)
    assert rec.written == 0
    [entry] = [e for e in logs if e["event"] == "event_write_failed"]
    assert entry["log_level"] == "warning"
    assert entry["reason"] == "FailedScheduling"
    assert entry["status"] == (failure if isinstance(failure, int) else 0)
    assert not [e for e in logs if e["event"] == "background_task_failed"]
    assert not unhandled


async def test_pending_writes_are_bounded_and_drops_counted() -> None:
    events = FakeEventsV1(gate=asyncio.Event())  # the API server does not answer yet
    rec = recorder(events, max_in_flight=2, max_queued=4)
    with capture_logs() as logs:
        accepted = [
            rec.emit(ref(f"p{i}"), WARNING, "FailedScheduling", "Scheduling", "no room")
            for i in range(10)
        ]
        assert accepted == [True] * 4 + [False] * 6
        assert rec.queued == 4
        assert rec.dropped == 6
        assert events.gate is not None
        events.gate.set()
        await rec.drain(timeout=30)
        assert rec.written == 4
        assert rec.emit(ref("later"), WARNING, "FailedScheduling", "Scheduling", "no room")
        await rec.drain(timeout=30)
    dropped = [e for e in logs if e["event"] == "event_dropped"]
    assert len(dropped) == 1  # one line per burst, not one per event
    assert dropped[0]["object"] == "Pod default/p4"
    [resumed] = [e for e in logs if e["event"] == "event_writes_resumed"]
    assert resumed["dropped"] == 6
    # A dropped event is not remembered as written: emitted again, it goes out.
    assert rec.emit(ref("p5"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    assert rec.written == 6


async def test_repeats_are_still_suppressed() -> None:
    events = FakeEventsV1()
    rec = recorder(events, repeat_interval=60.0)
    assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    assert not rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "other message")
    cast(FakeClock, rec.clock).now += 61
    assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    assert rec.written == 3


async def test_drain_cancels_writes_that_do_not_finish() -> None:
    events = FakeEventsV1(gate=asyncio.Event())
    rec = recorder(events)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=0)
    assert rec.queued == 0
    assert rec.written == 0
