"""The aiohttp application: GET /metrics, GET /healthz, and the background loops it owns.

Contract: :func:`make_app` wires an :class:`~hack.fake_dcgm.exporter.Exporter` to a source.
Its cleanup context starts two tasks, the source refresh (every ``refresh_s``) and the energy
tick (every ``tick_s``), and cancels and awaits both on cleanup. A task that dies unexpectedly
is logged. ``/healthz`` answers 200 once the first refresh succeeded and both tasks run,
503 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.source import Source, refresh_forever

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

log = structlog.get_logger("fake_dcgm.app")


@dataclass(frozen=True)
class Wiring:
    """What the app serves and how often it refreshes."""

    exporter: Exporter
    source: Source
    refresh_s: float = 1.0  # seconds between Node/Pod listings
    tick_s: float = 0.1  # seconds between energy advances
    clock: Callable[[], float] = time.time  # wall clock, as pod start times are


WIRING = web.AppKey("wiring", Wiring)
TASKS = web.AppKey("tasks", list[asyncio.Task[None]])


async def _metrics(request: web.Request) -> web.Response:
    wiring = request.app[WIRING]
    body = wiring.exporter.metrics(wiring.clock())
    return web.Response(body=body.encode(), headers={"Content-Type": CONTENT_TYPE})


async def _healthz(request: web.Request) -> web.Response:
    dead = [t.get_name() for t in request.app[TASKS] if t.done()]
    if dead:
        return web.Response(status=503, text=f"background task(s) stopped: {', '.join(dead)}\n")
    if request.app[WIRING].exporter.updates == 0:
        return web.Response(status=503, text="waiting for the first refresh\n")
    return web.Response(text="ok\n")


async def _ticks(wiring: Wiring) -> None:
    while True:
        await asyncio.sleep(wiring.tick_s)
        wiring.exporter.tick(wiring.clock())


async def _guarded(name: str, work: Coroutine[Any, Any, None]) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("task_died", task=name)
        raise


async def _background(app: web.Application) -> AsyncIterator[None]:
    wiring = app[WIRING]
    tasks = app[TASKS]
    tasks += [
        asyncio.create_task(
            _guarded(
                "refresh",
                refresh_forever(wiring.source, wiring.exporter, wiring.refresh_s, wiring.clock),
            ),
            name="fake-dcgm-refresh",
        ),
        asyncio.create_task(_guarded("tick", _ticks(wiring)), name="fake-dcgm-tick"),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def make_app(wiring: Wiring) -> web.Application:
    """The web application serving ``wiring.exporter``."""
    app = web.Application()
    app[WIRING] = wiring
    app[TASKS] = []
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.cleanup_ctx.append(_background)
    return app
