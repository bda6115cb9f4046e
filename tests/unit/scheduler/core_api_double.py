"""A small in-memory stand-in for the API calls of the scheduling core, and a `Scheduler` wired to
it with a fake clock, for fast unit tests of binding, conditions and events.

`FakeCoreV1` and `FakeEventsV1` answer like the generated kubernetes_asyncio methods called with
`_preload_content=False`: they return a raw response (status + body) and never raise for an HTTP
error. Each call takes the next scripted outcome of its list (an HTTP status, a status with a
message, a `FakeResponse` as it is, e.g. a 429 with a Retry-After header, or an exception to
raise, e.g. `aiohttp.ServerDisconnectedError()`); with the list empty it succeeds. A `gate`
(an asyncio.Event) makes calls wait until it is set.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, cast

from scheduler.config import BindingConfig, LeaderElectionConfig, SchedulerConfig
from scheduler.core.cycle import Scheduler
from scheduler.core.profile import default_framework
from scheduler.core.queue import SchedulingQueue
from scheduler.kube.events import EventRecorder
from scheduler.kube.rate_limit import BindRateLimiter
from scheduler.model.objects import PodInfo
from scheduler.state.cache import ClusterCache
from scheduler.state.context import SchedulerContext
from tests.unit.scheduler.context import make_context

NO_CLIENT: Any = object()
"""Stands in for the ApiClient the generated API classes keep (never used by the fakes)."""


class FakeResponse:
    """A raw aiohttp-like response: `status`, `headers`, `read()`, `release()`."""

    def __init__(
        self, status: int, message: str = "", headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.headers = dict(headers or {})
        body: dict[str, Any] = {"kind": "Status", "code": status}
        if message:
            body["message"] = message
            body["reason"] = {404: "NotFound", 409: "Conflict", 429: "TooManyRequests"}.get(
                status, "InternalError"
            )
        self._body = json.dumps(body).encode()
        self.released = False

    @classmethod
    def json(cls, status: int, body: dict[str, Any]) -> FakeResponse:
        response = cls(status)
        response._body = json.dumps(body).encode()
        return response

    @classmethod
    def plain(cls, status: int, text: str, headers: dict[str, str] | None = None) -> FakeResponse:
        """A body that is not a Status, as the API server's 429 from priority and fairness."""
        response = cls(status, headers=headers)
        response._body = text.encode()
        return response

    def with_headers(self, headers: dict[str, str]) -> FakeResponse:
        self.headers.update(headers)
        return self

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        self.released = True


Outcome = int | tuple[int, str] | BaseException | FakeResponse
"""201 / (409, "message") / a response as it is / an exception to raise."""


async def answer(outcomes: list[Outcome], gate: asyncio.Event | None, ok: int) -> FakeResponse:
    if gate is not None:
        await gate.wait()
    outcome: Outcome = outcomes.pop(0) if outcomes else ok
    if isinstance(outcome, BaseException):
        raise outcome
    if isinstance(outcome, FakeResponse):
        return outcome
    if isinstance(outcome, tuple):
        return FakeResponse(*outcome)
    return FakeResponse(outcome)


@dataclass
class FakeCoreV1:
    """Binding and pod status patches."""

    bind_outcomes: list[Outcome] = field(default_factory=list)
    patch_outcomes: list[Outcome] = field(default_factory=list)
    bind_gate: asyncio.Event | None = None
    patch_gate: asyncio.Event | None = None
    """When set, every status patch is recorded as sent, then waits for it."""
    bindings: list[dict[str, Any]] = field(default_factory=list)
    patches: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    read_outcomes: list[Outcome | dict[str, Any]] = field(default_factory=list)
    """Answers of pod reads: a pod object (200), or an Outcome; with the list empty, the pod
    of the last Binding, unbound (the Binding did not land)."""
    reads: int = 0
    read_gate: asyncio.Event | None = None
    """When set, pod reads wait for it (counted in `reads` once they start)."""

    async def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> FakeResponse:
        self.reads += 1
        if self.read_gate is not None:
            await self.read_gate.wait()
        outcome = self.read_outcomes.pop(0) if self.read_outcomes else None
        if isinstance(outcome, dict):
            return FakeResponse.json(200, outcome)
        if outcome is not None:
            return await answer([outcome], None, 200)
        uid = self.bindings[-1]["metadata"]["uid"] if self.bindings else ""
        return FakeResponse.json(200, {"metadata": {"name": name, "uid": uid}, "spec": {}})

    async def create_namespaced_pod_binding(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> FakeResponse:
        self.bindings.append(body)
        return await answer(self.bind_outcomes, self.bind_gate, 201)

    async def patch_namespaced_pod_status(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> FakeResponse:
        self.patches.append((namespace, name, body))
        return await answer(self.patch_outcomes, self.patch_gate, 200)

    def condition_messages(self) -> list[str]:
        return [body["status"]["conditions"][0]["message"] for _, _, body in self.patches]


@dataclass
class FakeEventsV1:
    """Event writes: creates (`bodies`) and series patches (`patches`: name, body, content
    type), in `calls` in the order they were made."""

    outcomes: list[Outcome] = field(default_factory=list)
    gate: asyncio.Event | None = None
    bodies: list[dict[str, Any]] = field(default_factory=list)
    patch_outcomes: list[Outcome] = field(default_factory=list)
    patches: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    async def create_namespaced_event(
        self, namespace: str, body: dict[str, Any], **_: Any
    ) -> FakeResponse:
        self.bodies.append(body)
        self.calls.append(f"create {body['metadata']['name']}")
        return await answer(self.outcomes, self.gate, 201)

    async def patch_namespaced_event(
        self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any
    ) -> FakeResponse:
        self.patches.append((name, body, str(kwargs.get("_content_type", ""))))
        self.calls.append(f"patch {name}")
        return await answer(self.patch_outcomes, self.gate, 200)

    def counts(self) -> list[int]:
        """The series counts patched, in order."""
        return [body["series"]["count"] for _, body, _ in self.patches]


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Let `seconds` pass at once (and other tasks run): a sleep for code that takes its
        clock and sleep from the test."""
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


@dataclass
class Harness:
    """A Scheduler on a cache, with its queue, recorder, context and fakes sharing one fake
    clock."""

    cache: ClusterCache
    clock: FakeClock
    queue: SchedulingQueue[PodInfo]
    core: FakeCoreV1
    events: FakeEventsV1
    recorder: EventRecorder
    scheduler: Scheduler
    context: SchedulerContext

    def add(self, pod: PodInfo) -> None:
        self.queue.add(pod.key, pod.priority, pod)

    async def cycle(self) -> str:
        """Pop the next pod, run its scheduling cycle and wait for its background work (bind,
        condition patch, events) to end; returns its key."""
        queued = self.queue.pop_nowait()
        assert queued is not None, "no pod is ready in the queue"
        self.scheduler.schedule_one(queued)
        await self.settle()
        return queued.key

    async def settle(self) -> None:
        await self.scheduler.finish_binds(timeout=30)
        await self.recorder.drain(timeout=30)

    def after_backoff(self, attempts: int) -> None:
        """Move the clock just past the backoff of a pod requeued now after `attempts` pops."""
        self.clock.now += self.queue.backoff_duration(attempts) + 0.001


HARNESS_SETTINGS = SchedulerConfig(
    binding=BindingConfig(concurrency=16, timeout_seconds=30.0, qps=0.0),
    leader_election=LeaderElectionConfig(enabled=False),
)
"""Binds 16 at a time, 30 s each, without a rate limit (`harness` may set one); always leads."""


def harness(
    cache: ClusterCache, backoff_initial: float = 1.0, bind_limiter: BindRateLimiter | None = None
) -> Harness:
    """A Scheduler on `cache` with fakes; its Binding calls are paced by `bind_limiter`, by
    default one without a bucket (pauses only) on the harness's clock, whose sleeps let the
    time pass at once."""
    clock = FakeClock()
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(
        clock=clock, backoff_initial=backoff_initial, backoff_max=10.0
    )
    core, events = FakeCoreV1(), FakeEventsV1()
    context = make_context(cache, settings=HARNESS_SETTINGS, clock=clock)
    context.recorder.api = cast(Any, events)
    scheduler = Scheduler(context, queue, default_framework(context.settings))
    scheduler.core = cast(Any, core)
    scheduler.bind_limiter = bind_limiter or BindRateLimiter(0.0, clock=clock, sleep=clock.sleep)
    return Harness(cache, clock, queue, core, events, context.recorder, scheduler, context)
