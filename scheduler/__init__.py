"""The gpu-scheduler daemon.

Layers, every import pointing down (checked by tests/unit/test_layers.py):

    scheduler.cli, scheduler.daemon        composition root: flags, config, wiring, tasks
    scheduler.tools                        offline tools: explain, simulate, topology discovery
    scheduler core                         cycle, queue, cache, handlers, framework, plugins
    scheduler.kube                         API server adapters: watch, bind, evict, events, Lease
    reclaim, topology, metrics             pure policy + Prometheus adapter, NVLink model, /metrics

`reclaim`, `topology` and `metrics` import nothing from `scheduler`; `scheduler.kube` imports
nothing from the core above it; only the composition root and the tools import `scheduler.tools`.
"""
