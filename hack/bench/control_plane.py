"""gpu-scheduler against kube-scheduler on one real control plane, beside a bare binding loop.

    python -m hack.bench.control_plane [--nodes 1000,5000] [--pods 5000] [--qps 400] [--seed 0]
        [--rate 50,100] [--lifetime SECONDS] [--no-burst] [--variant LABEL:KEY=VALUE,...]
        [--tree LABEL:PATH] [--settle-seconds 15] [-o json]
        [--features | --dra [--dra-extended SHARE | --shared SHARE [--share-sizes GI,...]]]

For each node count: one local cluster (etcd, kube-apiserver, kube-controller-manager, kwok,
kube-scheduler; no Prometheus, no fake exporter) holding that many kwok nodes of the three seed
types in equal shares. Then, one after the other and each in a fresh namespace, the same seeded pod
set (1, 2, 4 or 8 GPUs in the shares 40/30/20/10 %, nodeSelector `type=kwok`) goes to:

- ceiling: schedulerName nobody serves; as soon as a pod's create returns, a loop in this
  process POSTs its binding to a node planned beforehand (next fit by GPU count), through a token
  bucket of `qps` per second and burst `2 * qps`, at most 64 in flight: the fastest any scheduler
  could bind here;
- gpu-scheduler: `python -m scheduler.cli run` as a child process, leader election off, every
  other setting at its default; each `--variant` adds one more gpu-scheduler run with some
  settings changed (`--variant bind64:binding.concurrency=64`), so that a setting is measured off
  and on side by side in one run;
- kube-scheduler: the cluster's own, `clientConnection.qps` / `burst` = `qps` / `2 * qps`.

Rate limits: kube-scheduler (and kube-controller-manager) get `--qps` through
`ClusterConfig.client_qps`; the default, 400 (burst 800), is far above the rate the API server
here sustains, so kube-scheduler's client is not what limits it (scheduler_perf likewise runs
kube-scheduler with a high client QPS). The table's header prints the value. gpu-scheduler's
bindings go through its own `binding.*` settings.

Modes: burst (every pod created at once, `--create-concurrency` requests at a time) and, for
each `--rate`, a steady arrival of that many pod creations a second, so that latency is also
measured below the ceiling, where a scheduler is not saturated. Each mode repeats the three runs.

With `--features` the pod set is the feature mix instead (`hack.bench.feature_workload`, seeded;
the same GPU sizes): 30 % plain pods, 15 % with preferred and 15 % with required pod affinity to
their group (label `bench.gpu-scheduler.io/app=g<i mod 10>`, topology key the node type),
20 % with a topology spread over their group (maxSkew 2, half DoNotSchedule, half
ScheduleAnyway), 20 % gang members (4 consecutive pods naming a scheduling.k8s.io/v1beta1
PodGroup with minCount 4, created before the run's pods, in every run; kube-scheduler's gang
plugins are on through the cluster's GenericWorkload feature gate).

With `--dra` the nodes and pods use Dynamic Resource Allocation instead (`hack.bench.dra_workload`):
every node is a `D8` (8 H200 GPUs, NVLink domains gpu-0..3 and gpu-4..7) whose GPUs are
published as one ResourceSlice (driver and DeviceClass `gpu.nvidia.com`); each run's namespace
gets one ResourceClaimTemplate per GPU count (`gpus-1` .. `gpus-8`, exactly n devices of the
class) and every pod names the template of its size (same seeded sizes, same mix); the
resourceclaim controller makes the claims, and gpu-scheduler and kube-scheduler (DRA is GA in
1.37: no configuration) allocate them. The ceiling there binds only: it writes no allocation
(its pods' claims stay unallocated), so it bounds the Binding part of the work and is lower than
what a DRA scheduler must do (a finalizer and a status write per claim, besides the Binding).
Between runs the benchmark also waits until the namespace lists no claim. `--dra-extended SHARE`
makes that share of the pods (seeded) ask for `nvidia.com/gpu` instead of naming a template: the
DeviceClass's `extendedResourceName` makes each scheduler create their claims (the ceiling's pods
then bind without any claim). `--rate` works in this mode too (steady arrival). `--shared SHARE`
puts S8 nodes in place of the D8 (GPUs that allow multiple allocations, memory a consumable
capacity) and makes that share of the pods (seeded) ask for part of one GPU's memory, sizes
from the openb GPU-sharing trace or `--share-sizes` (`hack.bench.dra_shares`); the table adds
the GPUs each run left partly used, the nodes they are on, and whether its claims carry a
`shareID` and `consumedCapacity`.

Churn, `--lifetime L` (meant with `--rate R`, in either pod set): every pod of a gpu-scheduler or
kube-scheduler run is deleted (grace 0) L seconds after this process saw it bound, while the
others keep arriving (`hack.bench.churn.Reaper`), so that schedulers place pods into room freed
by others and fragmented by earlier choices. By Little's law about R * (L + latency) pods are
live at once; `hack.bench.churn` says how to choose R and L for a load near capacity
(`--dra --nodes 200 --rate 10 --lifetime 55`: about 89 % of the 1,600 GPUs). No ceiling run under
churn (its plan binds each pod once, into room that only shrinks). The table adds the pods
deleted during the run and the most GPUs held at once.

Pods are created by this process while the scheduler under test is already running; the pod set
and its order are the same in every run. Between runs the pods are deleted (grace 0) and the
benchmark waits until the namespace lists none, so each run starts on empty nodes. A run ends
when every pod is bound (under churn: was bound, some since deleted), or when no pod was bound
for `--settle-seconds` after the last one was created; pods still unbound are reported as
pending
(1,000 nodes hold 4,664 GPUs; 5,000 pods of this mix ask for about 13,000).

Measured per run, on this process's monotonic clock:

- pods/s: pods bound / (last bound - first create request sent);
- latency p50 / p99: from the moment a pod's create request is sent to the moment a watch in this
  process sees its spec.nodeName set (creationTimestamp has 1 s resolution, so it is not used);
- CPU s per 1,000 pods: utime + stime of the scheduler process (/proc/<pid>/stat) from the first
  create to the last bound, sampled every 0.25 s, per 1,000 pods bound;
- peak RSS: VmHWM of the scheduler process (/proc/<pid>/status) after the run. gpu-scheduler's
  process lives for its run only; kube-scheduler's lives through the whole benchmark, so its
  high-water mark is reset (/proc/<pid>/clear_refs) before its run;
- API CPU s per 1,000 pods: the same for the kube-apiserver process, every run (the ceiling's
  too), so that what each scheduler costs the API server is read beside what it costs itself;
- one domain: of the bound pods asking for 2 or 4 GPUs (no NVLink domain of the seed types holds
  8), the share whose GPUs lie inside one domain: gpu-scheduler's from its `gpu-scheduler.io/gpus`
  annotation; kube-scheduler chooses nodes only, so its pods get the best choice inside the node
  it picked (`topology.occupancy.choose_gpus`, replaying each node's pods in creation order).
  In DRA mode, both allocate: of the bound pods asking for 2 or 4 GPUs whose node still had a
  domain with room for them, the share whose claim's allocated devices lie inside one domain
  (`hack.bench.dra_workload.dra_quality`, replaying the allocations in bind order).
  Under churn both replays also give GPUs back (`hack.bench.churn.timeline`): a DRA pod's devices
  when this process's claim watch sees its claim's allocation gone (which is when the schedulers
  can see them free; the pod's deletion comes earlier), a plain pod's GPUs when the pod watch sees
  it deleted; the plain replay then follows the bind order instead of the creation order.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes_asyncio import client

from hack.bench.control_plane_model import (
    KUBE_DEFAULTS,
    KUBE_SCHEDULER,
    NOBODY,
    Options,
    RunResult,
    mode_name,
    plan_bindings,
    topologies_of,
)
from hack.bench.control_plane_report import print_pending, print_table, ratios
from hack.bench.control_plane_run import READY_TIMEOUT_S, ProcessMeter, run_pods
from hack.bench.dra_shares import parse_share_sizes
from hack.localcluster import (
    ClusterConfig,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)
from hack.localcluster.cluster import REPO_ROOT, free_port
from hack.localcluster.processes import Component
from scheduler.kube.client import api_client_for
from topology.domains import NodeTopology

NODES_READY_TIMEOUT_S = 1800.0


# -- the schedulers ----------------------------------------------------------------------------


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def overrides_of(text: str) -> dict[str, Any]:
    """`binding.concurrency=64,binding.qps=0` as a nested configuration mapping; values are
    read as YAML scalars."""
    settings: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"setting {item[:80]!r} is not KEY=VALUE")
        *parents, leaf = key.split(".")
        level = settings
        for parent in parents:
            level = level.setdefault(parent, {})
        level[leaf] = yaml.safe_load(value)
    return settings


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def start_gpu_scheduler(
    cluster: LocalCluster,
    scheduler_name: str,
    overrides: Mapping[str, Any] | None = None,
    profile: str = "",
    tree: str = "",
) -> Component:
    """`python -m scheduler.cli run` as a component of the cluster (so its teardown covers it),
    leader election off, `overrides` merged into its configuration, under cProfile writing
    `profile` when given (at its graceful stop), from the checkout at `tree` when given (else
    this one); returns once its caches have synced."""
    root = Path(tree).resolve() if tree else REPO_ROOT
    port = free_port()
    config = cluster.work_dir / f"{scheduler_name}-bench.yaml"
    base = {
        "schedulerName": scheduler_name,
        "leaderElection": {"enabled": False},
        "metricsAddress": f"127.0.0.1:{port}",
    }
    config.write_text(yaml.safe_dump(_merge(base, overrides or {})))
    argv = [
        sys.executable,
        *(["-m", "cProfile", "-o", os.path.abspath(profile)] if profile else []),
        "-m",
        "scheduler.cli",
        "run",
        f"--config={config}",
        f"--kubeconfig={cluster.kubeconfig}",
    ]
    env = {**os.environ, "PYTHONPATH": str(root), "POD_NAME": scheduler_name}
    component = cluster.processes.start(scheduler_name, argv, env=env, cwd=root)
    cluster.processes.wait_ready(
        component, lambda: _ready(f"http://127.0.0.1:{port}/readyz"), READY_TIMEOUT_S
    )
    return component


def component_pid(cluster: LocalCluster, name: str) -> int:
    """The process id of the cluster's running component `name` (kube-scheduler, kube-apiserver)."""
    for component in cluster.processes.components:
        if component.name == name and component.alive():
            return int(component.process.pid)
    raise RuntimeError(f"the cluster runs no {name}")


async def side_by_side(
    cluster: LocalCluster,
    api: client.ApiClient,
    specs: Sequence[NodeSpec],
    options: Options,
) -> list[RunResult]:
    """Per mode (`Options.modes`), the runs over the nodes of `specs` (created and Ready):
    ceiling (not under churn: its plan binds each pod once, into room that only shrinks),
    gpu-scheduler, each variant of it, kube-scheduler; every run with the API server's CPU."""
    apiserver = ProcessMeter(component_pid(cluster, "kube-apiserver"))
    run_pods_here = functools.partial(run_pods, apiserver=apiserver)
    topologies = topologies_of(specs)
    sizes = options.sizes()
    capacity = [(name, spec.gpus) for spec in specs for name in spec.node_names()]
    results: list[RunResult] = []
    for mode_index, rate in enumerate(options.modes()):
        gpu_runs: list[tuple[str, Mapping[str, Any], str]] = [
            ("gpu-scheduler", {}, ""),
            *((label, overrides, "") for label, overrides in options.variants),
            *((label, {}, tree) for label, tree in options.trees),
        ]
        if options.profile and rate is None:
            profiled = dict(options.variants).get(options.profile_variant, {})
            gpu_runs.append(("cprofile", profiled, ""))
        tag = f"m{mode_index}"
        if options.lifetime is None:
            results.append(
                await run_pods_here(
                    api,
                    "ceiling",
                    NOBODY,
                    sizes,
                    topologies,
                    options,
                    plan=plan_bindings(sizes, capacity),
                    rate=rate,
                    slug=f"ceiling-{tag}",
                )
            )
        for run_index, (label, overrides, tree) in enumerate(gpu_runs):
            profile = options.profile if label == "cprofile" else ""
            component = start_gpu_scheduler(
                cluster, options.gpu_scheduler_name, overrides, profile, tree
            )
            try:
                meter = ProcessMeter(component.process.pid)
                results.append(
                    await run_pods_here(
                        api,
                        label,
                        options.gpu_scheduler_name,
                        sizes,
                        topologies,
                        options,
                        meter,
                        rate=rate,
                        slug=f"gpu{run_index}-{tag}",
                    )
                )
            finally:
                component.stop()
        meter = ProcessMeter(component_pid(cluster, "kube-scheduler"))
        meter.reset_peak()
        results.append(
            await run_pods_here(
                api,
                "kube-scheduler",
                KUBE_SCHEDULER,
                sizes,
                topologies,
                options,
                meter,
                rate=rate,
                slug=f"kube-{tag}",
            )
        )
        if options.kube_defaults:
            results.append(
                await run_kube_defaults(cluster, api, sizes, topologies, options, rate, apiserver)
            )
    return results


async def run_kube_defaults(
    cluster: LocalCluster,
    api: client.ApiClient,
    sizes: Sequence[int],
    topologies: Mapping[str, NodeTopology],
    options: Options,
    rate: float | None,
    apiserver: ProcessMeter | None = None,
) -> RunResult:
    """The run of a second kube-scheduler at its own client defaults (`Options.kube_defaults`),
    started for this run and stopped after it; `apiserver` as for `run_pods`."""
    component = cluster.start_kube_scheduler(KUBE_DEFAULTS, KUBE_DEFAULTS, client_defaults=True)
    try:
        return await run_pods(
            api,
            KUBE_DEFAULTS,
            KUBE_DEFAULTS,
            sizes,
            topologies,
            options,
            ProcessMeter(component.process.pid),
            rate=rate,
            slug=f"kubedef-{mode_name(rate).replace('/s', 'ps')}",
            apiserver=apiserver,
        )
    finally:
        component.stop()


async def bench_nodes(node_count: int, options: Options) -> list[RunResult]:
    """One cluster with `node_count` kwok nodes, and the three runs on it."""
    config = ClusterConfig(prometheus=False, fake_dcgm=False, client_qps=options.qps)
    with LocalCluster(config) as cluster:
        api = await api_client_for(str(cluster.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            specs = options.cluster_nodes(node_count)
            started = time.monotonic()
            names = await create_nodes(core, specs, concurrency=64)
            await wait_nodes_ready(core, names, timeout=NODES_READY_TIMEOUT_S)
            print(
                f"{node_count} nodes Ready in {time.monotonic() - started:.0f} s",
                file=sys.stderr,
            )
            return await side_by_side(cluster, api, specs, options)
        finally:
            await api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.control_plane", description=__doc__)
    parser.add_argument("--nodes", default="1000,5000", help="node counts, one cluster each")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument(
        "--qps", type=int, default=400, help="kube-scheduler's client QPS (burst is twice this)"
    )
    parser.add_argument(
        "--rate", default="", help="steady arrival modes, pods created a second: 50,100"
    )
    parser.add_argument("--no-burst", action="store_true", help="skip the burst mode")
    parser.add_argument(
        "--profile", default="", metavar="FILE", help="one more gpu-scheduler run under cProfile"
    )
    parser.add_argument(
        "--profile-variant",
        default="",
        metavar="LABEL",
        help="the cprofile run takes the settings of this --variant",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE,...",
        help="one more gpu-scheduler run with these settings (repeatable)",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL:PATH",
        help="one more gpu-scheduler run from the checkout at PATH, e.g. the tree before a "
        "change (repeatable)",
    )
    parser.add_argument(
        "--features",
        action="store_true",
        help="the feature mix: pod affinity, topology spread and gangs (PodGroups)",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="DRA nodes (D8, ResourceSlices) and pods with ResourceClaimTemplates",
    )
    parser.add_argument(
        "--dra-extended",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="with --dra: this share of the pods asks for nvidia.com/gpu instead of a template",
    )
    parser.add_argument(
        "--shared",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="with --dra: S8 nodes, and this share of the pods asks for part of one GPU",
    )
    parser.add_argument(
        "--share-sizes",
        default="",
        metavar="GI,...",
        help="with --shared: share sizes in Gi, equally likely (default: the openb trace's)",
    )
    parser.add_argument(
        "--lifetime",
        type=float,
        default=None,
        metavar="SECONDS",
        help="churn: delete each pod this long after it is bound (with --rate; no ceiling run)",
    )
    parser.add_argument(
        "--explain-pending",
        action="store_true",
        help="after the table: every run's pending pods by kind and reason, and where the "
        "other runs placed them",
    )
    parser.add_argument(
        "--kube-defaults",
        action="store_true",
        help="one more kube-scheduler run per mode at its own client defaults (qps 50, burst 100)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle-seconds", type=float, default=15.0)
    parser.add_argument("--create-concurrency", type=int, default=32)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    if args.dra and args.features:
        parser.error("--dra and --features are separate pod sets")
    if not 0.0 <= args.dra_extended <= 1.0 or (args.dra_extended and not args.dra):
        parser.error("--dra-extended is a share from 0 to 1, with --dra")
    if not 0.0 <= args.shared <= 1.0 or (args.shared and (not args.dra or args.dra_extended)):
        parser.error("--shared is a share from 0 to 1, with --dra and without --dra-extended")
    try:
        share_sizes = parse_share_sizes(args.share_sizes) if args.share_sizes else ()
    except ValueError as error:
        parser.error(f"--share-sizes: {error}")
    if share_sizes and not args.shared:
        parser.error("--share-sizes needs --shared")
    labels = [v.partition(":")[0] for v in args.variant]
    if args.profile_variant and (not args.profile or args.profile_variant not in labels):
        parser.error("--profile-variant names a --variant's label, with --profile")
    if args.lifetime is not None and args.lifetime < 0:
        parser.error("--lifetime must be 0 or more seconds")
    structlog.configure(  # the watch's informer logs only problems, and to stderr
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    options = Options(
        pods=args.pods,
        qps=args.qps,
        seed=args.seed,
        settle_s=args.settle_seconds,
        create_concurrency=args.create_concurrency,
        rates=tuple(float(r) for r in args.rate.split(",") if r.strip()),
        burst=not args.no_burst,
        profile=args.profile,
        profile_variant=args.profile_variant,
        features=args.features,
        dra=args.dra,
        dra_extended=args.dra_extended,
        shared=args.shared,
        share_sizes=share_sizes,
        kube_defaults=args.kube_defaults,
        lifetime=args.lifetime,
        trees=tuple((label, path) for label, _, path in (t.partition(":") for t in args.tree)),
        variants=tuple(
            (label, overrides_of(text))
            for label, _, text in (v.partition(":") for v in args.variant)
        ),
    )
    results: list[RunResult] = []
    for count in args.nodes.split(","):
        results.extend(asyncio.run(bench_nodes(int(count), options)))
    if args.output == "json":
        document = {
            "options": {**asdict(options), "node_selector": dict(options.node_selector)},
            "runs": [asdict(r) for r in results],
            "ratios": ratios(results),
        }
        print(json.dumps(document, indent=2))
    else:
        print_table(results, options)
    if args.explain_pending:
        print_pending(results, options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
