"""One gang's scheduling cycle, offline: `plan_gang` against placing its members one by one.

    python -m hack.bench.gang_kernel [--nodes 1000,5000,50000] [--sizes 2,4,8,16]
        [--member-gpus 4] [--repeats 7] [--rack-size 0] [--node-types G2-Expansion] [--seed 0]
        [-o json]

The cluster is the kernel benchmark's (`hack.bench.kernel.build_cache`: the three seed node types,
or those named by `--node-types`, each node with a random part of its GPUs in use). A gang of
`size` members, each asking for `member-gpus` GPUs, is placed in two ways, one after the other
in this process:

- gang: `scheduler.gangs.planning.plan_gang` (all `size` members needed), what the daemon's gang
  cycle runs: each member filtered and scored on the nodes left, assumed before the next;
- one by one: the single-pod cycle's path per member (`Framework.evaluate` on a fresh snapshot,
  `scheduler.core.placement.place`, `ClusterCache.assume`), stopping at the first member that
  finds no node.

Both are timed from the first member to the last assumption; afterwards (untimed) every member is
forgotten, so each repeat starts from the same cache. The two alternate `repeats` times and the
medians are reported, with the ratio gang / one by one. With `--rack-size N`, node i carries
`example.com/rack=rack-<i // N>` and the gang asks for one rack (PodGroup topology key), which
makes `plan_gang` split the nodes by rack first; the one-by-one path ignores racks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from hack.bench.gang_workload import RACK_LABEL
from hack.bench.growth import fit_line
from hack.bench.kernel import bench_pod, build_cache, int_list, node_types
from scheduler.config import SchedulerConfig
from scheduler.core.placement import place
from scheduler.core.profile import default_framework
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.planning import plan_gang
from scheduler.model.objects import PodInfo, parse_pod
from scheduler.state.cache import ClusterCache
from topology.scoring import NO_NODE


@dataclass(frozen=True)
class GangResult:
    nodes: int
    size: int
    gang_ms: float
    single_ms: float
    gang_placed: int
    single_placed: int
    gang_nodes_used: int
    single_nodes_used: int

    @property
    def ratio(self) -> float:
        """Gang time / one-by-one time for the same members."""
        return self.gang_ms / self.single_ms

    @property
    def gang_us_per_member(self) -> float:
        return self.gang_ms * 1e3 / self.size


def members(size: int, gpus: int) -> list[PodInfo]:
    """`size` pending pods of `gpus` GPUs each (the kernel benchmark's pod shape)."""
    pods = []
    for index in range(size):
        manifest = bench_pod(gpus, index)
        manifest["metadata"] = {"name": f"gang-{size}-{index}", "namespace": "bench"}
        pods.append(parse_pod(manifest))
    return pods


def place_gang(
    cache: ClusterCache, framework: Framework, pods: Sequence[PodInfo], key: str
) -> list[str]:
    """`plan_gang` for all of `pods`; the nodes of the members it placed (assumed)."""
    plan = plan_gang(cache, framework, pods, len(pods), key)
    return [m.node for m in plan.placed] if plan.fits else []


def place_one_by_one(
    cache: ClusterCache, framework: Framework, pods: Sequence[PodInfo]
) -> list[str]:
    """The single-pod cycle for each of `pods` in turn; the nodes of those placed (assumed)."""
    nodes = []
    for pod in sorted(pods, key=lambda p: (-p.gpus, p.key)):  # plan_gang's order
        evaluation = framework.evaluate(pod, Snapshot(cache))
        if evaluation.chosen == NO_NODE:
            break
        placement = place(cache, pod, evaluation)
        cache.assume(pod, placement.node, placement.gpus)
        nodes.append(placement.node)
    return nodes


def forget_all(cache: ClusterCache, pods: Sequence[PodInfo]) -> None:
    for pod in pods:
        cache.forget(pod.key)


def measure(
    cache: ClusterCache, framework: Framework, size: int, gpus: int, repeats: int, key: str
) -> GangResult:
    """Medians over `repeats` alternating runs of both paths; the cache is left as found."""
    pods = members(size, gpus)
    gang_times, single_times = [], []
    gang_nodes: list[str] = []
    single_nodes: list[str] = []
    for _ in range(repeats):
        started = time.perf_counter()
        gang_nodes = place_gang(cache, framework, pods, key)
        gang_times.append(time.perf_counter() - started)
        forget_all(cache, pods)
        started = time.perf_counter()
        single_nodes = place_one_by_one(cache, framework, pods)
        single_times.append(time.perf_counter() - started)
        forget_all(cache, pods)
    return GangResult(
        cache.rows,
        size,
        statistics.median(gang_times) * 1e3,
        statistics.median(single_times) * 1e3,
        len(gang_nodes),
        len(single_nodes),
        len(set(gang_nodes)),
        len(set(single_nodes)),
    )


def per_member_fits(results: Sequence[GangResult]) -> list[str]:
    """Per node count: the gang's time as a line over its size (fixed cost + cost per member),
    over the gangs that were placed (a gang that fits nowhere tries every rack: another cost)."""
    lines = []
    for nodes in sorted({r.nodes for r in results}):
        rows = [r for r in results if r.nodes == nodes and r.gang_placed == r.size]
        if len({r.size for r in rows}) < 2:
            continue
        line = fit_line([r.size for r in rows], [r.gang_ms for r in rows])
        lines.append(
            f"{nodes} nodes: gang ms ~ {line.intercept:.2f} + {line.slope:.3f} x members "
            f"(worst point {line.worst_residual:.0%} off the line)"
        )
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.gang_kernel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="1000,5000,50000")
    parser.add_argument("--sizes", default="2,4,8,16", help="gang sizes (members)")
    parser.add_argument("--member-gpus", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rack-size", type=int, default=0, help="nodes per rack; 0: no racks")
    parser.add_argument("--node-types", default="", help="seed node types (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    key = RACK_LABEL if args.rack_size else ""
    types = node_types(args.node_types)
    results = []
    for nodes in int_list(args.nodes):
        cache = build_cache(nodes, args.seed, args.rack_size, types)
        framework = default_framework(SchedulerConfig())
        framework.evaluate(members(1, args.member_gpus)[0], Snapshot(cache))  # warm up
        for size in int_list(args.sizes):
            results.append(measure(cache, framework, size, args.member_gpus, args.repeats, key))
    if args.output == "json":
        rows = [dict(asdict(r), ratio=r.ratio) for r in results]
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'nodes':>7} {'members':>7} {'gang ms':>9} {'us/member':>10} {'one-by-one ms':>14} "
        f"{'gang/1x1':>9} {'placed':>7} {'nodes used (gang/1x1)':>22}"
    )
    for r in results:
        placed = f"{r.gang_placed}/{r.single_placed}"
        used = f"{r.gang_nodes_used}/{r.single_nodes_used}"
        print(
            f"{r.nodes:>7} {r.size:>7} {r.gang_ms:>9.2f} {r.gang_us_per_member:>10.0f} "
            f"{r.single_ms:>14.2f} {r.ratio:>8.2f}x {placed:>7} {used:>22}"
        )
    for line in per_member_fits(results):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
