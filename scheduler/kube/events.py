"""Kubernetes Events about pods and nodes, written the way kube-scheduler writes them.

Events go to events.k8s.io/v1 with `reportingController` set to the scheduler's name, so
`kubectl describe pod` and `kubectl get events` show them next to kube-scheduler's. Writing an
event never blocks a scheduling cycle: `EventRecorder.emit` counts it and, when it must be
written, queues a background write.

Repeats are counted into one Event's `series` as client-go's events.k8s.io/v1 broadcaster does
(rules in `scheduler.kube.event_series`): a pod that stays unschedulable has one FailedScheduling
Event whose `series.count` grows (kubectl shows "(x5 over 3m)"), not a new Event per attempt. Each
series has at most one write in flight; a write asked for meanwhile follows it with the newest
count. `run()` ends the series that stopped repeating and refreshes long ones.

At most `max_in_flight` writes talk to the API server at once and at most `max_queued` wait or
run (`RecorderOptions`); beyond that a write is dropped, counted in `dropped` and logged (once per
burst of drops, with the count when writing resumes), as client-go's broadcaster drops events when
its channel is full. A failed write (an HTTP error, or no answer: the client's errors of every
kind, the write fence's refusal included) is logged as one JSON line; nothing reaches stderr as a
traceback. A series whose write failed is written again at its next refresh or at its end.
Writes go through the daemon's API client, so the write fence guards every one (DESIGN.md,
"Writes and leadership"); counts observed but not written when the daemon stops are lost, as in
client-go.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import structlog
from kubernetes_asyncio import client

from scheduler.kube.apierrors import (
    APIConflictError,
    APIError,
    APINotFoundError,
    api_call,
    expect_success,
)
from scheduler.kube.event_series import (
    FINISH_SECONDS,
    MAX_SERIES,
    MICRO_TIME,
    REFRESH_SECONDS,
    Series,
    SeriesBook,
    SeriesKey,
)
from scheduler.kube.tasks import TaskSet

log = structlog.get_logger("gpu-scheduler.kube.events")

NORMAL = "Normal"
WARNING = "Warning"
MAX_NOTE_BYTES = 1024
DEFAULT_MAX_QUEUED = 1000
MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
"""The generated client accepts `_content_type`; its type stubs do not list it."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    def as_dict(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


def event_body(
    ref: ObjectRef,
    type_: str,
    reason: str,
    action: str,
    note: str,
    controller: str,
    instance: str,
    now: datetime,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event (note truncated to the API's 1 KiB limit)."""
    encoded = note.encode()
    if len(encoded) > MAX_NOTE_BYTES:
        note = encoded[: MAX_NOTE_BYTES - 3].decode(errors="ignore") + "..."
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref.name}.{uuid.uuid4().hex[:16]}",
            "namespace": ref.namespace or "default",
        },
        "eventTime": now.strftime(MICRO_TIME),
        "reportingController": controller,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "regarding": ref.as_dict(),
        "note": note,
        "type": type_,
    }


@dataclass(frozen=True)
class RecorderOptions:
    """How an `EventRecorder` writes: series, concurrency, queue bound, timeout. The defaults
    are the daemon's (the series' are client-go's)."""

    series_window: float = FINISH_SECONDS
    """Seconds after its last occurrence a series ends (its final count written)."""
    series_refresh: float = REFRESH_SECONDS
    """Seconds between writes of a live series' count."""
    series_tick: float = 5.0
    """Seconds between `run()`'s looks for ended and stale series."""
    max_series: int = MAX_SERIES
    """Series kept in memory."""
    max_in_flight: int = 32
    """Writes talking to the API server at once."""
    max_queued: int = DEFAULT_MAX_QUEUED
    """Writes waiting or running; beyond it a write is dropped. At least `max_in_flight`
    (`ValueError` otherwise)."""
    write_timeout: float = 10.0
    """Seconds allowed for one write."""

    def __post_init__(self) -> None:
        if self.max_queued < self.max_in_flight:
            raise ValueError("max_queued must be at least max_in_flight")
        if self.series_tick <= 0:
            raise ValueError("series_tick must be positive")


class EventRecorder:
    """Writes events in the background; see the module docstring."""

    def __init__(
        self,
        api_client: client.ApiClient,
        controller: str,
        instance: str,
        options: RecorderOptions = RecorderOptions(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Events about objects, reported by `controller` (the scheduler's name) from
        `instance` (this replica), written through `api_client` as `options` say; `clock`
        (monotonic seconds) times the series."""
        self.api = client.EventsV1Api(api_client)
        self.controller = controller
        self.instance = instance
        self.clock = clock
        self.write_timeout = options.write_timeout
        self.tick = options.series_tick
        self.series = SeriesBook(options.series_window, options.series_refresh, options.max_series)
        self._slots = asyncio.Semaphore(options.max_in_flight)
        self._tasks = TaskSet("event-write", limit=options.max_queued)
        self._dropped_in_burst = 0
        self.written = 0
        """Writes the API server accepted (creates and series patches)."""
        self.failed = 0
        self.dropped = 0

    @property
    def queued(self) -> int:
        """Writes waiting or running."""
        return len(self._tasks)

    def emit(self, ref: ObjectRef, type_: str, reason: str, action: str, note: str) -> bool:
        """Record one occurrence: a new Event is queued for writing, a repeat of one seen within
        the series window is counted into its series (written now if it is the first repeat).
        False when the occurrence's write was dropped because `max_queued` writes are
        pending."""
        key = SeriesKey(ref, type_, reason, action, note)
        wall = datetime.now(UTC)

        def body() -> dict[str, Any]:
            return event_body(
                ref, type_, reason, action, note, self.controller, self.instance, wall
            )

        writes = self.series.observe(key, self.clock(), wall, body)
        own = self.series.get(key)
        recorded = True
        for series in writes:
            if not self._request(series) and series is own:
                recorded = False
        return recorded

    def write_due(self) -> int:
        """Write the series that ended or are due a refresh now; returns how many were asked
        for."""
        due = self.series.due(self.clock())
        for series in due:
            self._request(series)
        return len(due)

    async def run(self) -> None:
        """Forever: every `tick` seconds, `write_due()`."""
        while True:
            await asyncio.sleep(self.tick)
            self.write_due()

    def _request(self, series: Series) -> bool:
        """Have `series` written with its newest count: by its running writer, or a new one.
        False when no writer could be queued (dropped; a new series is then forgotten, so its
        next occurrence is written afresh)."""
        if series.writing:
            series.again = True
            return True
        writer = self._tasks.spawn(self._sync(series), name=f"{series.key.reason}:{_name(series)}")
        if writer is None:
            self._drop(series)
            return False
        series.writing = True
        if self._dropped_in_burst:
            log.warning("event_writes_resumed", dropped=self._dropped_in_burst)
            self._dropped_in_burst = 0
        return True

    def _drop(self, series: Series) -> None:
        if not series.created:
            self.series.forget(series)
        self.dropped += 1
        self._dropped_in_burst += 1
        if self._dropped_in_burst == 1:
            regarding = series.body["regarding"]
            where = f"{regarding.get('namespace', '')}/{regarding['name']}".lstrip("/")
            log.warning(
                "event_dropped",
                reason=series.key.reason,
                object=f"{regarding['kind']} {where}",
                detail=f"{self.queued} event writes pending; dropping until some finish",
            )

    async def _sync(self, series: Series) -> None:
        """The one writer of `series`: write, and again while more was asked for meanwhile."""
        try:
            async with self._slots:
                series.again = True
                while series.again:
                    series.again = False
                    await self._write(series)
        finally:
            series.writing = False

    async def _write(self, series: Series) -> None:
        """One write of `series` as now counted: a PATCH of `series` once the Event exists, else
        (or when the PATCH finds it gone) a create; a create refused as existing means an
        earlier create landed unseen, so the count follows as a PATCH."""
        series.attempted_at = self.clock()
        count = series.count
        try:
            if series.created:
                try:
                    await self._patch(series)
                    self._accepted(series, count)
                    return
                except APINotFoundError:
                    series.created = False  # expired or deleted: created again, with its series
            try:
                await self._create(series)
            except APIConflictError:
                series.created = True
                series.again = series.count >= 2
                return
            self._accepted(series, count)
        except APIError as error:
            self.failed += 1
            log.warning(
                "event_write_failed",
                reason=series.key.reason,
                regarding=_name(series),
                count=count,
                status=error.status,
                error=str(error),
            )

    def _accepted(self, series: Series, count: int) -> None:
        series.created = True
        series.written = count
        self.written += 1

    async def _create(self, series: Series) -> None:
        body = dict(series.body)
        if series.count >= 2:
            body["series"] = series.series_field()
        what = f"event {series.key.reason} about {_name(series)}"
        async with api_call(what):
            response = await self.api.create_namespaced_event(
                body["metadata"]["namespace"],
                cast(Any, body),
                _preload_content=False,
                _request_timeout=self.write_timeout,
            )
        await expect_success(response, what)

    async def _patch(self, series: Series) -> None:
        metadata = series.body["metadata"]
        what = f"event series {series.key.reason} about {_name(series)}"
        async with api_call(what):
            response = await self.api.patch_namespaced_event(
                metadata["name"],
                metadata["namespace"],
                {"series": series.series_field()},
                _preload_content=False,
                _request_timeout=self.write_timeout,
                **MERGE_PATCH,
            )
        await expect_success(response, what)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (up to `timeout` seconds) for queued writes, e.g. before shutting down; writes
        still pending then are cancelled."""
        await self._tasks.close(timeout)


def _name(series: Series) -> str:
    """The name of the object `series` is about."""
    return str(series.body["regarding"].get("name", ""))
