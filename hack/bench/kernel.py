"""Filter + score speed per pod: the vectorized framework against a pure-Python reference.

    python -m hack.bench.kernel [--nodes 100,1000,5000,50000] [--pods 200] [--seed 0]
        [--node-types G1,G2,G2-Expansion] [--reference-pods N] [--reference-max-nodes N]
        [--assumed 0,20000,100000 --assumed-nodes 5000] [--memory] [--profile] [-o json]

Both paths see the same synthetic cluster: the three seed node types in equal shares (or those
named by `--node-types`, e.g. only the 8-GPU G2-Expansion), each node with a random part of its
GPUs, CPU and memory in use (seeded). The pods ask for 1, 2, 4 or 8
GPUs in turn. The vectorized path is `Framework.evaluate` with the daemon's plugins (filters,
NVLink score, preferred affinity, seeded choice). The reference loops over nodes in Python: the
resource checks of NodeResourcesFit and `topology.reference.reference_score`, then the best node.
Both are timed in this process, one after the other.

The reference is slow (about 4 us per node), so it times only the first `reference_sample` pods
(by default 200,000 / nodes, at least 4: one of each GPU size) and none above
`--reference-max-nodes`. The ratio is paired: the reference's median over its pods against the
vectorized median over the same pods, not over all of them.

`--assumed` times pods at `--assumed-nodes` nodes after that many more small CPU-only pods are
counted in the cache (bound, same namespace, labelled `app=filler`), twice: the plain pods, and
the same pods with a hostname spread constraint on `app=filler` (which counts the namespace's
pods every cycle); it also reports what the cache holds per filler (tracemalloc, traced only
while they are added). `--memory` reports what building the cache and its snapshot allocates at
each node count: `tracemalloc` (Python objects and numpy arrays) and the process's resident set
growth (/proc/self/statm; memory freed by earlier sizes is reused, so it can read low).
`--profile` prints the functions that take most of the vectorized time at the largest size.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hack.bench.gang_workload import RACK_LABEL
from hack.bench.growth import exponent, fit_line
from hack.localcluster.nodes import SEED_NODE_TYPES, NodeSpec, node_manifest
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo, parse_node, parse_pod
from scheduler.state.cache import ClusterCache
from topology.reference import reference_score

POD_SIZES = (1, 2, 4, 8)
TARGET_US_AT_5000 = 200.0
TARGET_US_AT_50000 = 2000.0
REFERENCE_NODE_BUDGET = 200_000
"""The reference times about this many node visits per cluster size (pods x nodes)."""
FILLER_LABELS = {"app": "filler"}
PROFILE_LINES = 14


@dataclass(frozen=True)
class Result:
    nodes: int
    vectorized_us: float
    reference_us: float | None
    vectorized_pods: int
    reference_pods: int
    paired_vectorized_us: float | None = None
    """The vectorized median over the pods the reference timed (the ratio's denominator)."""

    @property
    def ratio(self) -> float | None:
        if self.reference_us is None or not self.paired_vectorized_us:
            return None
        return self.reference_us / self.paired_vectorized_us


@dataclass(frozen=True)
class AssumedResult:
    """Per-pod time with `cached` pods counted in the cache (`assumed` of them fillers)."""

    nodes: int
    assumed: int
    cached: int
    plain_us: float
    spread_us: float
    bytes_per_filler: float | None = None
    """tracemalloc: what the fillers added since the previous count hold, per filler."""


@dataclass(frozen=True)
class Memory:
    nodes: int
    traced_bytes: int
    """What tracemalloc saw allocated and still held after the cache and snapshot were built."""
    rss_bytes: int
    """Resident set growth of the process over the same build (reads low when memory is reused)."""

    @property
    def traced_per_node(self) -> float:
        return self.traced_bytes / self.nodes


def reference_sample(pods: int, nodes: int, cap: int | None, max_nodes: int | None) -> int:
    """How many pods the reference times: `cap` when given, else REFERENCE_NODE_BUDGET / nodes,
    at least one of each GPU size, never more than `pods`; 0 above `max_nodes`."""
    if max_nodes is not None and nodes > max_nodes:
        return 0
    wanted = cap if cap is not None else max(len(POD_SIZES), REFERENCE_NODE_BUDGET // nodes)
    return max(0, min(pods, wanted))


def node_types(text: str) -> tuple[NodeSpec, ...]:
    """The seed node types named in `text` (comma-separated); all of them when empty."""
    names = [item.strip() for item in text.split(",") if item.strip()]
    by_name = {spec.type_name: spec for spec in SEED_NODE_TYPES}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(f"unknown node type(s) {unknown}; known: {sorted(by_name)}")
    return tuple(by_name[name] for name in names) or SEED_NODE_TYPES


def int_list(text: str) -> list[int]:
    """`"1000,5000"` -> [1000, 5000]; empty items are skipped, '_' separators are allowed."""
    values = [int(item.strip()) for item in text.split(",") if item.strip()]
    if any(v < 0 for v in values):
        raise ValueError(f"{text!r}: counts must not be negative")
    return values


def build_cache(
    nodes: int, seed: int, rack_size: int = 0, types: Sequence[NodeSpec] = SEED_NODE_TYPES
) -> ClusterCache:
    """`nodes` nodes of `types` in turn with random usage, as the scheduler's cache holds them;
    with a `rack_size`, node i carries the label RACK_LABEL=rack-<i // rack_size>."""
    rng = np.random.default_rng(seed)
    cache = ClusterCache()
    for index in range(nodes):
        spec = types[index % len(types)]
        name = f"{spec.type_name.lower()}-{index}"
        manifest = node_manifest(spec, name)
        if rack_size:
            manifest["metadata"]["labels"][RACK_LABEL] = f"rack-{index // rack_size}"
        cache.add_or_update_node(parse_node(manifest))
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


def bench_pod(gpus: int, index: int, spread: bool = False) -> dict[str, object]:
    """A pending pod asking for `gpus` GPUs; with `spread`, also a hostname spread constraint
    (ScheduleAnyway, so it scores) over the filler pods."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": "2", "memory": "16Gi"},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ]
    }
    if spread:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(FILLER_LABELS)},
            }
        ]
    return {"metadata": {"name": f"p-{index}", "namespace": "bench"}, "spec": spec}


def filler_pod(index: int, node: str) -> dict[str, object]:
    """A small bound CPU-only pod in the bench namespace (what `--assumed` adds)."""
    return {
        "metadata": {"name": f"filler-{index}", "namespace": "bench", "labels": FILLER_LABELS},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
            ],
        },
        "status": {"phase": "Running"},
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


def time_pods(framework: Framework, pods: Sequence[PodInfo], snapshot: Snapshot) -> list[float]:
    """Seconds of `Framework.evaluate` per pod, after one untimed warm-up."""
    framework.evaluate(pods[0], snapshot)  # warm up caches (label columns, imports)
    timings = []
    for pod in pods:
        started = time.perf_counter()
        framework.evaluate(pod, snapshot)
        timings.append(time.perf_counter() - started)
    return timings


def measure(
    nodes: int,
    pods: int,
    seed: int,
    reference_pods: int | None = None,
    reference_max_nodes: int | None = None,
    types: Sequence[NodeSpec] = SEED_NODE_TYPES,
) -> Result:
    cache = build_cache(nodes, seed, types=types)
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    parsed = [parse_pod(bench_pod(POD_SIZES[i % 4], i)) for i in range(pods)]
    timings = time_pods(framework, parsed, snapshot)
    sample = reference_sample(pods, nodes, reference_pods, reference_max_nodes)
    reference_timings = []
    for pod in parsed[:sample]:
        started = time.perf_counter()
        reference_choose(cache, pod.gpus, pod.requests)
        reference_timings.append(time.perf_counter() - started)
    return Result(
        nodes,
        statistics.median(timings) * 1e6,
        statistics.median(reference_timings) * 1e6 if sample else None,
        len(timings),
        sample,
        statistics.median(timings[:sample]) * 1e6 if sample else None,
    )


def measure_assumed(
    nodes: int,
    counts: Sequence[int],
    pods: int,
    seed: int,
    types: Sequence[NodeSpec] = SEED_NODE_TYPES,
) -> list[AssumedResult]:
    """Per-pod time at `nodes` nodes after each count of filler pods (ascending, cumulative)."""
    cache = build_cache(nodes, seed, types=types)
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    plain = [parse_pod(bench_pod(POD_SIZES[i % 4], i)) for i in range(pods)]
    spread = [parse_pod(bench_pod(POD_SIZES[i % 4], i, spread=True)) for i in range(pods)]
    results = []
    added = 0
    for count in sorted(counts):
        gc.collect()
        tracemalloc.start()  # only while the fillers are added: it slows what it traces
        for index in range(added, count):
            cache.add_pod(parse_pod(filler_pod(index, cache.names[index % nodes])))
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        step, added = count - added, max(added, count)
        results.append(
            AssumedResult(
                nodes,
                count,
                len(cache.pods),
                statistics.median(time_pods(framework, plain, snapshot)) * 1e6,
                statistics.median(time_pods(framework, spread, snapshot)) * 1e6,
                traced / step if step > 0 else None,
            )
        )
    return results


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(nodes: int, seed: int, types: Sequence[NodeSpec] = SEED_NODE_TYPES) -> Memory:
    """What the cache and a snapshot of `nodes` nodes hold (see the module docstring)."""
    gc.collect()
    rss_before = resident_bytes()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = build_cache(nodes, seed, types=types)
    snapshot = Snapshot(cache)
    default_framework(SchedulerConfig()).evaluate(parse_pod(bench_pod(1, 0)), snapshot)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    rss = resident_bytes() - rss_before
    del cache, snapshot
    return Memory(nodes, traced, rss)


def profile(nodes: int, pods: int, seed: int, types: Sequence[NodeSpec] = SEED_NODE_TYPES) -> str:
    """The functions with the most own time over `pods` vectorized evaluations at `nodes`."""
    cache = build_cache(nodes, seed, types=types)
    framework = default_framework(SchedulerConfig())
    snapshot = Snapshot(cache)
    parsed = [parse_pod(bench_pod(POD_SIZES[i % 4], i)) for i in range(pods)]
    framework.evaluate(parsed[0], snapshot)
    profiler = cProfile.Profile()
    profiler.enable()
    for pod in parsed:
        framework.evaluate(pod, snapshot)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(PROFILE_LINES)
    return out.getvalue()


def growth_lines(results: Sequence[Result]) -> list[str]:
    """The fitted line of vectorized us/pod over nodes, and the exponent between the two
    largest sizes."""
    if len({r.nodes for r in results}) < 2:
        return []
    ordered = sorted(results, key=lambda r: r.nodes)
    line = fit_line([r.nodes / 1000 for r in ordered], [r.vectorized_us for r in ordered])
    small, large = ordered[-2], ordered[-1]
    k = exponent((small.nodes, small.vectorized_us), (large.nodes, large.vectorized_us))
    return [
        f"fit: {line.intercept:.0f} us + {line.slope:.1f} us per 1,000 nodes "
        f"(worst point {line.worst_residual:.0%} off the line)",
        f"growth exponent {small.nodes} -> {large.nodes} nodes: {k:.2f} (1 = linear)",
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.kernel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="100,1000,5000,50000")
    parser.add_argument("--pods", type=int, default=200, help="pods timed per cluster size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--node-types", default="", help="seed node types to use, e.g. G2-Expansion (default all)"
    )
    parser.add_argument(
        "--reference-pods", type=int, help="pods the reference times (default 200,000 / nodes)"
    )
    parser.add_argument(
        "--reference-max-nodes", type=int, help="skip the reference above this many nodes"
    )
    parser.add_argument("--assumed", default="", help="filler pod counts, e.g. 0,20000,100000")
    parser.add_argument("--assumed-nodes", type=int, default=5000)
    parser.add_argument("--memory", action="store_true", help="memory of cache + snapshot")
    parser.add_argument("--profile", action="store_true", help="profile the largest size")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sizes = int_list(args.nodes)
    types = node_types(args.node_types)
    memory = [measure_memory(n, args.seed, types) for n in sizes] if args.memory else []
    results = [
        measure(n, args.pods, args.seed, args.reference_pods, args.reference_max_nodes, types)
        for n in sizes
    ]
    counts = int_list(args.assumed)
    assumed = (
        measure_assumed(args.assumed_nodes, counts, args.pods, args.seed, types) if counts else []
    )
    if args.output == "json":
        report = {
            "kernel": [dict(asdict(r), ratio=r.ratio) for r in results],
            "assumed": [asdict(a) for a in assumed],
            "memory": [asdict(m) for m in memory],
        }
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{'nodes':>7} {'vectorized us/pod':>18} {'reference us/pod':>17} "
        f"{'ref pods':>8} {'ratio':>8}"
    )
    for r in results:
        reference = f"{r.reference_us:>17.1f}" if r.reference_us is not None else f"{'-':>17}"
        ratio = f"{r.ratio:>7.1f}x" if r.ratio is not None else f"{'-':>8}"
        print(f"{r.nodes:>7} {r.vectorized_us:>18.1f} {reference} {r.reference_pods:>8} {ratio}")
    for r in results:
        target = {5000: TARGET_US_AT_5000, 50000: TARGET_US_AT_50000}.get(r.nodes)
        if target is not None:
            verdict = "met" if r.vectorized_us <= target else "MISSED"
            print(f"target at {r.nodes} nodes: <= {target:.0f} us/pod: {verdict}")
    for line in growth_lines(results):
        print(line)
    if assumed:
        print(f"\nat {args.assumed_nodes} nodes, with more pods in the cache:")
        print(
            f"{'fillers':>8} {'pods cached':>11} {'plain us/pod':>13} {'spread us/pod':>14} "
            f"{'bytes/filler':>13}"
        )
        for a in assumed:
            per = f"{a.bytes_per_filler:>13.0f}" if a.bytes_per_filler is not None else f"{'-':>13}"
            print(f"{a.assumed:>8} {a.cached:>11} {a.plain_us:>13.1f} {a.spread_us:>14.1f} {per}")
    if memory:
        print("\ncache + snapshot memory:")
        print(f"{'nodes':>7} {'tracemalloc MiB':>16} {'bytes/node':>11} {'RSS growth MiB':>15}")
        for m in memory:
            print(
                f"{m.nodes:>7} {m.traced_bytes / 2**20:>16.1f} {m.traced_per_node:>11.0f} "
                f"{m.rss_bytes / 2**20:>15.1f}"
            )
    if args.profile:
        print(f"\nprofile at {max(sizes)} nodes, {args.pods} pods:")
        print(profile(max(sizes), args.pods, args.seed, types))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
