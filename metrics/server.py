"""The scheduler's HTTP endpoints: /metrics (the daemon's registry in Prometheus's text format),
/healthz (the process runs) and /readyz (its caches have synced, so its decisions see the whole
cluster).

A scrape collects on the event loop, so scrape-time collectors read the scheduler's state
between two of its steps, never halfway through one; the collected families are then rendered
to text in a worker thread, so the scheduling loop is not held while a large body (a series per
node and NVLink domain) is formatted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric

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


def make_app(registry: CollectorRegistry, ready: Callable[[], bool]) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=await render(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve `app` on host:port; call `runner.cleanup()` to stop. Port 0 picks a free port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
