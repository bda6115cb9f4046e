"""The scheduler's HTTP endpoints: /metrics (the daemon's registry in Prometheus's text format),
/healthz and /livez (the process runs) and /readyz (its caches have synced, so its decisions see
the whole cluster).

Given a `metrics.access.MetricsAccess`, every request passes it first (`access_middleware`): the
probes' paths are open, anything else needs a bearer token the API server authenticates (401
without) and authorizes for `get` on the path (403 without); a failed review answers 500. Given
an `ssl.SSLContext`, `start_server` serves HTTPS. The daemon passes both when
`metricsServing.secure` is on, neither when it is off (plain HTTP, open).

A scrape collects on the event loop, so scrape-time collectors read the scheduler's state
between two of its steps, never halfway through one; the collected families are then rendered
to text in a worker thread, so the scheduling loop is not held while a large body (a series per
node and NVLink domain) is formatted.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric

from metrics.access import MetricsAccess, Verdict

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Text format 0.0.4: every Prometheus version parses it (the names need no escaping)."""


class Collected:
    """Families already collected, offered to `generate_latest` as a collector."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


async def render(registry: CollectorRegistry) -> bytes:
    """`registry` in the text format: collected here, on the event loop; formatted in a thread."""
    collected = Collected(registry.collect())
    return await asyncio.to_thread(generate_latest, collected)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def refusal(verdict: Verdict, path: str, username: str, reason: str) -> web.Response:
    """The answer to a request `MetricsAccess` did not allow (kube-apiserver's wording)."""
    if verdict is Verdict.UNAUTHENTICATED:
        return web.Response(
            status=401, text="Unauthorized\n", headers={"WWW-Authenticate": "Bearer"}
        )
    if verdict is Verdict.FORBIDDEN:
        text = f'forbidden: User "{username}" cannot get path "{path}"'
        return web.Response(status=403, text=f"{text}: {reason}\n" if reason else f"{text}\n")
    return web.Response(status=verdict.status, text="Internal Server Error: access review failed\n")


def access_middleware(access: MetricsAccess) -> Middleware:
    """An aiohttp middleware answering what `access` does not allow before any handler runs."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer = await access.check(request.path, request.headers.get("Authorization"))
        if answer.verdict is Verdict.ALLOWED:
            return await handler(request)
        username = answer.user.username if answer.user else ""
        return refusal(answer.verdict, request.path, username, answer.reason)

    return guard


def make_app(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    access: MetricsAccess | None = None,
) -> web.Application:
    """The endpoints over `registry`; `ready()` answers /readyz; `access` guards every path
    (None: open to anyone)."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=await render(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    app = web.Application(middlewares=[access_middleware(access)] if access else [])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Serve `app` on host:port (HTTPS with `ssl_context`); call `runner.cleanup()` to stop.
    Port 0 picks a free port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    return runner
