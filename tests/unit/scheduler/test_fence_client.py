"""The fenced API client against a raw TCP server that records every byte it receives: a refused
write sends nothing, wherever the refusal falls; reads and Lease writes are never fenced; a write's
timeout is cut to the term."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from scheduler.kube.apierrors import APINotSentError
from scheduler.kube.client import FencedApiClient, fence_of
from scheduler.kube.fence import NotLeader, WriteFence

BINDING = {
    "apiVersion": "v1",
    "kind": "Binding",
    "metadata": {"name": "p", "namespace": "ns"},
    "target": {"apiVersion": "v1", "kind": "Node", "name": "n"},
}


class Recorder:
    """An HTTP/1.1 server that answers 201 `{}` (after `delay` seconds) and keeps all it read."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.received: list[bytes] = []
        self.connections = 0
        self.handlers: set[asyncio.Task[Any]] = set()

    @property
    def bytes(self) -> int:
        return sum(len(chunk) for chunk in self.received)

    @property
    def requests(self) -> list[str]:
        """Request lines received."""
        return [c.split(b"\r\n", 1)[0].decode() for c in self.received if b"HTTP/1.1" in c]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.received.append(head + body)
                await asyncio.sleep(self.delay)
                writer.write(
                    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                await writer.drain()
        except asyncio.IncompleteReadError as partial:
            if partial.partial:
                self.received.append(partial.partial)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(recorder: Recorder) -> AsyncIterator[str]:
    server = await asyncio.start_server(recorder.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for handler in recorder.handlers:  # Python 3.11's Server.close leaves them running
            handler.cancel()
        await asyncio.gather(*recorder.handlers, return_exceptions=True)


@asynccontextmanager
async def fenced_client(host: str, fence: WriteFence) -> AsyncIterator[FencedApiClient]:
    configuration = client.Configuration(host=host)
    api = FencedApiClient(configuration, fence)
    try:
        yield api
    finally:
        await api.close()


class Readings:
    """A clock that returns `values` in turn, then the last one forever."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


def fence_with(clock: Any, held_from: float = 0.0) -> WriteFence:
    """Armed (lease 10, margin 1) and renewed at `held_from`: held until `held_from + 9`."""
    fence = WriteFence(clock)
    fence.arm(10.0, 1.0)
    fence.renewed(held_from)
    return fence


async def bind(api: client.ApiClient, timeout: float | None = None) -> Any:
    core = client.CoreV1Api(api)
    kwargs: dict[str, Any] = {"_preload_content": False}
    if timeout is not None:
        kwargs["_request_timeout"] = timeout
    return await core.create_namespaced_pod_binding("p", "ns", BINDING, **kwargs)


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield captured


async def test_an_open_fence_lets_the_write_out_and_logs_its_outcome(
    logs: list[dict[str, Any]],
) -> None:
    recorder = Recorder()
    async with serving(recorder) as host, fenced_client(host, fence_with(Readings(1.0))) as api:
        response = await bind(api, timeout=5)
        assert response.status == 201
        response.release()
    assert recorder.requests == ["POST /api/v1/namespaces/ns/pods/p/binding HTTP/1.1"]
    done = [entry for entry in logs if entry["event"] == "write_done"]
    assert len(done) == 1 and done[0]["status"] == 201 and done[0]["verb"] == "POST"
    assert done[0]["sent_at"] is not None


async def test_a_closed_fence_sends_nothing(logs: list[dict[str, Any]]) -> None:
    recorder = Recorder()
    fence = WriteFence(Readings(0.0))
    fence.arm(10.0, 1.0)  # never acquired
    async with serving(recorder) as host, fenced_client(host, fence) as api:
        with pytest.raises(NotLeader):
            await bind(api)
    assert (recorder.connections, recorder.bytes) == (0, 0)
    assert [entry["event"] for entry in logs] == ["write_fenced"]


@pytest.mark.parametrize(
    ("readings", "where"),
    [
        ((0.0, 100.0), "when the connection is ready (send)"),
        ((0.0, 0.0, 100.0), "when the body is about to be written (write_bytes)"),
    ],
)
async def test_a_term_that_ends_after_the_first_check_still_sends_nothing(
    readings: tuple[float, ...], where: str, logs: list[dict[str, Any]]
) -> None:
    """The process is paused after the request-level check; on waking, the term is over."""
    recorder = Recorder()
    fence = fence_with(Readings(*readings))  # held until 9; the clock jumps to 100
    async with serving(recorder) as host, fenced_client(host, fence) as api:
        with pytest.raises(NotLeader):
            await bind(api, timeout=5)
        await asyncio.sleep(0.05)  # let the server see the connection close
    assert recorder.bytes == 0, where
    assert fence.refused == 1
    assert [entry["event"] for entry in logs] == ["write_fenced"]


async def test_reads_and_lease_writes_pass_a_closed_fence() -> None:
    recorder = Recorder()
    fence = WriteFence(Readings(0.0))
    fence.arm(10.0, 1.0)
    async with serving(recorder) as host, fenced_client(host, fence) as api:
        core = client.CoreV1Api(api)
        response = await core.list_namespaced_pod("ns", _preload_content=False)
        response.release()
        leases = client.CoordinationV1Api(api)
        response = await leases.replace_namespaced_lease(
            "gpu-scheduler", "ns", {"metadata": {"name": "gpu-scheduler"}}, _preload_content=False
        )
        response.release()
    assert recorder.requests == [
        "GET /api/v1/namespaces/ns/pods HTTP/1.1",
        "PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/gpu-scheduler HTTP/1.1",
    ]


async def test_the_timeout_of_a_write_is_cut_to_the_term(logs: list[dict[str, Any]]) -> None:
    """The server answers after 8 s; the call allows 30 s, the term only 2 s more (room for a
    loaded machine to send the request before the term ends)."""
    recorder = Recorder(delay=8.0)
    loop = asyncio.get_running_loop()
    fence = fence_with(loop.time, held_from=loop.time() - 9.0 + 2.0)
    async with serving(recorder) as host, fenced_client(host, fence) as api:
        with pytest.raises(TimeoutError):
            await bind(api, timeout=30)
    assert len(recorder.requests) == 1  # it was sent, in time
    failed = [entry for entry in logs if entry["event"] == "write_failed"]
    assert len(failed) == 1 and failed[0]["sent"] is True


async def test_an_unarmed_fence_keeps_the_configured_timeout() -> None:
    recorder = Recorder(delay=0.3)
    async with serving(recorder) as host, fenced_client(host, WriteFence()) as api:
        response = await bind(api, timeout=30)
        assert response.status == 201
        response.release()
        assert fence_of(api) is api.fence
        assert api.fence.remaining() == math.inf
    assert fence_of(client.ApiClient.__new__(client.ApiClient)) is None


async def test_a_write_that_times_out_before_it_is_sent_is_known_not_sent(
    logs: list[dict[str, Any]],
) -> None:
    """One connection, held by a slow read: the write times out waiting for it, so no byte of
    it left the process and the caller is told so (not an outcome to read back)."""
    recorder = Recorder(delay=3.0)
    async with serving(recorder) as host:
        configuration = client.Configuration(host=host)
        configuration.connection_pool_maxsize = 1
        api = FencedApiClient(configuration, fence_with(Readings(1.0)))
        try:
            core = client.CoreV1Api(api)
            slow_read = asyncio.ensure_future(
                core.list_namespaced_pod("ns", _preload_content=False, _request_timeout=10)
            )
            await asyncio.sleep(0.2)  # the read holds the only connection
            with pytest.raises(APINotSentError) as refused:
                await bind(api, timeout=0.5)
            (await slow_read).release()
        finally:
            await api.close()
    assert "no answer within the timeout" in str(refused.value)
    assert recorder.requests == ["GET /api/v1/namespaces/ns/pods HTTP/1.1"]
    failed = [entry for entry in logs if entry["event"] == "write_failed"]
    assert len(failed) == 1 and failed[0]["sent"] is False
