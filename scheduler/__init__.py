"""The gpu-scheduler daemon.

Sub-packages, every import pointing down (checked by tests/unit/test_layers.py, which also finds
import circles between modules and between packages):

    scheduler.cli, scheduler.daemon   the command line; the composition root (wiring, tasks)
    scheduler.tools                   offline tools: explain, simulate, idle report, topology
    scheduler.admission               admission webhooks
    scheduler.core                    the loop: queue, handlers, profile, cycle + binding cycle
    scheduler.postfilter              no node fits: idle reclaim, then priority preemption
    scheduler.victims                 who may be evicted: the decisions
    scheduler.gangs                   the gang model and gang planning
    scheduler.plugins                 filter and score plugins
    scheduler.framework               extension-point contracts, snapshot, plugin runner
    scheduler.state                   the cluster cache; the context the daemon's parts share
    scheduler.kube                    API server adapters: watch, bind, evict, events, Lease
    scheduler.model                   parsing API objects into records (no I/O)
    scheduler.config, .logging        settings; log set-up
    reclaim, metrics, topology        pure policy + Prometheus adapter, /metrics, NVLink model

`reclaim`, `topology` and `metrics` import nothing from `scheduler`. docs/architecture.md says
where a pod is parsed, queued, placed, bound, where a victim is chosen and a gang planned.

Importing the package defers kubernetes_asyncio's generated classes until they are used
(`scheduler.kube.lazy_client`): it must happen before anything imports kubernetes_asyncio.
"""

from scheduler.kube.lazy_client import defer_generated_client

defer_generated_client()
