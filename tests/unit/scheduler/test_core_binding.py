"""The binding cycle against an in-memory API: after any failure of the Binding call (an HTTP
error, a lost connection that aiohttp reports without an OSError, a bug, cancellation) the pod is
no longer assumed, its GPUs are free, and the queue hands it out again after its backoff."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiException
from structlog.testing import capture_logs

from scheduler.kube.apierrors import (
    APIAlreadyAssignedError,
    APIConflictError,
    APIError,
    APINotFoundError,
    APIPreconditionFailedError,
    APITooManyRequestsError,
    APITransportError,
    api_call,
    api_error,
    expect_success,
)
from scheduler.kube.binding import bind_pod
from scheduler.kube.tasks import TaskSet
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import FakeCoreV1, FakeResponse, Harness, harness

KEY = "default/train"


def one_node() -> Harness:
    return harness(cluster(make_node("n", gpus=8)))


def gpus_used(h: Harness) -> int:
    return int(h.cache.node_gpus_used("n").sum())


FAILURES: list[Any] = [
    pytest.param(aiohttp.ServerDisconnectedError(), id="server-disconnected"),
    pytest.param(aiohttp.ClientPayloadError("truncated"), id="payload-error"),
    pytest.param(TimeoutError(), id="timeout"),
    pytest.param(ConnectionResetError(104, "reset"), id="connection-reset"),
    pytest.param(RuntimeError("a bug below the adapter"), id="unexpected-exception"),
    pytest.param(500, id="http-500"),
    pytest.param((409, "Precondition failed: UID in precondition: x"), id="http-409-uid"),
    pytest.param(429, id="http-429"),
]


@pytest.mark.parametrize("failure", FAILURES)
async def test_failed_bind_forgets_the_pod_and_requeues_it(failure: Any) -> None:
    h = one_node()
    h.core.bind_outcomes.append(failure)
    h.add(pod_info("train", gpus=4))

    with capture_logs() as logs:
        await h.cycle()

    assert not h.cache.is_assumed(KEY)
    assert KEY not in h.cache.pods
    assert gpus_used(h) == 0
    assert h.queue.where(KEY) == "backoff"
    assert h.queue.pop_nowait() is None  # still backing off
    assert [e["event"] for e in logs if e["event"] == "bind_failed"] == ["bind_failed"]
    assert not [e for e in logs if e["event"] == "background_task_failed"]
    assert [b["reason"] for b in h.events.bodies] == ["FailedScheduling"]

    h.after_backoff(attempts=1)
    assert await h.cycle() == KEY  # handed out again, and this time bound
    assert len(h.core.bindings) == 2
    assert h.cache.is_assumed(KEY)  # bound, waiting for the informer
    assert gpus_used(h) == 4
    assert h.queue.where(KEY) is None


@pytest.mark.parametrize(
    ("failure", "event"),
    [
        pytest.param((404, 'pods "train" not found'), "gone", id="pod-deleted"),
        pytest.param(
            (409, 'pod train is already assigned to node "m"'),
            "already_assigned",
            id="bound-elsewhere",
        ),
    ],
)
async def test_bind_of_a_gone_or_bound_pod_forgets_it_without_retry(
    failure: Any, event: str
) -> None:
    h = one_node()
    h.core.bind_outcomes.append(failure)
    h.add(pod_info("train", gpus=2))
    with capture_logs() as logs:
        await h.cycle()
    assert KEY not in h.cache.pods
    assert gpus_used(h) == 0
    assert h.queue.where(KEY) is None
    [failed] = [e for e in logs if e["event"] == "bind_failed"]
    assert failed[event] is True


async def test_cancelled_bind_forgets_and_requeues() -> None:
    h = one_node()
    h.core.bind_gate = asyncio.Event()  # the Binding call never answers
    h.add(pod_info("train", gpus=1))
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)
    for _ in range(100):
        if h.core.bindings:
            break
        await asyncio.sleep(0)
    assert h.core.bindings, "the bind task did not start"
    assert h.cache.is_assumed(KEY)

    await h.scheduler.finish_binds(timeout=0)  # leadership lost or shutting down

    assert KEY not in h.cache.pods
    assert gpus_used(h) == 0
    assert h.queue.where(KEY) == "backoff"
    await h.settle()


async def test_bind_losing_leadership_before_the_call_requeues() -> None:
    h = one_node()
    leader = [True]
    h.scheduler.is_leader = lambda: leader[0]
    h.add(pod_info("train", gpus=1))
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)
    leader[0] = False
    await h.settle()
    assert not h.core.bindings
    assert KEY not in h.cache.pods
    assert h.queue.where(KEY) == "backoff"


async def test_bind_pod_turns_client_errors_into_typed_transport_errors() -> None:
    core = FakeCoreV1(bind_outcomes=[aiohttp.ServerDisconnectedError()])
    with pytest.raises(APITransportError) as caught:
        await bind_pod(core, "default", "train", "uid-train", "n", {}, timeout=5)  # type: ignore[arg-type]
    assert caught.value.status == 0
    assert caught.value.transport
    assert "binding default/train" in str(caught.value)
    assert "ServerDisconnectedError" in str(caught.value)


# -- typed API errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (0, "connection refused", APITransportError),
        (404, 'pods "a" not found', APINotFoundError),
        (409, 'pod a is already assigned to node "n"', APIAlreadyAssignedError),
        (409, "Precondition failed: UID in precondition", APIPreconditionFailedError),
        (409, "the object has been modified", APIConflictError),
        (
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.",
            APITooManyRequestsError,
        ),
        (500, "etcdserver: request timed out", APIError),
    ],
)
def test_api_errors_are_classified_by_type(status: int, message: str, kind: type) -> None:
    error = api_error(status, message)
    assert type(error) is kind
    assert error.status == status
    assert error.transport == (status == 0)
    assert error.not_found == (status == 404)
    assert error.conflict == (status == 409)
    assert error.already_assigned == (kind is APIAlreadyAssignedError)
    assert error.too_many_requests == (status == 429)


async def test_expect_success_raises_the_typed_error_and_releases() -> None:
    response = FakeResponse(409, 'pod a is already assigned to node "n"')
    with pytest.raises(APIAlreadyAssignedError) as caught:
        await expect_success(response)
    assert caught.value.reason == "Conflict"
    assert response.released


@pytest.mark.parametrize(
    "raised",
    [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientConnectionError("connection lost"),
        TimeoutError(),
        OSError(113, "no route to host"),
    ],
    ids=["server-disconnected", "connection", "timeout", "oserror"],
)
async def test_api_call_turns_every_client_error_into_status_0(raised: BaseException) -> None:
    with pytest.raises(APITransportError) as caught:
        async with api_call("reading a thing"):
            raise raised
    assert caught.value.status == 0
    assert str(caught.value).startswith("reading a thing: ")


async def test_a_timeout_says_what_happened() -> None:
    """A timeout has no text of its own; the message must not end in an empty "TimeoutError: "."""
    with pytest.raises(APITransportError) as caught:
        async with api_call("PodScheduled condition of default/a"):
            raise TimeoutError
    assert str(caught.value).endswith("TimeoutError: no answer within the timeout")


async def test_api_call_types_the_generated_clients_exceptions() -> None:
    error = ApiException(status=404, reason="Not Found")
    error.body = b'{"kind": "Status", "message": "pods \\"a\\" not found", "reason": "NotFound"}'
    with pytest.raises(APINotFoundError) as caught:
        async with api_call("reading a thing"):
            raise error
    assert caught.value.message == 'pods "a" not found'


def test_long_api_messages_are_truncated() -> None:
    error = api_error(500, "x" * 50_000)
    assert len(error.message) <= 1000
    assert error.message.endswith("...")


# -- the task guard -----------------------------------------------------------------------------


async def test_task_set_logs_a_failing_task_and_forgets_it() -> None:
    tasks = TaskSet("test")

    async def boom() -> None:
        raise aiohttp.ServerDisconnectedError()

    with capture_logs() as logs:
        task = tasks.spawn(boom(), name="boom")
        assert task is not None
        await tasks.close(timeout=5)
    assert len(tasks) == 0
    assert tasks.failed == 1
    [entry] = [e for e in logs if e["event"] == "background_task_failed"]
    assert entry["task"] == "test:boom"
    assert "ServerDisconnectedError" in entry["error"]
    assert entry["log_level"] == "error"


async def test_task_set_with_a_limit_refuses_when_full() -> None:
    tasks = TaskSet("test", limit=2)
    gate = asyncio.Event()
    assert tasks.spawn(gate.wait(), name="a") is not None
    assert tasks.spawn(gate.wait(), name="b") is not None
    assert tasks.spawn(gate.wait(), name="c") is None
    assert tasks.refused == 1
    gate.set()
    await tasks.close(timeout=5)
    assert len(tasks) == 0


class CutWhileReading(FakeResponse):
    async def read(self) -> bytes:
        raise aiohttp.ClientPayloadError("Response payload is not completed")


async def test_connection_lost_while_reading_the_answer_is_a_transport_error() -> None:
    response = CutWhileReading(201)
    with pytest.raises(APITransportError) as caught:
        await expect_success(response, "binding default/a")
    assert str(caught.value).startswith("binding default/a: ClientPayloadError")
    assert response.released
