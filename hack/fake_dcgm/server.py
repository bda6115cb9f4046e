"""Start and stop the fake exporter: options, an async context manager, and ``serve``.

Contract: ``running(options)`` loads the trace, connects to the API server, binds the listener
and yields the bound (host, port) (port 0 picks a free one); leaving the context stops the HTTP
site, the background tasks and the API client, in that order. ``serve`` runs until ``stop`` is
set. A trace file that cannot be read raises :class:`~hack.fake_dcgm.trace.TraceError` before
anything is bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

from hack.fake_dcgm.app import Wiring, make_app
from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.render import DEFAULT_DRIVER_VERSION, RenderOptions
from hack.fake_dcgm.source import Source, api_source
from hack.fake_dcgm.trace import load_trace

log = structlog.get_logger("fake_dcgm.server")


@dataclass(frozen=True)
class Options:
    """Everything the command line sets."""

    kubeconfig: Path | None  # None: use ``source`` from ``running`` instead of an API server
    host: str = "127.0.0.1"
    port: int = 9400
    trace: Path | None = None  # CSV backing ``trace:`` usage shapes
    profiling: bool = False  # serve DCGM_FI_PROF_GR_ENGINE_ACTIVE for every node
    refresh_s: float = 1.0  # seconds between Node/Pod listings
    tick_s: float = 0.1  # seconds between energy advances
    engine_window_s: float = 1.0  # trailing window GR_ENGINE_ACTIVE averages over
    driver_version: str = DEFAULT_DRIVER_VERSION


@dataclass(frozen=True)
class Endpoint:
    """Where the exporter listens."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@asynccontextmanager
async def running(options: Options, source: Source | None = None) -> AsyncIterator[Endpoint]:
    """Run the exporter for the duration of the context (see module docstring).

    ``source`` replaces the API server (for tests); otherwise ``options.kubeconfig`` is required.
    """
    trace = load_trace(options.trace) if options.trace else None
    exporter = Exporter(
        trace,
        options.profiling,
        RenderOptions(options.driver_version, options.engine_window_s),
    )
    async with AsyncExitStack() as stack:
        if source is None:
            if options.kubeconfig is None:
                raise ValueError("either a kubeconfig or a source is required")
            source = await stack.enter_async_context(api_source(options.kubeconfig))
        wiring = Wiring(exporter, source, options.refresh_s, options.tick_s)
        runner = web.AppRunner(make_app(wiring), access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, options.host, options.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        endpoint = Endpoint(str(host), int(port))
        log.info("listening", url=endpoint.url, trace=str(options.trace or ""))
        yield endpoint


async def serve(options: Options, stop: asyncio.Event, source: Source | None = None) -> None:
    """Run the exporter until ``stop`` is set."""
    async with running(options, source):
        await stop.wait()
    log.info("stopped")
