"""Event writes: every client error is handled and logged as one structured line (no exception
escapes a write task), the queue of pending writes is bounded (drops are counted and logged),
and repeats are counted into one Event's series, written as client-go writes them."""

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
        # A repeat needs no new writer: its series' writer takes the count along.
        assert rec.emit(ref("p0"), WARNING, "FailedScheduling", "Scheduling", "no room")
        assert (rec.queued, rec.dropped) == (4, 6)
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
    # A dropped event is not remembered: emitted again, it is created, not counted as a repeat.
    assert rec.emit(ref("p5"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    assert rec.written == 6
    assert "series" not in events.bodies[-1] and events.patches == []


def advance(rec: EventRecorder, seconds: float) -> None:
    cast(FakeClock, rec.clock).now += seconds


async def test_repeats_make_one_event_whose_series_is_written_at_the_first_repeat_and_end() -> None:
    events = FakeEventsV1()
    rec = recorder(events)
    for _ in range(5):
        assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        advance(rec, 30)
        await rec.drain(timeout=30)
    [created] = events.bodies
    assert "series" not in created
    name = created["metadata"]["name"]
    # Created, then the first repeat (count 2) patched at once; repeats 3-5 only counted.
    assert events.calls == [f"create {name}", f"patch {name}"]
    [(_, patch, content_type)] = events.patches
    assert set(patch) == {"series"} and patch["series"]["count"] == 2
    assert content_type == "application/merge-patch+json"
    advance(rec, 330)  # the last occurrence was 30 s before: 6 minutes ago exactly
    assert rec.write_due() == 0
    advance(rec, 1)
    assert rec.write_due() == 1  # the series ended: its final count
    await rec.drain(timeout=30)
    assert events.counts() == [2, 5]
    assert events.patches[-1][0] == name
    assert len(rec.series) == 0
    assert rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    assert len(events.bodies) == 2  # after its end a repeat is a new Event
    assert events.bodies[1]["metadata"]["name"] != name
    assert rec.written == 4


async def test_another_note_is_another_event() -> None:
    events = FakeEventsV1()
    rec = recorder(events)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "other message")
    rec.emit(ref("b"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    assert [b["note"] for b in events.bodies] == ["no room", "other message", "no room"]
    assert events.patches == []


async def test_a_long_series_is_refreshed_every_refresh_period() -> None:
    events = FakeEventsV1()
    rec = recorder(events, series_refresh=100.0, series_window=1000.0)
    for _ in range(2):
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        await rec.drain(timeout=30)
    for _ in range(3):
        advance(rec, 50)
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        rec.write_due()
        await rec.drain(timeout=30)
    # Count 2 at the first repeat; 100 s later, the count then (4); the last one not yet due.
    assert events.counts() == [2, 4]


async def test_a_repeat_while_the_create_is_in_flight_follows_it_as_a_patch() -> None:
    events = FakeEventsV1(gate=asyncio.Event())
    rec = recorder(events)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await asyncio.sleep(0)  # the create is sent; the API server has not answered
    assert events.calls
    for _ in range(2):
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    assert rec.queued == 1  # one writer per series
    assert events.gate is not None
    events.gate.set()
    await rec.drain(timeout=30)
    name = events.bodies[0]["metadata"]["name"]
    assert events.calls == [f"create {name}", f"patch {name}"]
    assert "series" not in events.bodies[0]
    assert events.counts() == [3]


async def test_an_expired_event_is_created_again_with_its_series() -> None:
    events = FakeEventsV1(patch_outcomes=[(404, "events.events.k8s.io not found")])
    rec = recorder(events)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=30)
    first, again = events.bodies
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert again["series"]["count"] == 2
    assert rec.failed == 0


async def test_a_create_whose_answer_was_lost_is_followed_by_a_patch() -> None:
    """The create's answer never came (it may have landed); the repeat's create is refused as
    existing, so the count goes out as a PATCH."""
    events = FakeEventsV1(outcomes=[aiohttp.ServerDisconnectedError(), (409, "already exists")])
    rec = recorder(events)
    with capture_logs() as logs:
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        await rec.drain(timeout=30)
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        await rec.drain(timeout=30)
    name = events.bodies[0]["metadata"]["name"]
    assert events.calls == [f"create {name}", f"create {name}", f"patch {name}"]
    assert events.counts() == [2]
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["event_write_failed"]


async def test_a_failed_series_write_is_tried_again_at_the_end_of_the_series() -> None:
    events = FakeEventsV1(patch_outcomes=[503])
    rec = recorder(events)
    for _ in range(3):
        rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
        await rec.drain(timeout=30)
    assert rec.failed == 1
    advance(rec, 361)
    rec.write_due()
    await rec.drain(timeout=30)
    assert events.counts() == [2, 3]


async def test_drain_cancels_writes_that_do_not_finish() -> None:
    events = FakeEventsV1(gate=asyncio.Event())
    rec = recorder(events)
    rec.emit(ref("a"), WARNING, "FailedScheduling", "Scheduling", "no room")
    await rec.drain(timeout=0)
    assert rec.queued == 0
    assert rec.written == 0
