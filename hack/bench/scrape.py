"""Cost of one /metrics scrape of a daemon whose cache holds many nodes.

    python -m hack.bench.scrape [--nodes 100,1000,5000] [--repeat 7] [--seed 0]

The daemon is built, not run (its API address answers nothing); its cache is the synthetic one
of `hack.bench.kernel` (seed node types, random GPU usage). Timed in this process, best of
`--repeat`: collecting every metric family (what the event loop does) and collecting plus
rendering the text (the rendering runs in a worker thread in the daemon).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

from kubernetes_asyncio import client
from prometheus_client import generate_latest

from hack.bench.kernel import build_cache
from hack.localcluster.cluster import free_port
from scheduler.config import config_from_data
from scheduler.daemon import Daemon


def best_ms(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


async def measure(nodes: list[int], repeat: int, seed: int) -> None:
    settings = config_from_data({"leaderElection": {"enabled": False}}, "<bench>", {}, {})
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    try:
        daemon = Daemon(settings, api)
        registry = daemon.metrics_registry
        for count in nodes:
            daemon.cache = build_cache(count, seed)  # the collectors read `daemon.cache`
            collect = best_ms(repeat, lambda: list(registry.collect()))
            body = generate_latest(registry)
            both = best_ms(repeat, lambda: generate_latest(registry))
            print(
                f"{count} nodes: collect {collect:.1f} ms (on the event loop), "
                f"collect + render {both:.1f} ms, body {len(body) / 1000:.0f} kB"
            )
    finally:
        await api.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    nodes = [int(n) for n in args.nodes.split(",")]
    asyncio.run(measure(nodes, args.repeat, args.seed))


if __name__ == "__main__":
    main()
