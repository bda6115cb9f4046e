"""/metrics renders the daemon's registry in the text format Prometheus 2 and 3 both parse."""

from __future__ import annotations

import threading

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest

from hack.localcluster.cluster import free_port
from metrics.collectors import Reading, single
from metrics.server import make_app, render, start_server


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


async def test_collectors_are_read_on_the_event_loop_thread() -> None:
    registry = CollectorRegistry()
    threads: list[int] = []

    def read() -> list[tuple[tuple[str, ...], float]]:
        threads.append(threading.get_ident())
        return [(("a",), 1.0), (("b",), 2.0)]

    registry.register(Reading("gauge", "x_nodes", "Nodes.", ("node",), read))
    body = (await render(registry)).decode()
    assert threads == [threading.get_ident()]
    assert 'x_nodes{node="a"} 1.0\nx_nodes{node="b"} 2.0\n' in body
    assert body == generate_latest(registry).decode()
