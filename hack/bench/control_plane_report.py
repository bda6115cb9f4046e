"""The control-plane benchmark's report (`python -m hack.bench.control_plane`): the table of its
runs, the ratios between schedulers, and with `--explain-pending` why pods were left pending.

- `ratios` (pure): per node count and mode, each gpu-scheduler run against kube-scheduler and
  the ceiling; also part of the JSON output.
- `print_table`: the runs and the ratios, as text.
- `print_pending`: `hack.bench.pending`'s occupancy and pending pods per node count and mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hack.bench.control_plane_model import (
    BASELINES,
    KUBE_DEFAULTS,
    Options,
    RunResult,
    pod_name,
)
from hack.bench.dra_shares import SHARE_HEADER, share_cells
from hack.bench.dra_workload import extended_indices
from hack.bench.feature_workload import feature_kinds
from hack.bench.pending import (
    NodeKind,
    RunPlacements,
    occupancy_lines,
    pending_rows,
    render_pending,
)


def ratios(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per node count, mode and gpu-scheduler run (the default one and each variant):
    gpu-scheduler / kube-scheduler, and each / ceiling (None without a ceiling run); with a
    `kube-defaults` run, one more row: gpu-scheduler at its defaults / kube-scheduler at its
    own. `baseline` names the kube-scheduler run of the row."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    rows = []
    groups = dict.fromkeys((r.nodes, r.mode) for r in results)
    for nodes, mode in groups:
        by_run = {r.run: r for r in results if (r.nodes, r.mode) == (nodes, mode)}
        ceiling = by_run.get("ceiling")
        ceiling_rate = ceiling.pods_per_s if ceiling is not None else None
        ours_runs = [r for r in by_run.values() if r.run not in ("ceiling", *BASELINES)]
        pairs = [(ours, by_run["kube-scheduler"]) for ours in ours_runs]
        if KUBE_DEFAULTS in by_run and "gpu-scheduler" in by_run:
            pairs.append((by_run["gpu-scheduler"], by_run[KUBE_DEFAULTS]))
        for ours, theirs in pairs:
            rows.append(
                {
                    "nodes": nodes,
                    "mode": mode,
                    "run": ours.run,
                    "baseline": theirs.run,
                    "gpu_vs_kube_pods_per_s": ratio(ours.pods_per_s, theirs.pods_per_s),
                    "gpu_vs_kube_p50": ratio(ours.p50_ms, theirs.p50_ms),
                    "gpu_vs_kube_p99": ratio(ours.p99_ms, theirs.p99_ms),
                    "gpu_vs_kube_cpu_per_pod": ratio(
                        ours.cpu_s_per_1000_pods, theirs.cpu_s_per_1000_pods
                    ),
                    "gpu_vs_kube_peak_rss": ratio(ours.peak_rss_mib, theirs.peak_rss_mib),
                    "gpu_vs_ceiling_pods_per_s": ratio(ours.pods_per_s, ceiling_rate),
                    "kube_vs_ceiling_pods_per_s": ratio(theirs.pods_per_s, ceiling_rate),
                }
            )
    return rows


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def print_table(results: Sequence[RunResult], options: Options) -> None:
    mix = ", feature mix (affinity, spread, gangs)" if options.features else ""
    if options.dra:
        nodes = "S8" if options.shared else "D8"
        mix += f", DRA ({nodes} nodes, claims from templates; ceiling binds only)"
    if options.shared:
        sizes = "/".join(map(str, options.share_sizes)) + "Gi" if options.share_sizes else "openb"
        mix += f", {len(options.dra_pods().shares)} of the pods asking for a share of one GPU"
        mix += f" ({sizes} sizes)"
    if options.dra and options.dra_extended:
        asking = len(extended_indices(options.pods, options.dra_extended, options.seed))
        mix += f", {asking} of the pods asking for nvidia.com/gpu instead"
    churn = options.lifetime is not None
    mix += f", churn (each pod deleted {options.lifetime:g} s after bound)" if churn else ""
    print(
        f"{options.pods} pods{mix} (1/2/4/8 GPUs: {'/'.join(f'{m:g}' for m in options.mix)}), "
        f"seed {options.seed}, client qps {options.qps} / burst {2 * options.qps}"
    )
    header = (
        f"{'nodes':>6} {'mode':>6} {'run':<15} {'bound':>6} {'pending':>7} {'GPUs':>6} "
        f"{'pods/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'CPU s/1k':>9} {'RSS MiB':>8} "
        f"{'one domain':>16} {'API CPU s/1k':>12}"
        + (f" {'deleted':>7} {'peak GPUs':>9}" if churn else "")
    ) + (SHARE_HEADER if options.shared else "")
    print(header)
    for r in results:
        domain = (
            f"{_cell(r.one_domain_pct)} % of {r.multi_gpu_pods}"
            if r.one_domain_pct is not None
            else "-"
        )
        print(
            f"{r.nodes:>6} {r.mode:>6} {r.run:<15} {r.bound:>6} {r.pending:>7} {r.gpus_bound:>6} "
            f"{_cell(r.pods_per_s):>7} {_cell(r.p50_ms, 0):>8} {_cell(r.p99_ms, 0):>8} "
            f"{_cell(r.cpu_s_per_1000_pods, 2):>9} {_cell(r.peak_rss_mib, 0):>8} {domain:>16} "
            f"{_cell(r.apiserver_cpu_s_per_1000_pods, 2):>12}"
            + (f" {r.deleted:>7} {r.peak_gpus:>9}" if churn else "")
            + (share_cells(r.shares) if options.shared else "")
        )
    for row in ratios(results):
        print(
            f"{row['nodes']} nodes, {row['mode']}: {row['run']} / {row['baseline']}: "
            f"pods/s {_cell(row['gpu_vs_kube_pods_per_s'], 2)}x, "
            f"p50 {_cell(row['gpu_vs_kube_p50'], 2)}x, p99 {_cell(row['gpu_vs_kube_p99'], 2)}x, "
            f"CPU/pod {_cell(row['gpu_vs_kube_cpu_per_pod'], 2)}x, "
            f"peak RSS {_cell(row['gpu_vs_kube_peak_rss'], 2)}x; / ceiling pods/s: "
            f"{row['run']} {_cell(row['gpu_vs_ceiling_pods_per_s'], 2)}x, "
            f"{row['baseline']} {_cell(row['kube_vs_ceiling_pods_per_s'], 2)}x"
        )
        speed, cpu = row["gpu_vs_kube_pods_per_s"], row["gpu_vs_kube_cpu_per_pod"]
        print(
            f"  target throughput >= kube-scheduler: "
            f"{'met' if speed is not None and speed >= 1 else 'MISSED'}; "
            f"target CPU per pod <= kube-scheduler: "
            f"{'met' if cpu is not None and cpu <= 1 else 'MISSED'}"
        )


def print_pending(results: Sequence[RunResult], options: Options) -> None:
    """`hack.bench.pending.render_pending` per node count and mode."""
    names = [pod_name(i) for i in range(options.pods)]
    sizes = dict(zip(names, options.sizes(), strict=True))
    kinds = feature_kinds(options.pods, options.seed) if options.features else []
    kind_of = {name: kind for name, (kind, _) in zip(names, kinds, strict=False)}
    for nodes, mode in dict.fromkeys((r.nodes, r.mode) for r in results):
        runs = [
            RunPlacements(r.run, r.placed, r.pending_why)
            for r in results
            if (r.nodes, r.mode) == (nodes, mode)
        ]
        print(f"\nnodes at the end of each run, {nodes} nodes, {mode}:")
        node_kinds = [
            NodeKind(spec.type_name, spec.gpus, tuple(spec.node_names()))
            for spec in options.cluster_nodes(nodes)
        ]
        print("\n".join(occupancy_lines(runs, node_kinds, sizes)))
        print(f"\npending pods, {nodes} nodes, {mode}:")
        print("\n".join(render_pending(pending_rows(runs, kind_of, sizes), "kube-scheduler")))
