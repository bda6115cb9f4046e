"""Prometheus query latency, measured on the client's session: by result, for an answer, an
HTTP error and no answer at all."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from hack.localcluster.cluster import free_port
from metrics.queries import query_histogram, query_timing
from metrics.server import start_server
from reclaim.prometheus import PrometheusClient, PrometheusError, PrometheusUnavailable

VECTOR = '{"status": "success", "data": {"resultType": "vector", "result": []}}'


@pytest.fixture
async def prometheus() -> AsyncIterator[str]:
    """A stand-in Prometheus: answers queries for `up` with an empty vector, others with 400."""

    async def query(request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("query") == "up":
            return web.Response(text=VECTOR, content_type="application/json")
        error = '{"status": "error", "errorType": "bad_data", "error": "parse error"}'
        return web.Response(status=400, text=error, content_type="application/json")

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    port = free_port()
    runner = await start_server(app, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def count(registry: CollectorRegistry, result: str) -> float | None:
    return registry.get_sample_value(
        "gpu_scheduler_prometheus_query_duration_seconds_count", {"result": result}
    )


async def test_query_latency_by_result(prometheus: str) -> None:
    registry = CollectorRegistry()
    histogram = query_histogram(registry)
    assert [count(registry, r) for r in ("ok", "error", "unavailable")] == [0, 0, 0]
    async with PrometheusClient(prometheus) as answered:
        answered.trace_configs.append(query_timing(histogram))
        assert await answered.query("up") == []
        with pytest.raises(PrometheusError, match="parse error"):
            await answered.query("up{")
    async with PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_s=2) as nobody:
        nobody.trace_configs.append(query_timing(histogram))
        with pytest.raises(PrometheusUnavailable):
            await nobody.query("up")
    assert [count(registry, r) for r in ("ok", "error", "unavailable")] == [1, 1, 1]
