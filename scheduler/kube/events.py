"""Kubernetes Events about pods and nodes, written the way kube-scheduler writes them.

Events go to events.k8s.io/v1 with `reportingController` set to the scheduler's name, so
`kubectl describe pod` and `kubectl get events` show them next to kube-scheduler's. Writing an
event never blocks a scheduling cycle: `EventRecorder.emit` queues a background write (bounded
by `max_in_flight`); a failed write is logged and dropped. Repeats of the same reason and message
about the same object within `repeat_interval` seconds are suppressed, so a pod that stays
unschedulable does not flood the API server with identical FailedScheduling events.
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

from scheduler.kube.apierrors import APIError, expect_success

log = structlog.get_logger("gpu-scheduler.kube.events")

NORMAL = "Normal"
WARNING = "Warning"
MAX_NOTE_BYTES = 1024
DEFAULT_REPEAT_INTERVAL_S = 60.0


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


class EventRecorder:
    """Writes events in the background; see the module docstring."""

    def __init__(
        self,
        api_client: client.ApiClient,
        controller: str,
        instance: str,
        repeat_interval: float = DEFAULT_REPEAT_INTERVAL_S,
        max_in_flight: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = client.EventsV1Api(api_client)
        self.controller = controller
        self.instance = instance
        self.repeat_interval = repeat_interval
        self.clock = clock
        self._slots = asyncio.Semaphore(max_in_flight)
        self._last: dict[tuple[str, str, str, str], float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.written = 0

    def emit(self, ref: ObjectRef, type_: str, reason: str, action: str, note: str) -> bool:
        """Queue an event; False when it repeats one written less than repeat_interval ago."""
        key = (ref.namespace, ref.name, reason, note)
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.repeat_interval:
            return False
        self._last[key] = now
        if len(self._last) > 10_000:
            horizon = now - self.repeat_interval
            self._last = {k: t for k, t in self._last.items() if t >= horizon}
        body = event_body(
            ref, type_, reason, action, note, self.controller, self.instance, datetime.now(UTC)
        )
        task = asyncio.get_running_loop().create_task(self._write(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _write(self, body: dict[str, Any]) -> None:
        async with self._slots:
            try:
                response = await self.api.create_namespaced_event(
                    body["metadata"]["namespace"], cast(Any, body), _preload_content=False
                )
                await expect_success(response)
                self.written += 1
            except (APIError, OSError, TimeoutError) as error:
                log.warning("event_write_failed", reason=body["reason"], error=str(error))

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (up to `timeout` seconds) for queued writes, e.g. before shutting down."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
