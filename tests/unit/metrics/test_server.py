"""/metrics renders the daemon's registry in the text format Prometheus 2 and 3 both parse."""

from __future__ import annotations

import aiohttp
from prometheus_client import CollectorRegistry

from hack.localcluster.cluster import free_port
from metrics.collectors import Reading, single
from metrics.server import make_app, start_server


async def test_metrics_readyz_and_healthz() -> None:
    registry = CollectorRegistry()
    ready = [False]
    registry.register(Reading("gauge", "x_ready", "Ready.", (), lambda: single(ready[0])))
    port = free_port()
    runner = await start_server(make_app(registry, lambda: ready[0]), "127.0.0.1", port)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 503
            ready[0] = True
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 200
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                assert "x_ready 1.0\n" in await response.text()
    finally:
        await runner.cleanup()
