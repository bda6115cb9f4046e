"""Allocation cost per pod: `Framework.evaluate` for pods with ResourceClaims on DRA nodes,
beside the same pods through the device-plugin path, in this process (no cluster).

    python -m hack.bench.dra_kernel [--nodes 5000,50000] [--pods 8] [--max-node-visits N]
        [--seed 0] [--profile] [-o json]

The cluster: `nodes` nodes of the local cluster's `D8` type (8 H200 GPUs, NVLink domains gpu-0..3
and gpu-4..7), each with its one ResourceSlice (`hack.localcluster.dra.node_resource_slice`) in
the scheduler's `DraStore`, and the `gpu.nvidia.com` DeviceClass (one CEL selector). Each node
has a random part of its GPUs in use (seeded, as `hack.bench.kernel.build_cache` draws it): an
allocated claim holding those devices, and a bound pod with the CPU and memory that go with them.
The baseline is `hack.bench.kernel.build_cache` over the same number of `G2-Expansion` nodes
(8 GPUs, the same domains, the same CPU and memory) with the same draws, so both paths see the
same free GPUs per node.

The pods ask for 1, 2, 4 and 8 GPUs in turn: through a ResourceClaim (`c-<n>`, one request of
exactly n devices of the class, not allocated) named by `spec.resourceClaims`, and for the
baseline through `nvidia.com/gpu`. Both run the daemon's profile (`default_framework`); the DRA
pods are timed twice: with the selector matcher the daemon uses (`CelSelectors`, whose memo keeps
verdicts across pods; 65,536 entries by default, one per device and expression), and with a
matcher that evaluates every selector (`Unmemoized`). The first pod of each run is a warm-up
(untimed; it fills the memo). CEL figures per pod are `CelSelectors.counters` differences:
evaluations run and answers served from the memo.

The DRA filter runs the allocator on every node that passed the other filters, so a pod costs
about nodes x (the allocator on one node); above `--max-node-visits` (nodes x timed pods) only
a sample of `max(4, max_node_visits // nodes)` pods is timed (the table says how many).
`--profile` prints where the DRA time goes at the smallest size: the cumulative seconds per pod
of the parts (allocator, CEL, pools, NVLink domains, score) and the functions with most own
time. `--read-profile FILE --profile-pods N` prints the same for a cProfile file written by
`python -m hack.bench.control_plane --dra --profile FILE`, per pod of the N the run bound.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hack.bench.kernel import bench_pod, build_cache, int_list
from hack.localcluster.dra import DRIVER, GPU_CLASS, gpu_device_class, node_resource_slice
from hack.localcluster.nodes import D8, G2_EXPANSION, node_manifest
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.dra.cel import CelSelectors
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import Device, parse_resource_slice
from scheduler.model.objects import PodInfo, parse_node, parse_pod
from scheduler.plugins.dynamic_resources import DynamicResources
from scheduler.state.cache import ClusterCache

POD_SIZES = (1, 2, 4, 8)
NAMESPACE = "bench"
REQUEST = "gpus"
MAX_NODE_VISITS = 200_000
"""Default budget of nodes x timed pods per matcher (at about 1 ms per node, ~3 minutes)."""
PROFILE_LINES = 16
PROFILE_PARTS: tuple[tuple[str, str, str], ...] = (
    ("DynamicResources.filter", "plugins/dynamic_resources.py", "filter"),
    ("Allocator.allocate", "dra/allocator.py", "allocate"),
    ("CEL matches (memo lookups)", "dra/cel.py", "matches"),
    ("CEL evaluations", "dra/cel.py", "_evaluate"),
    ("DraStore.pools_for", "state/dra.py", "pools_for"),
    ("DraStore.slices_for", "state/dra.py", "slices_for"),
    ("NVLink domain map", "plugins/dynamic_resources.py", "domains"),
    ("domain occupancy", "dra/node_score.py", "domain_occupancy"),
    ("DynamicResources.score", "plugins/dynamic_resources.py", "score"),
    ("Framework.evaluate", "framework/runtime.py", "evaluate"),
    ("parse_pod", "model/objects.py", "parse_pod"),
    ("parse_resource_claim", "model/claims.py", "parse_resource_claim"),
    ("claim writes (allocate_and_reserve)", "kube/claims.py", "allocate_and_reserve"),
    ("waiting in epoll", "~", "<method 'poll' of 'select.epoll' objects>"),
)
"""(label, file suffix, function): the parts `--profile` and `--read-profile` sum (a
coroutine's cumulative time counts only its own runs, not its waits)."""


class Unmemoized(CelSelectors):
    """`CelSelectors` that evaluates every selector (its program cache still applies)."""

    def matches(self, expression: str, driver: str, device: Device, memo_key: Hashable) -> bool:
        self.counters.calls += 1
        return self.evaluate(expression, driver, device)


@dataclass(frozen=True)
class SizeResult:
    """One GPU count at one cluster size: medians per pod over the pods timed."""

    nodes: int
    gpus: int
    pods: int
    """Pods of this size timed (per path)."""
    dra_ms: float
    dra_unmemoized_ms: float
    baseline_us: float
    cel_evaluations: float
    """CEL evaluations per pod with the memo (mean)."""
    memo_hits: float
    """Verdicts served from the memo per pod (mean)."""
    cel_evaluations_unmemoized: float
    feasible: int
    """Nodes the DRA filter let through for the last pod of the size."""


def used_gpus(nodes: int, seed: int, gpus: int = 8) -> list[list[int]]:
    """The GPU indices in use on each node: `hack.bench.kernel.build_cache`'s draws (same
    generator, same order), so both caches hold the same free GPUs."""
    rng = np.random.default_rng(seed)
    used: list[list[int]] = []
    for _ in range(nodes):
        count = int(rng.integers(0, gpus + 1))
        used.append(sorted(rng.choice(gpus, size=count, replace=False).tolist()) if count else [])
    return used


def allocated_claim(name: str, node: str, devices: Sequence[int]) -> dict[str, Any]:
    """A claim in NAMESPACE allocated `devices` (indices) of `node`'s pool."""
    results = [
        {"request": REQUEST, "driver": DRIVER, "pool": node, "device": f"gpu-{i}"} for i in devices
    ]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": claim_spec(len(devices)),
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [term]},
            }
        },
    }


def claim_spec(gpus: int) -> dict[str, Any]:
    exactly = {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": gpus}
    return {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}


def pending_claim(gpus: int) -> dict[str, Any]:
    """The unallocated claim `c-<gpus>` the bench pods of that size use."""
    name = f"c-{gpus}"
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": claim_spec(gpus),
    }


def dra_bench_pod(gpus: int, index: int) -> dict[str, Any]:
    """A pending pod using claim `c-<gpus>` (CPU and memory as `hack.bench.kernel.bench_pod`)."""
    return {
        "metadata": {"name": f"p-{index}", "namespace": NAMESPACE, "uid": f"pod-{index}"},
        "spec": {
            "resourceClaims": [{"name": REQUEST, "resourceClaimName": f"c-{gpus}"}],
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "2", "memory": "16Gi"},
                        "claims": [{"name": REQUEST}],
                    },
                }
            ],
        },
    }


def build_dra_cache(nodes: int, seed: int) -> ClusterCache:
    """`nodes` D8 nodes with their slices, the DeviceClass, the usage of `used_gpus` as
    allocated claims and bound pods, and the pending claims of every size."""
    cache = ClusterCache()
    store = cache.dra
    store.put_class(parse_device_class(gpu_device_class()))
    model = D8.gpu_model()
    for index, used in enumerate(used_gpus(nodes, seed, D8.gpus)):
        name = f"d8-{index}"
        cache.add_or_update_node(parse_node(node_manifest(D8, name)))
        store.put_slice(parse_resource_slice(node_resource_slice(name, f"uid-{name}", model, 8)))
        if not used:
            continue
        store.put_claim(parse_resource_claim(allocated_claim(f"used-{index}", name, used)))
        count = len(used)
        pod = {
            "metadata": {"name": f"used-{index}", "namespace": NAMESPACE},
            "spec": {
                "nodeName": name,
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "requests": {"cpu": f"{count * 4}", "memory": f"{count * 32}Gi"}
                        },
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
        cache.add_pod(parse_pod(pod))
    for gpus in POD_SIZES:
        store.put_claim(parse_resource_claim(pending_claim(gpus)))
    return cache


def dra_framework(matcher: CelSelectors) -> Framework:
    """The daemon's profile with `matcher` as DynamicResources' selector matcher."""
    framework = default_framework(SchedulerConfig())
    for plugin in framework.filters:
        if isinstance(plugin, DynamicResources):
            plugin.matcher = matcher
    return framework


def sample_size(pods: int, nodes: int, max_node_visits: int) -> int:
    """Pods timed per path at `nodes` nodes: `pods`, or fewer so that nodes x pods stays within
    `max_node_visits`, but at least one of each GPU size."""
    return max(len(POD_SIZES), min(pods, max_node_visits // max(1, nodes)))


@dataclass(frozen=True)
class _Timed:
    seconds: list[float]
    evaluations: list[int]
    hits: list[int]
    feasible: int


def time_sizes(
    framework: Framework, snapshot: Snapshot, pods: Sequence[PodInfo], selectors: CelSelectors
) -> dict[int, _Timed]:
    """Per GPU count: seconds and CEL counter differences per pod, after one untimed warm-up."""
    framework.evaluate(pods[0], snapshot)
    out: dict[int, _Timed] = {}
    for pod in pods:
        counters = selectors.counters
        evaluations, hits = counters.evaluations, counters.memo_hits
        started = time.perf_counter()
        evaluation = framework.evaluate(pod, snapshot)
        elapsed = time.perf_counter() - started
        timed = out.setdefault(pod_gpus(pod), _Timed([], [], [], 0))
        timed.seconds.append(elapsed)
        timed.evaluations.append(counters.evaluations - evaluations)
        timed.hits.append(counters.memo_hits - hits)
        out[pod_gpus(pod)] = _Timed(
            timed.seconds, timed.evaluations, timed.hits, int(evaluation.diagnosis.feasible.sum())
        )
    return out


def pod_gpus(pod: PodInfo) -> int:
    """The GPUs a bench pod asks for: its claim's name says it (`c-<n>`), else `pod.gpus`."""
    if pod.resource_claims is not None:
        return int(pod.resource_claims.claims[0].claim_name.removeprefix("c-"))
    return pod.gpus


def measure(nodes: int, pods: int, seed: int, max_node_visits: int) -> list[SizeResult]:
    """Every GPU size at `nodes` nodes: DRA with and without the memo, and the baseline."""
    count = sample_size(pods, nodes, max_node_visits)
    dra_pods = [parse_pod(dra_bench_pod(POD_SIZES[i % 4], i)) for i in range(count)]
    plain_pods = [parse_pod(bench_pod(POD_SIZES[i % 4], i)) for i in range(count)]
    dra_snapshot = Snapshot(build_dra_cache(nodes, seed))
    memo = CelSelectors()
    with_memo = time_sizes(dra_framework(memo), dra_snapshot, dra_pods, memo)
    plain = Unmemoized()
    without = time_sizes(dra_framework(plain), dra_snapshot, dra_pods, plain)
    baseline_cache = build_cache(nodes, seed, types=(G2_EXPANSION,))
    baseline = time_sizes(
        default_framework(SchedulerConfig()), Snapshot(baseline_cache), plain_pods, memo
    )
    results = []
    for gpus in POD_SIZES:
        if gpus not in with_memo:
            continue
        a, b, c = with_memo[gpus], without[gpus], baseline[gpus]
        results.append(
            SizeResult(
                nodes=nodes,
                gpus=gpus,
                pods=len(a.seconds),
                dra_ms=statistics.median(a.seconds) * 1e3,
                dra_unmemoized_ms=statistics.median(b.seconds) * 1e3,
                baseline_us=statistics.median(c.seconds) * 1e6,
                cel_evaluations=statistics.mean(a.evaluations),
                memo_hits=statistics.mean(a.hits),
                cel_evaluations_unmemoized=statistics.mean(b.evaluations),
                feasible=a.feasible,
            )
        )
    return results


def profile_parts(stats: pstats.Stats, pods: int) -> list[tuple[str, float, int]]:
    """(label, cumulative seconds per pod, calls per pod) of each of PROFILE_PARTS found."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    parts = []
    for label, suffix, function in PROFILE_PARTS:
        cumulative, calls = 0.0, 0
        for (path, _, name), (_, ncalls, _, cum, _) in table.items():
            if name == function and str(path).endswith(suffix):
                cumulative += cum
                calls += ncalls
        if calls:
            parts.append((label, cumulative / pods, calls // pods))
    return parts


def profile(nodes: int, pods: int, seed: int) -> str:
    """Where `pods` DRA evaluations (with the memo, after a warm-up) spend their time."""
    parsed = [parse_pod(dra_bench_pod(POD_SIZES[i % 4], i)) for i in range(pods)]
    snapshot = Snapshot(build_dra_cache(nodes, seed))
    framework = dra_framework(CelSelectors())
    framework.evaluate(parsed[0], snapshot)
    profiler = cProfile.Profile()
    profiler.enable()
    for pod in parsed:
        framework.evaluate(pod, snapshot)
    profiler.disable()
    title = f"profile at {nodes} nodes, {pods} DRA pods (1/2/4/8 GPUs in turn), per pod:"
    return summarize(profiler, pods, title)


def summarize(source: cProfile.Profile | str, pods: int, title: str) -> str:
    """`title`, the parts of PROFILE_PARTS per pod, and the functions with most own time, of a
    profiler or a cProfile output file (`python -m cProfile -o FILE`)."""
    out = io.StringIO()
    stats = pstats.Stats(source, stream=out)
    lines = [title]
    for label, seconds, calls in profile_parts(stats, pods):
        lines.append(f"  {label:<36} {seconds * 1e3:>9.1f} ms cumulative  {calls:>8} calls")
    stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    return "\n".join(lines) + "\n" + out.getvalue()


def print_table(results: Sequence[SizeResult]) -> None:
    print(
        f"{'nodes':>7} {'GPUs':>4} {'pods':>4} {'DRA ms/pod':>11} {'no memo ms':>11} "
        f"{'plain us/pod':>13} {'DRA/plain':>10} {'CEL evals':>10} {'memo hits':>10} "
        f"{'evals no memo':>14} {'feasible':>9}"
    )
    for r in results:
        ratio = r.dra_ms * 1e3 / r.baseline_us if r.baseline_us else float("nan")
        print(
            f"{r.nodes:>7} {r.gpus:>4} {r.pods:>4} {r.dra_ms:>11.1f} {r.dra_unmemoized_ms:>11.1f} "
            f"{r.baseline_us:>13.0f} {ratio:>9.0f}x {r.cel_evaluations:>10.0f} "
            f"{r.memo_hits:>10.0f} {r.cel_evaluations_unmemoized:>14.0f} {r.feasible:>9}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.dra_kernel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="5000,50000")
    parser.add_argument("--pods", type=int, default=8, help="pods timed per path (sizes in turn)")
    parser.add_argument("--max-node-visits", type=int, default=MAX_NODE_VISITS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="profile the smallest size")
    parser.add_argument("--profile-pods", type=int, default=8, help="pods profiled (or bound)")
    parser.add_argument(
        "--read-profile",
        default="",
        metavar="FILE",
        help="only summarize a cProfile file (e.g. control_plane --profile) per --profile-pods",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if args.read_profile:
        title = f"{args.read_profile}, per pod of {args.profile_pods}:"
        print(summarize(args.read_profile, args.profile_pods, title))
        return 0
    sizes = int_list(args.nodes)
    results = [r for n in sizes for r in measure(n, args.pods, args.seed, args.max_node_visits)]
    if args.output == "json":
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print_table(results)
    if args.profile:
        print()
        print(profile(min(sizes), args.profile_pods, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
