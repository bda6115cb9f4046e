"""Observability of the scheduler itself: Prometheus metrics and the /metrics, /healthz,
/readyz and /livez server.

Every metric lives in one `prometheus_client.CollectorRegistry` per daemon, made in the
composition root and exposed as `Daemon.metrics_registry`; nothing is registered in
prometheus_client's global default registry, so several daemons in one process (tests) never
collide. `/metrics` renders that registry (`metrics.server`).

Modules:

    metrics.scheduling   what the scheduling cycle records as it runs (attempts, SLI latency,
                         bind latency, preemption) in a `SchedulingMetrics`
    metrics.collectors   scrape-time collectors over plain data the daemon reads when scraped
                         (queue sizes, GPUs per node and NVLink domain, leadership, counters)
    metrics.queries      latency of the Prometheus queries reclaim makes
    metrics.server       the aiohttp application serving the registry (HTTPS and access
                         checks when the daemon asks for them)
    metrics.access       who may read /metrics: bearer tokens the API server authenticates
                         and authorizes (its reviews behind a protocol), with TTL caches

Adding a collector of your own (e.g. GPU busy-time accounting): implement prometheus_client's
`Collector` protocol (`collect()` yielding metric families, and `describe()` returning them
without samples so registering does not read anything yet) and register it on the daemon's
registry in `scheduler.daemon.Daemon.__init__`:

    self.metrics_registry.register(BusyTimeCollector(...))

The metrics, their labels and the alert rules are documented in docs/operations.md.
"""
