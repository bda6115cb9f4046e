"""A Prometheus stand-in on loopback that forwards to the real one, or misbehaves on demand.

    async with FlakyPrometheus(cluster.prometheus_url) as prom:
        prom.mode = Mode.NAN          # every sample value becomes "NaN"
        ... reclaim with prometheusUrl=prom.url ...

| mode    | what the scheduler sees                                                       |
|---------|-------------------------------------------------------------------------------|
| PASS    | the real Prometheus's answer                                                  |
| DOWN    | connection refused (the listener is closed; the port is kept for `PASS`)      |
| SLOW    | the answer after `slow_s` seconds (longer than the scheduler's query timeout) |
| ERROR   | HTTP 500 with a Prometheus-shaped error body                                  |
| NAN     | the real answer with every sample value replaced by "NaN"                     |
| EMPTY   | a successful answer with no series                                            |

`requests` counts the queries answered per mode. `on_next_query`, when set, is awaited once
before the next query is answered (then cleared): a test acts at the moment reclaim measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from enum import Enum
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web


class Mode(Enum):
    PASS = "pass"
    DOWN = "down"
    SLOW = "slow"
    ERROR = "error"
    NAN = "nan"
    EMPTY = "empty"


def nan_values(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with every instant or range sample value replaced by "NaN"."""
    data = body.get("data") or {}
    result = data.get("result")
    if isinstance(result, list):
        for series in result:
            if isinstance(series, dict):
                if "value" in series:
                    series["value"] = [series["value"][0], "NaN"]
                if "values" in series:
                    series["values"] = [[point[0], "NaN"] for point in series["values"]]
    return body


class FlakyPrometheus:
    """See the module docstring."""

    def __init__(self, upstream: str, slow_s: float = 30.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.slow_s = slow_s
        self.requests: Counter[str] = Counter()
        self._mode = Mode.PASS
        self.on_next_query: Callable[[], Awaitable[None]] | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    async def set_mode(self, mode: Mode) -> None:
        """Switch modes; DOWN closes the listener, leaving DOWN opens it on the same port."""
        if mode is Mode.DOWN and self._site is not None:
            await self._site.stop()
            self._site = None
        elif mode is not Mode.DOWN and self._site is None:
            await self._listen(self.port)
        self._mode = mode

    async def __aenter__(self) -> FlakyPrometheus:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self._session = aiohttp.ClientSession()
        await self._listen(0)
        return self

    async def _listen(self, port: int) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True)
        await self._site.start()
        server = self._site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = int(server.sockets[0].getsockname()[1])

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        mode = self._mode
        self.requests[mode.value] += 1
        hook, self.on_next_query = self.on_next_query, None
        if hook is not None:
            await hook()
        if mode is Mode.ERROR:
            error = {"status": "error", "errorType": "internal", "error": "injected fault"}
            return web.json_response(error, status=500)
        if mode is Mode.EMPTY:
            empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
            return web.json_response(empty)
        try:
            body = await request.read()  # before any stall: the client may give up meanwhile
            if mode is Mode.SLOW:
                await asyncio.sleep(self.slow_s)
            assert self._session is not None
            headers = {k: v for k, v in request.headers.items() if k.lower() == "content-type"}
            async with self._session.request(
                request.method,
                f"{self.upstream}/{request.match_info['path']}",
                params=request.query,
                data=body,
                headers=headers,
            ) as upstream:
                text = await upstream.text()
                status = upstream.status
        except (OSError, aiohttp.ClientError) as error:  # the scheduler hung up, or upstream
            return web.Response(text=f"proxy: {type(error).__name__}", status=502)
        if mode is Mode.NAN:
            with contextlib.suppress(ValueError):
                text = json.dumps(nan_values(json.loads(text)))
        return web.Response(text=text, status=status, content_type="application/json")
