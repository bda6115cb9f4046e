"""Latency of the queries made to Prometheus (reclaim's usage windows, GPU holders):
`gpu_scheduler_prometheus_query_duration_seconds{result}`.

Measured by an aiohttp `TraceConfig` on the Prometheus client's session, from the request's
start to its answer's headers (Prometheus evaluates an instant query before it answers, so
this is the query's latency), or to the error that ended it. `result` is `ok` (HTTP status
below 400), `error` (an HTTP error status) or `unavailable` (no answer: timeout, connection
refused or reset).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import aiohttp
from prometheus_client import CollectorRegistry, Histogram

from metrics.scheduling import exponential_buckets

QUERY_BUCKETS = exponential_buckets(0.005, 2, 12)
"""5 ms up to ~10 s (the default query timeout is 5 s)."""

OK = "ok"
ERROR = "error"
UNAVAILABLE = "unavailable"


def query_histogram(registry: CollectorRegistry) -> Histogram:
    """The histogram, registered in `registry`."""
    histogram = Histogram(
        "gpu_scheduler_prometheus_query_duration_seconds",
        "Latency of queries to Prometheus, by result (ok, error, unavailable).",
        ("result",),
        buckets=QUERY_BUCKETS,
        registry=registry,
    )
    for result in (OK, ERROR, UNAVAILABLE):
        histogram.labels(result)
    return histogram


def query_timing(histogram: Histogram) -> aiohttp.TraceConfig:
    """A TraceConfig recording every request of a session into `histogram`."""
    trace = aiohttp.TraceConfig()

    async def started(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        context.started = time.perf_counter()

    async def ended(
        session: aiohttp.ClientSession,
        context: SimpleNamespace,
        params: aiohttp.TraceRequestEndParams,
    ) -> None:
        result = OK if params.response.status < 400 else ERROR
        histogram.labels(result).observe(time.perf_counter() - context.started)

    async def failed(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        histogram.labels(UNAVAILABLE).observe(time.perf_counter() - context.started)

    trace.on_request_start.append(started)
    trace.on_request_end.append(ended)
    trace.on_request_exception.append(failed)
    return trace
