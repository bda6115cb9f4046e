"""The API client: from a kubeconfig file, or in a pod from its mounted ServiceAccount, with every
write fenced by the leader Lease (`scheduler.kube.fence`).

Every generated kubernetes_asyncio method goes through `ApiClient.request`, and every request
through one aiohttp session, so the fence sits there and nowhere else: the adapters (binding,
eviction, events, status patches) need not know about it.

- `FencedApiClient.request` sorts each request: reads and the elector's own Lease writes pass
  untouched; every other write is admitted by the fence first (refused: `NotLeader`, nothing
  sent), gets its timeout cut to end within the term, and has its outcome logged: `write_done`
  (any HTTP answer, with its status), `write_failed` (no answer: timeout, connection error,
  cancellation; `sent` says whether bytes had gone out) or `write_fenced`. A write that failed
  before any byte went out raises `APINotSentError`: the API server cannot have seen it, so its
  caller knows the outcome (nothing was written) instead of having to read it back.
- `FencedRequest.send` asks the fence again once the connection is ready, the last step before
  aiohttp writes the request: headers and body are written from `send` without yielding to the
  event loop, so a process paused anywhere before it (a TLS handshake, a full connection pool)
  finds the fence closed when it resumes and sends nothing.
"""

from __future__ import annotations

import asyncio.sslproto
import contextvars
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp
import structlog
from aiohttp.abc import AbstractStreamWriter
from aiohttp.connector import Connection
from kubernetes_asyncio import client, config

from scheduler.kube.apierrors import (
    TRANSPORT_ERRORS,
    APINotSentError,
    APITransportError,
    describe,
)
from scheduler.kube.fence import NotLeader, WriteFence, is_fenced, short

log = structlog.get_logger("gpu-scheduler.kube.client")

CONNECTION_POOL_SIZE = 64
"""Connections kept open to the API server (binds, evictions and watches run side by side)."""
READ_BUFSIZE = 2**21
"""aiohttp's read buffer, as kubernetes_asyncio sets it (watch events of large objects)."""
TLS_READ_BUFFER = 32 * 1024
"""Bytes asyncio's TLS transport reads from the socket at a time, and keeps allocated for every
TLS connection (`asyncio.sslproto.SSLProtocol.max_size`): 256 KiB by default. The client holds
up to `CONNECTION_POOL_SIZE` connections to the API server (every watch keeps one), so the
default costs 16 MiB of buffers that hold a few KB at a time. 32 KiB is two TLS records per read;
reading a large list costs no more CPU (docs/benchmarks.md, "Memory")."""


@dataclass
class _Write:
    """The write a task is sending, for `FencedRequest` to re-check."""

    fence: WriteFence
    verb: str
    path: str
    sent_at: datetime | None = None
    """Wall-clock time the fence last let it go out (None: never sent)."""
    sent_earlier: datetime | None = None
    """`sent_at` of an earlier attempt of the same request (aiohttp retries some on a fresh
    connection), kept when a later attempt is refused before it is sent."""


_CURRENT_WRITE: contextvars.ContextVar[_Write | None] = contextvars.ContextVar(
    "gpu_scheduler_current_write", default=None
)


class FencedRequest(aiohttp.ClientRequest):
    """aiohttp's request, re-admitted by the fence of the write it carries (if any) at the last
    step before its bytes go out.

    aiohttp buffers the request line and headers in `send` and writes them together with the
    body from `write_bytes`, a task of its own that may run a whole event-loop iteration (a
    scheduling cycle) later; a request without a body is written from `send`. Both ask the fence
    before anything reaches the socket, with no await between the check and the write.
    """

    async def send(self, conn: Connection) -> aiohttp.ClientResponse:
        write = _CURRENT_WRITE.get()
        if write is not None:
            write.fence.admit(write.verb, write.path, None)  # raises NotLeader: nothing written
            write.sent_earlier = write.sent_at
            write.sent_at = datetime.now(UTC)
        return await super().send(conn)

    async def write_bytes(
        self, writer: AbstractStreamWriter, conn: Connection, content_length: int | None = None
    ) -> None:
        write = _CURRENT_WRITE.get()
        if write is not None:
            try:
                write.fence.admit(write.verb, write.path, None)
            except NotLeader as refused:
                # Only the buffered headers exist: drop them with the connection, and let the
                # response wait (in `send`'s caller) end with the refusal.
                write.sent_at = write.sent_earlier
                assert conn.protocol is not None
                conn.protocol.set_exception(refused)
                conn.close()
                return
            write.sent_at = datetime.now(UTC)
        await super().write_bytes(writer, conn, content_length)


def _seconds(timeout: object) -> float | None:
    """The total seconds of a kubernetes_asyncio `_request_timeout` (None: no total limit)."""
    if isinstance(timeout, bool) or not timeout:
        return None
    if isinstance(timeout, int | float):
        return float(timeout)
    if isinstance(timeout, aiohttp.ClientTimeout):
        return timeout.total
    return None  # a (connect, read) pair: no total


def _bounded(timeout: object, total: float) -> aiohttp.ClientTimeout:
    """`timeout` with its total cut to `total` seconds, ending exactly then (no rounding up)."""
    connect = sock_read = None
    if isinstance(timeout, tuple) and len(timeout) == 2:
        connect, sock_read = timeout
    elif isinstance(timeout, aiohttp.ClientTimeout):
        connect, sock_read = timeout.connect, timeout.sock_read

    def cut(value: float | None) -> float | None:
        return None if value is None else min(float(value), total)

    return aiohttp.ClientTimeout(
        total=total,
        connect=cut(connect),
        sock_connect=cut(connect),
        sock_read=cut(sock_read),
        ceil_threshold=math.inf,  # aiohttp rounds longer timeouts up to a whole second
    )


class FencedApiClient(client.ApiClient):
    """A kubernetes_asyncio `ApiClient` whose writes pass `fence` (see the module docstring).

    The fence starts unarmed (every write goes out); a `LeaderElector` given the same fence arms
    it. Create it inside the event loop it will run on.

    The proxy environment (HTTPS_PROXY, NO_PROXY, ...) is read once, here: the session trusts
    the environment only when it names a proxy for the API server (`env_proxy_applies`). With
    `trust_env`, aiohttp looks up the proxy and ~/.netrc in a worker thread on every request,
    two thread hops that cost more CPU than the rest of a Binding's client side.
    """

    def __init__(self, configuration: client.Configuration, fence: WriteFence | None = None):
        super().__init__(configuration)
        self.fence = fence or WriteFence()
        rest = self.rest_client
        plain = rest.pool_manager
        rest.pool_manager = aiohttp.ClientSession(
            connector=plain.connector,
            trust_env=plain.trust_env and env_proxy_applies(str(configuration.host)),
            read_bufsize=READ_BUFSIZE,
            request_class=FencedRequest,
        )
        plain.detach()  # the connector now belongs to the new session

    async def request(
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: Any = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ) -> Any:
        path = urlsplit(url).path
        if not is_fenced(method, path):
            return await super().request(
                method, url, query_params, headers, post_params, body,
                _preload_content, _request_timeout,
            )  # fmt: skip
        write = _Write(self.fence, method, path)
        limit = self.fence.admit(method, path, _seconds(_request_timeout))  # may raise NotLeader
        if self.fence.armed and limit is not None:
            _request_timeout = _bounded(_request_timeout, limit)
        started = time.monotonic()
        token = _CURRENT_WRITE.set(write)
        try:
            response = await super().request(
                method, url, query_params, headers, post_params, body,
                _preload_content, _request_timeout,
            )  # fmt: skip
        except NotLeader as refused:
            if write.sent_at is not None:  # an earlier attempt of this request went out
                raise APITransportError(f"{method} {short(path)}: {refused}") from refused
            raise  # logged by the fence
        except client.ApiException as error:  # an answer, decoded (_preload_content=True)
            _log_done(write, error.status, started)
            raise
        except BaseException as error:
            log.warning(
                "write_failed",
                verb=method,
                path=short(path),
                sent=write.sent_at is not None,
                sent_at=_iso(write.sent_at),
                error=repr(error)[:300],
                seconds=round(time.monotonic() - started, 3),
            )
            if write.sent_at is None and isinstance(error, TRANSPORT_ERRORS):
                raise APINotSentError(
                    f"not sent: {method} {short(path)}: {describe(error)}"
                ) from error
            raise
        finally:
            _CURRENT_WRITE.reset(token)
        _log_done(write, int(response.status), started)
        return response


def env_proxy_applies(url: str) -> bool:
    """Whether the environment's proxy settings (*_PROXY, NO_PROXY, which aiohttp reads
    through the same `urllib.request` functions) send requests to `url` through a proxy."""
    parts = urlsplit(url)
    if parts.hostname and proxy_bypass(parts.hostname):
        return False
    return parts.scheme in getproxies()


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _log_done(write: _Write, status: int, started: float) -> None:
    log.info(
        "write_done",
        verb=write.verb,
        path=short(write.path),
        status=status,
        sent_at=_iso(write.sent_at),
        seconds=round(time.monotonic() - started, 3),
    )


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Make asyncio's TLS read buffer `size` bytes for every TLS connection this process makes
    or accepts from now on (the metrics and webhook servers' too): see `TLS_READ_BUFFER`."""
    asyncio.sslproto.SSLProtocol.max_size = size


def fence_of(api_client: client.ApiClient | None) -> WriteFence | None:
    """The write fence of `api_client` (None for a client not made by `api_client_for`)."""
    fence = getattr(api_client, "fence", None)
    return fence if isinstance(fence, WriteFence) else None


async def api_client_for(kubeconfig: str | None, context: str | None = None) -> FencedApiClient:
    """An API client from a kubeconfig file (its `context`, default its current-context), or from
    the pod's service account when None; its writes pass an (unarmed) `WriteFence`,
    `client.fence`. Sets the process's TLS read buffer (`limit_tls_read_buffer`) first."""
    limit_tls_read_buffer()
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return FencedApiClient(configuration)
