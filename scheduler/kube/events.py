"""Kubernetes Events about pods and nodes, written the way kube-scheduler writes them.

Events go to events.k8s.io/v1 with `reportingController` set to the scheduler's name, so
`kubectl describe pod` and `kubectl get events` show them next to kube-scheduler's. Writing an
event never blocks a scheduling cycle: `EventRecorder.emit` queues a background write. At most
`max_in_flight` writes talk to the API server at once and at most `max_queued` wait or run
(`RecorderOptions`);
beyond that an event is dropped, counted in `dropped` and logged (once per burst of drops, with
the count when writing resumes), as client-go's broadcaster drops events when its channel is
full. A failed write (an HTTP error, or no answer: the client's errors of every kind) is logged
as one JSON line and dropped; nothing reaches stderr as a traceback. Repeats of the same reason
and message about the same object within `repeat_interval` seconds are suppressed, so a pod that
stays unschedulable does not flood the API server with identical FailedScheduling events.
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

from scheduler.kube.apierrors import APIError, api_call, expect_success
from scheduler.kube.tasks import TaskSet

log = structlog.get_logger("gpu-scheduler.kube.events")

NORMAL = "Normal"
WARNING = "Warning"
MAX_NOTE_BYTES = 1024
DEFAULT_REPEAT_INTERVAL_S = 60.0
DEFAULT_MAX_QUEUED = 1000
MAX_REMEMBERED = 10_000
"""Repeat-suppression entries kept; beyond it those older than `repeat_interval` are pruned."""


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
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
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
    """How an `EventRecorder` writes: repeat suppression, concurrency, queue bound, timeout.
    The defaults are the daemon's."""

    repeat_interval: float = DEFAULT_REPEAT_INTERVAL_S
    """Seconds within which an event repeating one already written (same object, reason and
    note) is suppressed."""
    max_in_flight: int = 32
    """Writes talking to the API server at once."""
    max_queued: int = DEFAULT_MAX_QUEUED
    """Writes waiting or running; beyond it an event is dropped. At least `max_in_flight`
    (`ValueError` otherwise)."""
    write_timeout: float = 10.0
    """Seconds allowed for one write."""

    def __post_init__(self) -> None:
        if self.max_queued < self.max_in_flight:
            raise ValueError("max_queued must be at least max_in_flight")


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
        (monotonic seconds) times the repeat suppression."""
        self.api = client.EventsV1Api(api_client)
        self.controller = controller
        self.instance = instance
        self.repeat_interval = options.repeat_interval
        self.clock = clock
        self.write_timeout = options.write_timeout
        self._slots = asyncio.Semaphore(options.max_in_flight)
        self._last: dict[tuple[str, str, str, str], float] = {}
        self._tasks = TaskSet("event-write", limit=options.max_queued)
        self._dropped_in_burst = 0
        self.written = 0
        self.failed = 0
        self.dropped = 0

    @property
    def queued(self) -> int:
        """Writes waiting or running."""
        return len(self._tasks)

    def emit(self, ref: ObjectRef, type_: str, reason: str, action: str, note: str) -> bool:
        """Queue an event; False when it repeats one written less than repeat_interval ago, or
        when `max_queued` writes are pending (the event is dropped and counted)."""
        key = (ref.namespace, ref.name, reason, note)
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_interval:
            return False
        if self._tasks.full:
            self._drop(ref, reason)
            return False
        body = event_body(
            ref, type_, reason, action, note, self.controller, self.instance, datetime.now(UTC)
        )
        if self._tasks.spawn(self._write(body), name=f"{reason}:{ref.name}") is None:
            self._drop(ref, reason)
            return False
        self._remember(key, now)
        if self._dropped_in_burst:
            log.warning("event_writes_resumed", dropped=self._dropped_in_burst)
            self._dropped_in_burst = 0
        return True

    def _remember(self, key: tuple[str, str, str, str], now: float) -> None:
        self._last[key] = now
        if len(self._last) > MAX_REMEMBERED:
            horizon = now - self.repeat_interval
            self._last = {k: t for k, t in self._last.items() if t >= horizon}
            if len(self._last) > MAX_REMEMBERED:  # all recent: keep the newest half
                newest = sorted(self._last.items(), key=lambda item: item[1])
                self._last = dict(newest[len(newest) // 2 :])

    def _drop(self, ref: ObjectRef, reason: str) -> None:
        self.dropped += 1
        self._dropped_in_burst += 1
        if self._dropped_in_burst == 1:
            log.warning(
                "event_dropped",
                reason=reason,
                object=f"{ref.kind} {ref.namespace}/{ref.name}".replace(" /", " "),
                detail=f"{self.queued} event writes pending; dropping until some finish",
            )

    async def _write(self, body: dict[str, Any]) -> None:
        async with self._slots:
            try:
                what = f"event {body['reason']} about {body['regarding'].get('name', '')}"
                async with api_call(what):
                    response = await self.api.create_namespaced_event(
                        body["metadata"]["namespace"],
                        cast(Any, body),
                        _preload_content=False,
                        _request_timeout=self.write_timeout,
                    )
                await expect_success(response, what)
                self.written += 1
            except APIError as error:
                self.failed += 1
                log.warning(
                    "event_write_failed",
                    reason=body["reason"],
                    regarding=body["regarding"].get("name", ""),
                    status=error.status,
                    error=str(error),
                )

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (up to `timeout` seconds) for queued writes, e.g. before shutting down; writes
        still pending then are cancelled."""
        await self._tasks.close(timeout)
