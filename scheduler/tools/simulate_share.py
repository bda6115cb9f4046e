"""`gpu-scheduler simulate --shares`: placement of GPU-sharing pods, whole-GPU pods and CPU-only
pods together, GPUs counted in thousandths.

    gpu-scheduler simulate --shares --nodes NODES --pods PODS [--policy P1,P2,...]
        [--demand 1.3] [--seed 0] [--sample] [--gpu-pods-only] [--nvlink-domains COUNT=LAYOUT]
        [--config FILE] [-o json]

The openb pod lists mark a GPU-sharing pod with `num_gpu` 1 and `gpu_milli` below 1000: it
asks for that many thousandths of one GPU (in the `openb_pod_list_gpushareN.csv` variants such
pods ask for N % of the GPUs the GPU pods ask for). Without `--shares`, `simulate` leaves them
out.

Method: as `simulate` (after Weng et al., "Beware of Fragmentation", USENIX ATC '23): pods arrive
in trace order, repeated from the top (or drawn with replacement with `--sample`), never leave,
until the GPUs they ask for (a share counting as its fraction) reach `--demand` times the
cluster's GPUs; a pod that fits no node is skipped. Every policy sees the same arrivals on a
fresh cluster (`simulate_share_cluster`); the policies are those of `simulate_share_policies`
(default: all of gpu-scheduler, gpu-scheduler-whole-gpus, first-fit, best-fit,
least-allocated, most-allocated, random).

Reported per policy (at the end of the run):

- `gpus_unallocated`: free GPU in all, in GPUs (the free thousandths of every GPU / 1000), and
  its share of the cluster's GPUs;
- `gpus_fragmented`: of that, the GPU fragmented as the paper measures it
  (`simulate_share_gpus.fragmented_milli`): seen by the workload's GPU pods, weighted by how
  often each shape arrived, the free GPU they could not use; and its share of the cluster's
  GPUs;
- `gpus_partly_used`: GPUs holding shares with room left;
- `pods_placed` / `pods_skipped`, and per kind: `share_pods_*`, `whole_gpu_pods_*`,
  `cpu_only_pods_*`;
- `multi_gpu_pods`, `single_domain_pct`: placed pods of 2 or more GPUs, and the share of them
  inside one NVLink domain;
- `wall_s`, `pods_per_s`: time to build the cluster and place every arrival.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.config import SchedulerConfig, load_config
from scheduler.model.objects import NodeInfo
from scheduler.model.resources import CPU, MEMORY
from scheduler.tools.simulate_legend import SHARE_COLUMNS, legend_lines
from scheduler.tools.simulate_share_cluster import (
    CPU_ONLY,
    SHARE,
    WHOLE_GPUS,
    ShareCluster,
    ShareWorkload,
    share_workload,
)
from scheduler.tools.simulate_share_gpus import WHOLE, fragmented_milli
from scheduler.tools.simulate_share_policies import SHARE_POLICY_NAMES, share_policy
from scheduler.tools.simulate_trace import (
    TraceNode,
    TracePod,
    build_nodes,
    parse_domain_overrides,
    read_nodes,
    read_pods,
)

KINDS = (SHARE, WHOLE_GPUS, CPU_ONLY)
MULTI_GPU = 2
"""Pods asking for at least this many GPUs are multi-GPU pods."""
JsonObject = dict[str, Any]


@dataclass
class ShareResult:
    """Counters of one policy's run; `as_json` gives the reported figures."""

    policy: str
    gpus_total: int = 0
    free_milli: int = 0
    fragmented_milli: float = 0.0
    gpus_partly_used: int = 0
    arrived: dict[str, int] = field(default_factory=dict)
    placed: dict[str, int] = field(default_factory=dict)
    multi_gpu_pods: int = 0
    single_domain: int = 0
    wall_s: float = 0.0

    def as_json(self) -> JsonObject:
        def pct(part: float, whole: float) -> float | None:
            return round(100.0 * part / whole, 2) if whole else None

        arrived = sum(self.arrived.values())
        placed = sum(self.placed.values())
        found: JsonObject = {
            "policy": self.policy,
            "gpus_total": self.gpus_total,
            "gpus_unallocated": round(self.free_milli / WHOLE, 2),
            "gpus_unallocated_pct": pct(self.free_milli, self.gpus_total * WHOLE),
            "gpus_fragmented": round(self.fragmented_milli / WHOLE, 2),
            "gpus_fragmented_pct": pct(self.fragmented_milli, self.gpus_total * WHOLE),
            "gpus_partly_used": self.gpus_partly_used,
            "pods_arrived": arrived,
            "pods_placed": placed,
            "pods_skipped": arrived - placed,
        }
        for kind, label in ((SHARE, "share"), (WHOLE_GPUS, "whole_gpu"), (CPU_ONLY, "cpu_only")):
            came = self.arrived.get(kind, 0)
            found[f"{label}_pods_placed"] = self.placed.get(kind, 0)
            found[f"{label}_pods_skipped"] = came - self.placed.get(kind, 0)
        found["multi_gpu_pods"] = self.multi_gpu_pods
        found["single_domain_pct"] = pct(self.single_domain, self.multi_gpu_pods)
        found["wall_s"] = round(self.wall_s, 3)
        found["pods_per_s"] = round(arrived / self.wall_s, 1) if self.wall_s else None
        return found


def run_share_policy(
    name: str,
    nodes: Sequence[NodeInfo],
    workload: ShareWorkload,
    settings: SchedulerConfig,
    seed: int,
) -> ShareResult:
    """Place every arrival of `workload` on a fresh cluster of `nodes` with policy `name`."""
    started = time.perf_counter()
    policy = share_policy(name, settings, seed)
    cluster = ShareCluster(nodes)
    result = ShareResult(name)
    for arrival in workload.arrivals:
        result.arrived[arrival.kind] = result.arrived.get(arrival.kind, 0) + 1
        choice = policy.choose(arrival, cluster)
        if choice is None:
            continue
        row, gpus = choice
        cluster.commit(arrival, row, gpus)
        result.placed[arrival.kind] = result.placed.get(arrival.kind, 0) + 1
        if arrival.kind == WHOLE_GPUS and arrival.gpus >= MULTI_GPU:
            domains = cluster.domains[row, list(gpus)]  # domains: (gpus,)
            result.multi_gpu_pods += 1
            result.single_domain += bool(domains[0] >= 0 and (domains == domains[0]).all())
    free = cluster.free  # free: (rows, gpus)
    result.gpus_total = int(cluster.gpu_count.sum())
    result.free_milli = int(free.sum())
    result.gpus_partly_used = int(((free > 0) & (free < WHOLE)).sum())
    fragmented = fragmented_milli(  # fragmented: (rows,)
        free,
        cluster.free_of(CPU),
        cluster.free_of(MEMORY),
        cluster.pods_free(),
        workload.types,
    )
    result.fragmented_milli = float(fragmented.sum())
    result.wall_s = time.perf_counter() - started
    return result


def simulate_shares(
    node_list: Sequence[TraceNode],
    pod_list: Sequence[TracePod],
    policies: Sequence[str],
    *,
    demand: float,
    seed: int = 0,
    sample: bool = False,
    cpu_pods: bool = True,
    layouts: dict[int, str] | None = None,
    settings: SchedulerConfig | None = None,
) -> tuple[ShareWorkload, list[ShareResult]]:
    """Run each of `policies` (names in `SHARE_POLICY_NAMES`; `ValueError` otherwise) on the
    same workload, shares included; results in the order given."""
    unknown = [p for p in policies if p not in SHARE_POLICY_NAMES]
    if unknown:
        known = ", ".join(SHARE_POLICY_NAMES)
        raise ValueError(f"unknown policy {', '.join(unknown)} for --shares (known: {known})")
    nodes = build_nodes(node_list, layouts or {})
    workload = share_workload(pod_list, nodes, demand, sample, seed, cpu_pods)
    config = settings or SchedulerConfig()
    results = [run_share_policy(name, nodes, workload, config, seed) for name in policies]
    return workload, results


# -- output ------------------------------------------------------------------------------------


def describe(
    nodes_path: Path, pods_path: Path, workload: ShareWorkload, gpus: int, demand: float, seed: int
) -> list[str]:
    """The lines above the table: the inputs, the workload, the arrival order."""
    w = workload
    order = (
        f"sampled with replacement (seed {seed})"
        if w.sampled
        else f"in trace order ({w.passes} pass{'es' if w.passes != 1 else ''})"
    )
    shares = sum(a.kind == SHARE for a in w.arrivals)
    demand_pct = 100.0 * w.gpus_requested / gpus if gpus else 0.0
    left_out = (
        f"; {w.cpu_only_excluded} CPU-only left out: --gpu-pods-only" if w.cpu_only_excluded else ""
    )
    return [
        f"nodes: {nodes_path} ({gpus} GPUs)",
        f"pods:  {pods_path} ({w.source_pods} pods: {w.share_pods} GPU-sharing, "
        f"{w.whole_gpu_pods} whole-GPU, {w.cpu_only_pods} CPU-only{left_out})",
        f"arrivals: {len(w.arrivals)} ({shares} GPU-sharing) {order}, no departures; GPUs "
        f"requested {w.gpus_requested:.1f} = {demand_pct:.1f} % of the cluster "
        f"(--demand {demand:g})",
        f"fragmented: seen by the {int(w.types.weight.size)} GPU pod shapes of the arrivals, "
        "weighted by arrivals",
    ]


def render_share_table(lines: list[str], results: Sequence[ShareResult]) -> str:
    """`lines`, a blank line, one row per policy, and the legend."""
    header = [
        "POLICY",
        "PLACED",
        "SKIPPED",
        "SHARES",
        "WHOLE_GPU",
        "GPUS_UNALLOCATED",
        "GPUS_FRAGMENTED",
        "PARTLY_USED",
        "ONE_DOMAIN",
        "WALL_S",
        "PODS/S",
    ]
    table = [header]
    for result in results:
        row = result.as_json()
        one = row["single_domain_pct"]
        table.append(
            [
                row["policy"],
                str(row["pods_placed"]),
                str(row["pods_skipped"]),
                f"{row['share_pods_placed']} / {row['share_pods_skipped']}",
                f"{row['whole_gpu_pods_placed']} / {row['whole_gpu_pods_skipped']}",
                f"{row['gpus_unallocated']:.1f} ({row['gpus_unallocated_pct']} %)",
                f"{row['gpus_fragmented']:.1f} ({row['gpus_fragmented_pct']} %)",
                str(row["gpus_partly_used"]),
                "-" if one is None else f"{one} % of {row['multi_gpu_pods']}",
                f"{row['wall_s']:.2f}",
                str(row["pods_per_s"] or "-"),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    rendered = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    return "\n".join([*lines, "", *rendered, "", *legend_lines(SHARE_COLUMNS)])


def run_shares(args: argparse.Namespace, policies: list[str]) -> int:
    """`simulate --shares` with the parsed flags of `simulate`; raises on bad input (the
    caller reports it)."""
    settings = load_config(args.config, {}, {}) if args.config else SchedulerConfig()
    node_list = read_nodes(args.nodes)
    workload, results = simulate_shares(
        node_list,
        read_pods(args.pods),
        policies,
        demand=args.demand,
        seed=args.seed,
        sample=args.sample,
        cpu_pods=not args.gpu_pods_only,
        layouts=parse_domain_overrides(args.nvlink_domains or []),
        settings=settings,
    )
    if args.output == "json":
        print(json.dumps([r.as_json() for r in results], indent=2))
        return 0
    gpus = results[0].gpus_total if results else int(np.sum([n.gpus for n in node_list]))
    lines = describe(args.nodes, args.pods, workload, gpus, args.demand, args.seed)
    print(render_share_table(lines, results))
    return 0
