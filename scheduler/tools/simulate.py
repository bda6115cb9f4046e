"""`gpu-scheduler simulate`: placement quality of several policies on one trace, in process.

    gpu-scheduler simulate --nodes NODES --pods PODS [--policy P1,P2,...] [--demand 1.3]
        [--seed 0] [--sample] [--nvlink-domains COUNT=LAYOUT ...] [--config FILE] [-o json]
    gpu-scheduler simulate --nodes NODES (--gangs GANGS.yaml | --random-gangs N) [--seed 0] ...

With `--gangs` or `--random-gangs` the workload is gangs placed in time, all-or-nothing by
gpu-scheduler against pod by pod; see `scheduler.tools.simulate_gangs`. With `--shares` the
GPU-sharing pods are placed too, GPUs counted in thousandths; see
`scheduler.tools.simulate_share`. The rest of this docstring is about `--pods` alone.

NODES and PODS are openb CSV files (Alibaba cluster-trace-gpu-v2023) or native YAML; see
`scheduler.tools.simulate_trace` for both formats. Policies are those of
`scheduler.tools.simulate_policies`
(default: all of gpu-scheduler, least-allocated, most-allocated, best-fit, random); each runs the
scheduler's own cache and `Framework.evaluate` with the production filters, no API server.

Method (after the ATC'23 fragmentation paper, Weng et al., "Beware of Fragmentation"):

1. The workload is the input's whole-GPU pods and CPU-only pods. GPU-sharing pods (`gpu_milli`
   below 1000) are left out, because the scheduler hands out whole GPUs only; how many were left
   out is reported. CPU-only pods stay in and are placed by the policy under test, as in the
   paper: they take cpu and memory, which can strand GPUs. `--gpu-pods-only` leaves them out
   (the case where another scheduler places them on other nodes).
2. Pods arrive one at a time, never leave, until the GPUs requested by the arrived pods reach
   `demand` times the cluster's GPUs. Order: the input's order, repeated from the top when the
   list runs out before the demand is reached (each pass is a fresh copy of every pod); with
   `--sample`, each arrival is drawn uniformly with replacement from the workload by a generator
   seeded with `--seed`. Every policy sees the same sequence.
3. Each arrival is evaluated against every node; it goes to the chosen node, or is skipped when
   no node fits it. The pod is committed with `ClusterCache.assume`.

GPU indices inside the chosen node: gpu-scheduler uses `scheduler.core.placement.place` (best NVLink
domain). The baselines know nothing of NVLink; two choices are measured for them in the same run:
the best one inside their node (`place`, as an NVLink-aware device plugin would choose; this is
the occupancy the cache holds) and the naive one, the lowest-numbered free GPUs (kept on the
side). A baseline's node choice never depends on which GPU indices are taken (its filters and
score count GPUs only), so both are exact.

Reported per policy:

- `gpus_unallocated_pct`: GPUs not requested by any placed pod at the end, over all GPUs.
- `pods_placed`, `pods_skipped`: arrivals placed, and arrivals that fit on no node
  (`pods_skipped_multi_gpu`: those asking for 2 or more GPUs; `skipped_by_gpus`: by GPU count).
- `multi_gpu_pods`: placed pods asking for 2 or more GPUs. `single_domain_pct`: of those, the
  share whose GPUs lie inside one NVLink domain (best choice inside the node);
  `single_domain_naive_pct`: the same with the lowest-numbered free GPUs (gpu-scheduler: equal
  to `single_domain_pct`). `single_domain_possible`: multi-GPU pods for which, when they
  arrived, some feasible node had a domain with enough free GPUs; `single_domain_when_possible_pct`:
  the share of those placed inside one domain (gpu-scheduler's Narrow step makes this 100 %).
  A pod asking for more GPUs than any domain holds (8 GPUs on two domains of 4) can never be
  inside one domain.
- `gpus_stranded`: free GPUs at the end on nodes that cannot take a pod of the workload's
  largest GPU request now: the node has fewer free GPUs than that request, or less free cpu or
  memory than the smallest cpu and memory among the workload's pods of that size. Nodes too
  small ever to take such a pod count too (their free GPUs are usable only by smaller pods).
- `wall_s`, `pods_per_s`: time to build the cache and place every arrival, and arrivals per
  second of that.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from scheduler.config import ConfigError, SchedulerConfig, load_config
from scheduler.core.placement import place
from scheduler.framework.runtime import NO_NODE, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import NodeInfo, PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY
from scheduler.state.cache import ClusterCache
from scheduler.tools.plots import add_plot_flag
from scheduler.tools.simulate_gangs import (
    DEFAULT_GANG_POLICIES,
    GANG_POLICIES,
    random_gangs,
    read_gangs,
    render_gang_table,
    simulate_gangs,
)
from scheduler.tools.simulate_legend import POD_COLUMNS, help_epilog, legend_lines
from scheduler.tools.simulate_plot import check_simulation_plot, write_simulation_plot
from scheduler.tools.simulate_policies import NVLINK_AWARE, POLICIES
from scheduler.tools.simulate_series import UsageSeries, gpu_usage, sample_stride
from scheduler.tools.simulate_share import run_shares
from scheduler.tools.simulate_share_policies import SHARE_POLICY_NAMES
from scheduler.tools.simulate_trace import (
    TraceNode,
    TracePod,
    arrival_order,
    build_nodes,
    parse_domain_overrides,
    parsed_pod,
    read_nodes,
    read_pods,
)
from topology.occupancy import NO_DOMAIN

DEFAULT_DEMAND = 1.3
MULTI_GPU = 2
"""Pods asking for at least this many GPUs are multi-GPU pods."""

JsonObject = dict[str, Any]
BoolArray = npt.NDArray[np.bool_]


# -- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The arrival sequence every policy sees, and what it was built from.

    `pods` are parsed pending pods with unique names (`<trace name>-a<arrival index>`).
    `largest_gpus` is the largest GPU request among the arrivals (0 without GPU pods);
    `largest_cpu` (millicores) and `largest_memory` (bytes) are the smallest cpu and memory
    requests among the arrivals of that size.
    """

    pods: list[PodInfo]
    source_pods: int
    whole_gpu_pods: int
    cpu_only_pods: int
    cpu_only_excluded: int
    gpu_sharing_excluded: int
    gpus_requested: int
    target_gpus: float
    passes: int
    sampled: bool
    largest_gpus: int
    largest_cpu: int
    largest_memory: int


def build_workload(
    pods: Sequence[TracePod],
    cluster_gpus: int,
    demand: float,
    sample: bool,
    seed: int,
    cpu_pods: bool = True,
) -> Workload:
    """Arrivals until the requested GPUs reach `demand * cluster_gpus` (see the module
    docstring); without `cpu_pods` the CPU-only pods are left out too. A workload without GPU
    pods arrives once (trace order) or len(workload) times (sampling). `demand` must be > 0
    (`ValueError`)."""
    eligible = [p for p in pods if not p.shares_gpu and (cpu_pods or p.gpus)]
    templates = [parsed_pod(p) for p in eligible]
    gpus = [t.gpus for t in templates]
    order, passes = arrival_order(gpus, demand, cluster_gpus, sample, seed)
    requested = sum(gpus[index] for index in order)
    arrivals = [
        replace(
            templates[index],
            name=f"{templates[index].name}-a{i}",
            key=f"{templates[index].namespace}/{templates[index].name}-a{i}",
        )
        for i, index in enumerate(order)
    ]
    largest = max((p.gpus for p in arrivals), default=0)
    sized = [p for p in arrivals if p.gpus == largest] if largest else []
    return Workload(
        pods=arrivals,
        source_pods=len(pods),
        whole_gpu_pods=sum(1 for p in eligible if p.gpus),
        cpu_only_pods=sum(1 for p in eligible if not p.gpus),
        cpu_only_excluded=0 if cpu_pods else sum(1 for p in pods if not p.gpus),
        gpu_sharing_excluded=sum(1 for p in pods if p.shares_gpu),
        gpus_requested=requested,
        target_gpus=demand * cluster_gpus,
        passes=passes,
        sampled=sample,
        largest_gpus=largest,
        largest_cpu=min((int(p.requests[CPU]) for p in sized), default=0),
        largest_memory=min((int(p.requests[MEMORY]) for p in sized), default=0),
    )


# -- one policy --------------------------------------------------------------------------------


@dataclass
class PolicyResult:
    """Counters of one policy's run; `as_json` gives the reported figures."""

    policy: str
    gpus_total: int = 0
    gpus_unallocated: int = 0
    gpus_stranded: int = 0
    pods_arrived: int = 0
    pods_placed: int = 0
    pods_skipped: int = 0
    gpu_sharing_excluded: int = 0
    cpu_only_excluded: int = 0
    multi_gpu_pods: int = 0
    single_domain: int = 0
    single_domain_naive: int = 0
    single_domain_possible: int = 0
    single_domain_when_possible: int = 0
    wall_s: float = 0.0
    skipped_by_size: dict[int, int] = field(default_factory=dict)
    series: UsageSeries = field(default_factory=UsageSeries)
    """GPUs allocated, fragmented and idle as the pods arrived (`simulate_series`)."""

    def as_json(self) -> JsonObject:
        def pct(part: int, whole: int) -> float | None:
            return round(100.0 * part / whole, 2) if whole else None

        return {
            "policy": self.policy,
            "gpus_total": self.gpus_total,
            "gpus_unallocated": self.gpus_unallocated,
            "gpus_unallocated_pct": pct(self.gpus_unallocated, self.gpus_total),
            "gpus_stranded": self.gpus_stranded,
            "gpus_stranded_pct": pct(self.gpus_stranded, self.gpus_total),
            "pods_arrived": self.pods_arrived,
            "pods_placed": self.pods_placed,
            "pods_skipped": self.pods_skipped,
            "pods_skipped_multi_gpu": sum(
                v for k, v in self.skipped_by_size.items() if k >= MULTI_GPU
            ),
            "skipped_by_gpus": {str(k): v for k, v in sorted(self.skipped_by_size.items())},
            "gpu_sharing_excluded": self.gpu_sharing_excluded,
            "cpu_only_excluded": self.cpu_only_excluded,
            "multi_gpu_pods": self.multi_gpu_pods,
            "single_domain_pct": pct(self.single_domain, self.multi_gpu_pods),
            "single_domain_naive_pct": pct(self.single_domain_naive, self.multi_gpu_pods),
            "single_domain_possible": self.single_domain_possible,
            "single_domain_when_possible_pct": pct(
                self.single_domain_when_possible, self.single_domain_possible
            ),
            "wall_s": round(self.wall_s, 3),
            "pods_per_s": round(self.pods_arrived / self.wall_s, 1) if self.wall_s else None,
        }


def _lowest_free_in_one_domain(node: NodeInfo, used: BoolArray, gpus: int) -> bool:
    """Take the `gpus` lowest-numbered free GPUs of `used` (gpus,) in place; whether they lie
    inside one NVLink domain."""
    taken = np.flatnonzero(~used)[:gpus]  # taken: (gpus,)
    used[taken] = True
    domains = np.asarray(node.topology.gpu_domain_ids())[taken]  # domains: (gpus,)
    return bool(domains.size) and bool((domains == domains[0]).all())


def simulate_policy(
    policy: str, framework: Framework, nodes: Sequence[NodeInfo], workload: Workload
) -> PolicyResult:
    """Place every arrival of `workload` on a fresh cache of `nodes` with `framework`,
    recording `result.series` on the way."""
    started = time.perf_counter()
    result = PolicyResult(policy, pods_arrived=len(workload.pods))
    result.gpu_sharing_excluded = workload.gpu_sharing_excluded
    result.cpu_only_excluded = workload.cpu_only_excluded
    cache = ClusterCache()
    for node in nodes:
        cache.add_or_update_node(node)
    snapshot = Snapshot(cache)
    aware = policy in NVLINK_AWARE
    naive_used = {n.name: np.zeros(n.topology.gpu_count, dtype=bool) for n in nodes}
    largest = (workload.largest_gpus, workload.largest_cpu, workload.largest_memory)
    stride = sample_stride(len(workload.pods))
    requested = 0
    for arrival, pod in enumerate(workload.pods):
        if arrival % stride == 0:
            result.series.add(arrival, requested, *gpu_usage(cache, *largest))
        requested += pod.gpus
        evaluation = framework.evaluate(pod, snapshot)
        if evaluation.chosen == NO_NODE:
            result.pods_skipped += 1
            result.skipped_by_size[pod.gpus] = result.skipped_by_size.get(pod.gpus, 0) + 1
            continue
        placement = place(cache, pod, evaluation)
        if pod.gpus >= MULTI_GPU:
            feasible = evaluation.diagnosis.feasible  # feasible: (rows,)
            room = (snapshot.free_per_domain >= pod.gpus).any(axis=1)  # room: (rows,)
            possible = bool((feasible & room).any())
            single = placement.domain != NO_DOMAIN
            node = cache.nodes[placement.node]
            naive = _lowest_free_in_one_domain(node, naive_used[placement.node], pod.gpus)
            result.multi_gpu_pods += 1
            result.single_domain += single
            result.single_domain_naive += single if aware else naive
            result.single_domain_possible += possible
            result.single_domain_when_possible += possible and single
        elif pod.gpus:
            _lowest_free_in_one_domain(cache.nodes[placement.node], naive_used[placement.node], 1)
        cache.assume(pod, placement.node, placement.gpus)
        result.pods_placed += 1
    usage = gpu_usage(cache, *largest)
    result.series.add(len(workload.pods), requested, *usage)
    result.gpus_total, allocated, result.gpus_stranded = usage
    result.gpus_unallocated = result.gpus_total - allocated
    result.wall_s = time.perf_counter() - started
    return result


# -- the command -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Everything one `simulate` invocation reports."""

    nodes_path: Path
    pods_path: Path
    node_count: int
    workload: Workload
    demand: float
    seed: int
    results: list[PolicyResult]


def simulate(
    node_list: Sequence[TraceNode],
    pod_list: Sequence[TracePod],
    policies: Sequence[str],
    *,
    demand: float = DEFAULT_DEMAND,
    seed: int = 0,
    sample: bool = False,
    cpu_pods: bool = True,
    layouts: Mapping[int, str] | None = None,
    settings: SchedulerConfig | None = None,
) -> tuple[Workload, list[PolicyResult]]:
    """Run each of `policies` (names in `POLICIES`; `ValueError` otherwise) on the same
    workload; results in the order given."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        known = ", ".join(POLICIES)
        raise ValueError(f"unknown policy {', '.join(unknown)} (known: {known})")
    nodes = build_nodes(node_list, layouts or {})
    cluster_gpus = sum(int(n.allocatable[GPU]) for n in nodes)
    workload = build_workload(pod_list, cluster_gpus, demand, sample, seed, cpu_pods)
    config = settings or SchedulerConfig()
    results = [
        simulate_policy(name, POLICIES[name](config, seed), nodes, workload) for name in policies
    ]
    return workload, results


def _describe(run: Run) -> list[str]:
    w = run.workload
    gpus = run.results[0].gpus_total if run.results else 0
    order = (
        f"sampled with replacement (seed {run.seed})"
        if w.sampled
        else f"in trace order ({w.passes} pass{'es' if w.passes != 1 else ''})"
    )
    demand_pct = 100.0 * w.gpus_requested / gpus if gpus else 0.0
    lines = [
        f"nodes: {run.nodes_path} ({run.node_count} nodes, {gpus} GPUs)",
        f"pods:  {run.pods_path} ({w.source_pods} pods: {w.whole_gpu_pods} whole-GPU, "
        f"{w.cpu_only_pods} CPU-only, {w.gpu_sharing_excluded} GPU-sharing left out: "
        "--shares places them too"
        + (
            f"; {w.cpu_only_excluded} CPU-only left out: --gpu-pods-only"
            if w.cpu_only_excluded
            else ""
        )
        + ")",
        f"arrivals: {len(w.pods)} {order}, no departures; GPUs requested {w.gpus_requested} "
        f"= {demand_pct:.1f} % of the cluster (--demand {run.demand:g})",
    ]
    if w.largest_gpus:
        lines.append(
            f"stranded: free GPUs on nodes that cannot take a {w.largest_gpus}-GPU pod "
            f"(< {w.largest_gpus} free GPUs, < {w.largest_cpu}m cpu or "
            f"< {w.largest_memory // 2**20}Mi memory free)"
        )
    return lines


def _cell(value: object, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def render_table(run: Run) -> str:
    """The header lines and one row per policy."""
    header = [
        "POLICY",
        "PLACED",
        "SKIPPED",
        "SKIPPED_MULTI_GPU",
        "GPUS_UNALLOCATED",
        "GPUS_STRANDED",
        "MULTI_GPU",
        "ONE_DOMAIN",
        "ONE_DOMAIN_NAIVE",
        "WHEN_POSSIBLE",
        "WALL_S",
        "PODS/S",
    ]
    lines = [header]
    for result in run.results:
        row = result.as_json()
        lines.append(
            [
                row["policy"],
                str(row["pods_placed"]),
                str(row["pods_skipped"]),
                str(row["pods_skipped_multi_gpu"]),
                f"{row['gpus_unallocated']} ({_cell(row['gpus_unallocated_pct'], ' %')})",
                f"{row['gpus_stranded']} ({_cell(row['gpus_stranded_pct'], ' %')})",
                str(row["multi_gpu_pods"]),
                _cell(row["single_domain_pct"], " %"),
                _cell(row["single_domain_naive_pct"], " %"),
                f"{_cell(row['single_domain_when_possible_pct'], ' %')} "
                f"of {row['single_domain_possible']}",
                f"{row['wall_s']:.2f}",
                _cell(row["pods_per_s"]),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    return "\n".join([*_describe(run), "", *table, "", *legend_lines(POD_COLUMNS)])


def _workload_flag(args: argparse.Namespace) -> str:
    """Which workload flag was given: "pods", "gangs" or "random_gangs" (ValueError unless one)."""
    given = [name for name in ("pods", "gangs", "random_gangs") if getattr(args, name) is not None]
    if len(given) != 1:
        named = " and ".join("--" + g.replace("_", "-") for g in given) or "none"
        raise ValueError(f"give one of --pods, --gangs, --random-gangs (got {named})")
    return given[0]


def _run_gangs(args: argparse.Namespace, policies: list[str]) -> int:
    """`simulate --gangs` / `--random-gangs` (`scheduler.tools.simulate_gangs`)."""
    settings = load_config(args.config, {}, {}) if args.config else SchedulerConfig()
    layouts = parse_domain_overrides(args.nvlink_domains or [])
    nodes = build_nodes(read_nodes(args.nodes), layouts)
    if args.gangs is not None:
        gangs, source = read_gangs(args.gangs), str(args.gangs)
    else:
        gangs = random_gangs(args.random_gangs, args.seed, nodes, args.gang_topology_key or "")
        source = f"--random-gangs {args.random_gangs} --seed {args.seed}"
    results = simulate_gangs(nodes, gangs, policies, seed=args.seed, settings=settings)
    if args.output == "json":
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print(render_gang_table(args.nodes, source, gangs, results))
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    """The `simulate` subcommand: 0 on success, 2 on bad input."""
    try:
        mode = _workload_flag(args)
        check_simulation_plot(args.plot, mode)
        default = DEFAULT_GANG_POLICIES if mode != "pods" else tuple(POLICIES)
        if args.shares:
            default = SHARE_POLICY_NAMES
        policies = [p.strip() for p in (args.policy or ",".join(default)).split(",") if p.strip()]
        if args.shares:
            if mode != "pods":
                raise ValueError("--shares goes with --pods, not with gangs")
            if args.plot is not None:
                raise ValueError("--plot draws whole-GPU simulations; not available with --shares")
            return run_shares(args, policies)
        if mode != "pods":
            return _run_gangs(args, policies)
        settings = load_config(args.config, {}, {}) if args.config else SchedulerConfig()
        layouts = parse_domain_overrides(args.nvlink_domains or [])
        node_list = read_nodes(args.nodes)
        pod_list = read_pods(args.pods)
        workload, results = simulate(
            node_list,
            pod_list,
            policies,
            demand=args.demand,
            seed=args.seed,
            sample=args.sample,
            cpu_pods=not args.gpu_pods_only,
            layouts=layouts,
            settings=settings,
        )
    except (ConfigError, OSError, ValueError, yaml.YAMLError) as error:
        print(f"gpu-scheduler simulate: {error}", file=sys.stderr)
        return 2
    run = Run(args.nodes, args.pods, len(node_list), workload, args.demand, args.seed, results)
    if args.output == "json":
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print(render_table(run))
    if args.plot is not None:
        return write_simulation_plot(args, results, workload.largest_gpus)
    return 0


def add_simulate_parser(commands: Any) -> None:
    """Add the `simulate` subcommand to an argparse subparsers object (handler: run_simulate)."""
    parser = commands.add_parser(
        "simulate",
        help="compare placement policies on a node list and a pod trace, in process",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nodes", type=Path, required=True, help="node list: openb CSV or YAML with `nodes:`"
    )
    parser.add_argument("--pods", type=Path, help="pod list: openb CSV or YAML with `pods:`")
    parser.add_argument(
        "--gangs",
        type=Path,
        help="instead of --pods: gangs in time, YAML with `gangs:` (see simulate_gangs)",
    )
    parser.add_argument(
        "--random-gangs",
        type=int,
        metavar="N",
        help="instead of --pods: N gangs drawn with --seed (2-16 members of 1-8 GPUs)",
    )
    parser.add_argument(
        "--gang-topology-key",
        metavar="LABEL",
        help="with --random-gangs: each gang, with probability 1/3, must stay on one value of "
        "this node label",
    )
    parser.add_argument(
        "--policy",
        default=None,
        help=f"comma-separated policies to compare (default: {','.join(POLICIES)}; with gangs: "
        f"{','.join(DEFAULT_GANG_POLICIES)}, known: {','.join(GANG_POLICIES)})",
    )
    parser.add_argument(
        "--demand",
        type=float,
        default=DEFAULT_DEMAND,
        help="stop when the arrived pods request this many times the cluster's GPUs (1.3)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling and tie-breaks")
    parser.add_argument(
        "--sample",
        action="store_true",
        help="draw arrivals with replacement from the pod list instead of trace order",
    )
    parser.add_argument(
        "--gpu-pods-only",
        action="store_true",
        help="leave the CPU-only pods out too (as when another scheduler places them)",
    )
    parser.add_argument(
        "--shares",
        action="store_true",
        help="place the GPU-sharing pods too (a fraction of one GPU, gpu_milli < 1000), GPUs "
        f"in thousandths; policies {','.join(SHARE_POLICY_NAMES)} (see simulate_share)",
    )
    parser.add_argument(
        "--nvlink-domains",
        action="append",
        metavar="COUNT=LAYOUT",
        help="NVLink layout for nodes with COUNT GPUs, e.g. 8=0-3,4-7 (repeatable; default: "
        "2 GPUs one domain, 4 two of 2, 8 two of 4)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="scheduler configuration YAML"
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_plot_flag(parser, "GPUs allocated, fragmented and idle as the pods arrive, per policy")
    parser.set_defaults(handler=run_simulate)
