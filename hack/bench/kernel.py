"""Filter + score speed per pod: the vectorized framework against a pure-Python reference.

    python -m hack.bench.kernel [--nodes 100,1000,5000,50000] [--pods 200] [--seed 0] [-o json]

Both paths see the same synthetic cluster: the three seed node types in equal shares, each node
with a random part of its GPUs, CPU and memory in use (seeded). The pods ask for 1, 2, 4 or 8
GPUs in turn. The vectorized path is `Framework.evaluate` with the daemon's plugins (filters,
NVLink score, preferred affinity, seeded choice). The reference loops over nodes in Python: the
resource checks of NodeResourcesFit and `topology.reference.reference_score`, then the best node.
Both are timed in this process, one after the other; the ratio is reference / vectorized.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

import numpy as np

from hack.localcluster.nodes import SEED_NODE_TYPES, node_manifest
from scheduler.cache import ClusterCache
from scheduler.config import SchedulerConfig
from scheduler.framework.snapshot import Snapshot
from scheduler.objects import parse_node, parse_pod
from scheduler.profile import default_framework
from topology.reference import reference_score

POD_SIZES = (1, 2, 4, 8)
TARGET_US_AT_5000 = 200.0
TARGET_US_AT_50000 = 2000.0


@dataclass(frozen=True)
class Result:
    nodes: int
    vectorized_us: float
    reference_us: float
    vectorized_pods: int
    reference_pods: int

    @property
    def ratio(self) -> float:
        return self.reference_us / self.vectorized_us


def build_cache(nodes: int, seed: int) -> ClusterCache:
    """`nodes` seed-type nodes with random usage, as the scheduler's cache holds them."""
    rng = np.random.default_rng(seed)
    cache = ClusterCache()
    for index in range(nodes):
        spec = SEED_NODE_TYPES[index % len(SEED_NODE_TYPES)]
        name = f"{spec.type_name.lower()}-{index}"
        cache.add_or_update_node(parse_node(node_manifest(spec, name)))
        used = int(rng.integers(0, spec.gpus + 1))
        if used:
            gpus = sorted(rng.choice(spec.gpus, size=used, replace=False).tolist())
            pod = {
                "metadata": {
                    "name": f"used-{index}",
                    "namespace": "bench",
                    "annotations": {"gpu-scheduler.io/gpus": ",".join(map(str, gpus))},
                },
                "spec": {
                    "nodeName": name,
                    "containers": [
                        {
                            "name": "c",
                            "resources": {
                                "requests": {"cpu": f"{used * 4}", "memory": f"{used * 32}Gi"},
                                "limits": {"nvidia.com/gpu": str(used)},
                            },
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }
            cache.add_pod(parse_pod(pod))
    return cache


def bench_pod(gpus: int, index: int) -> dict[str, object]:
    return {
        "metadata": {"name": f"p-{index}", "namespace": "bench"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "2", "memory": "16Gi"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ]
        },
    }


def reference_choose(cache: ClusterCache, pod_gpus: int, requests: np.ndarray) -> int:
    """The reference cycle: per-node Python checks and scores; the best row or -1."""
    best, best_raw = -1, -np.inf
    for row, name in enumerate(cache.names):
        if not cache.valid[row]:
            continue
        free = (cache.allocatable[row] - cache.requested[row]).tolist()
        if any(need > have for need, have in zip(requests.tolist(), free, strict=True)):
            continue
        topology = cache.nodes[name].topology
        used = cache.gpu_used[row, : topology.gpu_count].tolist()
        score = reference_score(pod_gpus, topology, used)
        if score is not None and score.raw > best_raw:
            best, best_raw = row, score.raw
    return best


def measure(nodes: int, pods: int, seed: int) -> Result:
    cache = build_cache(nodes, seed)
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    parsed = [parse_pod(bench_pod(POD_SIZES[i % 4], i)) for i in range(pods)]
    framework.evaluate(parsed[0], snapshot)  # warm up caches (label columns, imports)
    timings = []
    for pod in parsed:
        started = time.perf_counter()
        framework.evaluate(pod, snapshot)
        timings.append(time.perf_counter() - started)
    reference_pods = max(4, min(pods, 200_000 // nodes))
    reference_timings = []
    for pod in parsed[:reference_pods]:
        started = time.perf_counter()
        reference_choose(cache, pod.gpus, pod.requests)
        reference_timings.append(time.perf_counter() - started)
    return Result(
        nodes,
        statistics.median(timings) * 1e6,
        statistics.median(reference_timings) * 1e6,
        len(timings),
        len(reference_timings),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.kernel", description=__doc__)
    parser.add_argument("--nodes", default="100,1000,5000,50000")
    parser.add_argument("--pods", type=int, default=200, help="pods timed per cluster size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    results = [measure(int(n), args.pods, args.seed) for n in args.nodes.split(",")]
    if args.output == "json":
        rows = [dict(vars(r), ratio=r.ratio) for r in results]
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'nodes':>7} {'vectorized us/pod':>18} {'reference us/pod':>17} {'ratio':>8}")
    for r in results:
        print(f"{r.nodes:>7} {r.vectorized_us:>18.1f} {r.reference_us:>17.1f} {r.ratio:>7.1f}x")
    for r in results:
        target = {5000: TARGET_US_AT_5000, 50000: TARGET_US_AT_50000}.get(r.nodes)
        if target is not None:
            verdict = "met" if r.vectorized_us <= target else "MISSED"
            print(f"target at {r.nodes} nodes: <= {target:.0f} us/pod: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
