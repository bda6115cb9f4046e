"""`python -m hack.bench.memory runtime`: the daemon's memory on a local cluster, by phase, and
what holds it (the method is in `hack.bench.memory`'s docstring)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes_asyncio import client

from hack.bench.control_plane import NODES_READY_TIMEOUT_S
from hack.bench.control_plane_model import (
    Options,
    RunResult,
    node_specs,
    pod_sizes,
    topologies_of,
)
from hack.bench.control_plane_run import ProcessMeter, run_pods
from hack.bench.memory import child_env, child_process
from hack.bench.memory_child import PHASES
from hack.bench.memory_sites import GROUPINGS, Site, growth, snapshot_groupings
from hack.localcluster import (
    ClusterConfig,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)
from hack.localcluster.cluster import free_port, http_ok
from hack.localcluster.processes import Component
from scheduler.kube.client import api_client_for
from topology.domains import NodeTopology

READY_TIMEOUT_S = 600.0
"""Seconds the daemon may take to answer /readyz (slow when traced)."""
TRACED_SETTLE_S = 120.0
"""A traced daemon schedules ten times slower or more: its run ends only after this long without
a binding (the benchmark's 15 s would cut it short)."""
REPORT_WAIT_S = 600.0
"""Seconds the daemon may take to write a phase (a traced snapshot takes a while)."""
MIB = 1024 * 1024


def read_phases(report: Path, count: int, timeout: float = REPORT_WAIT_S) -> list[dict[str, Any]]:
    """The report's phases once it holds `count` of them; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if report.exists():
            phases: list[dict[str, Any]] = json.loads(report.read_text())["phases"]
            if len(phases) >= count:
                return phases
        time.sleep(0.2)
    raise TimeoutError(f"{report} has fewer than {count} phases after {timeout:.0f} s")


class PhaseMeter(ProcessMeter):
    """The control-plane benchmark's meter of the daemon's process; when `run_pods` reads the
    peak (after the last pod was bound or the run settled, before any pod is deleted), the
    daemon records its "scheduled" phase first."""

    def __init__(self, pid: int, report: Path) -> None:
        super().__init__(pid)
        self.report = report

    def peak_rss_mib(self) -> float:
        os.kill(self.pid, signal.SIGUSR1)
        read_phases(self.report, len(PHASES))
        return super().peak_rss_mib()


@dataclass
class DaemonRun:
    """One daemon's phases (`memory_child.PhaseRecorder` entries), the benchmark's result of its
    run and, when traced, the growth since "imported": phase -> grouping -> sites."""

    label: str
    traced: bool
    phases: list[dict[str, Any]]
    result: RunResult
    growth: dict[str, dict[str, list[Site]]] = field(default_factory=dict)


def start_measured_daemon(
    cluster: LocalCluster, tree: Path, report: Path, trace_frames: int, scheduler_name: str
) -> Component:
    """`memory_child.py daemon` running `gpu-scheduler run` of the checkout at `tree` against
    `cluster` as `scheduler_name` (leader election off, other settings at their defaults), once
    it answers /readyz."""
    port = free_port()
    config = report.with_suffix(".yaml")
    settings = {
        "schedulerName": scheduler_name,
        "leaderElection": {"enabled": False},
        "metricsAddress": f"127.0.0.1:{port}",
    }
    config.write_text(yaml.safe_dump(settings))
    argv = child_process(
        tree,
        "daemon",
        f"--report={report}",
        f"--trace-frames={trace_frames}",
        "--",
        f"--config={config}",
        f"--kubeconfig={cluster.kubeconfig}",
    )
    env = {**child_env(tree), "POD_NAME": scheduler_name}
    name = f"{scheduler_name}-{report.stem}"
    component = cluster.processes.start(name, argv, env=env, cwd=tree)
    cluster.processes.wait_ready(
        component, lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), READY_TIMEOUT_S
    )
    return component


async def measure_daemon(
    cluster: LocalCluster,
    api: client.ApiClient,
    options: Options,
    topologies: dict[str, NodeTopology],
    run: tuple[str, Path, int],
    slug: str,
    work: Path,
) -> DaemonRun:
    """One daemon, `run` = (label, checkout, trace frames), through the three phases; `slug`
    names its namespace and files in `work`."""
    label, tree, trace_frames = run
    report = work / f"{slug}.json"
    if trace_frames:
        options = replace(options, settle_s=max(options.settle_s, TRACED_SETTLE_S))
    component = start_measured_daemon(
        cluster, tree, report, trace_frames, options.gpu_scheduler_name
    )
    try:
        pid = int(component.process.pid)
        os.kill(pid, signal.SIGUSR1)
        read_phases(report, 2)
        result = await run_pods(
            api,
            label,
            options.gpu_scheduler_name,
            pod_sizes(options.pods, options.seed, options.mix),
            topologies,
            options,
            PhaseMeter(pid, report),
            slug=slug,
        )
        phases = read_phases(report, len(PHASES))
    finally:
        component.stop()
    measured = DaemonRun(label, trace_frames > 0, phases, result)
    if measured.traced:
        groupings = {p["phase"]: snapshot_groupings(Path(p["snapshot"])) for p in phases}
        base = groupings[PHASES[0]]
        for phase in PHASES[1:]:
            measured.growth[phase] = {
                name: growth(base[name], groupings[phase][name]) for name in GROUPINGS
            }
        for entry in phases:
            os.unlink(entry["snapshot"])
    return measured


async def measure_daemons(
    cluster: LocalCluster,
    api: client.ApiClient,
    specs: Sequence[NodeSpec],
    options: Options,
    runs: Sequence[tuple[str, Path, int]],
) -> list[DaemonRun]:
    """Each of `runs` (label, checkout, trace frames) one after the other on the Ready nodes of
    `specs`, in namespaces named after `options.namespace_prefix`."""
    topologies = topologies_of(specs)
    with tempfile.TemporaryDirectory() as scratch:
        return [
            await measure_daemon(cluster, api, options, topologies, run, f"run{i}", Path(scratch))
            for i, run in enumerate(runs)
        ]


async def measure_runtime(
    nodes: int, options: Options, runs: Sequence[tuple[str, Path, int]]
) -> tuple[float, list[DaemonRun]]:
    """A fresh cluster of `nodes` kwok nodes and `measure_daemons` on it; also the seconds the
    nodes took to be Ready."""
    config = ClusterConfig(prometheus=False, fake_dcgm=False, kube_scheduler=False)
    with LocalCluster(config) as cluster:
        api = await api_client_for(str(cluster.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            specs = node_specs(nodes)
            started = time.monotonic()
            names = await create_nodes(core, specs, concurrency=64)
            await wait_nodes_ready(core, names, timeout=NODES_READY_TIMEOUT_S)
            ready_s = time.monotonic() - started
            return ready_s, await measure_daemons(cluster, api, specs, options, runs)
        finally:
            await api.close()


def phase_cells(entry: dict[str, Any]) -> str:
    """One phase's figures in MiB, as `print_runtime`'s table shows them."""
    pymalloc, glibc = entry["pymalloc"], entry["glibc"]
    # tracemalloc hooks the allocators: a traced process has no pymalloc figures
    arenas = f"{pymalloc['arenas']:.0f} ({pymalloc['in_use'] / MIB:.1f})" if pymalloc else "-"
    heap = f"{glibc['heap'] / MIB:.1f} ({glibc['in_use'] / MIB:.1f})" if glibc else "-"
    mmapped = f"{glibc['mmapped'] / MIB:.1f}" if glibc else "-"
    traced = f"{entry['traced_mib']:.1f}" if "traced_mib" in entry else "-"
    return (
        f"{entry['rss_mib']:>6.1f} {entry['hwm_mib']:>6.1f} {entry['threads']:>7} "
        f"{entry['sockets']:>7} "
        f"{arenas:>17} {heap:>20} {mmapped:>7} {traced:>6}"
    )


def print_runtime(runs: Sequence[DaemonRun], nodes: int, options: Options, top: int) -> None:
    pods = "the feature mix" if options.features else "plain GPU pods"
    print(f"{nodes} kwok nodes, {options.pods} pods of {pods}, seed {options.seed}; MiB")
    print(
        f"{'run':<20} {'phase':<9} {'VmRSS':>6} {'VmHWM':>6} {'threads':>7} {'sockets':>7} "
        f"{'pymalloc (in use)':>17} {'malloc heap (in use)':>20} {'mmapped':>7} {'traced':>6}"
    )
    for run in runs:
        label = f"{run.label} (traced)" if run.traced else run.label
        for entry in run.phases:
            print(f"{label:<20} {entry['phase']:<9} {phase_cells(entry)}")
        result = run.result
        cpu = result.cpu_s_per_1000_pods
        print(
            f"{'':<22} bound {result.bound}, pending {result.pending}, "
            f"CPU {cpu or 0:.2f} s per 1,000 pods"
        )
    for run in runs:
        for phase, groupings in run.growth.items():
            for name, sites in groupings.items():
                total = sum(site.size for site in sites)
                print(
                    f"\nalive at {phase}, allocated after imported, by {name} "
                    f"(all: {total / MIB:.1f} MiB):"
                )
                for site in sites[:top]:
                    print(f"  {site.size / MIB:>7.2f} MiB {site.count:>9} blocks  {site.key}")


def main_runtime(args: argparse.Namespace, trees: Sequence[tuple[str, Path]]) -> int:
    """The `runtime` command (`hack.bench.memory`); `trees` starts with this checkout."""
    structlog.configure(  # the benchmark's own informers log only problems, to stderr
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    options = Options(pods=args.pods, seed=args.seed, features=args.features)
    label, root = trees[0]
    runs = [(tree_label, tree, 0) for tree_label, tree in trees]
    if args.trace_frames > 0:
        runs.append((label, root, args.trace_frames))
    ready_s, measured = asyncio.run(measure_runtime(args.nodes, options, runs))
    print(f"{args.nodes} nodes Ready in {ready_s:.0f} s", file=sys.stderr)
    if args.output == "table":
        print_runtime(measured, args.nodes, options, args.top)
        return 0
    document = {
        "nodes": args.nodes,
        "options": {**asdict(options), "node_selector": dict(options.node_selector)},
        "runs": [
            {
                "label": run.label,
                "traced": run.traced,
                "phases": run.phases,
                "result": asdict(run.result),
                "growth": {
                    phase: {
                        name: [asdict(site) for site in sites[: args.top]]
                        for name, sites in groupings.items()
                    }
                    for phase, groupings in run.growth.items()
                },
            }
            for run in measured
        ],
    }
    print(json.dumps(document, indent=2))
    return 0
