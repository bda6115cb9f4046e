"""Gangs on one kwok cluster: kube-scheduler without gangs, with its gang plugins, gpu-scheduler.

    python -m hack.bench.gangs [--racks 4] [--nodes-per-rack 6] [--jobs 80] [--load 1.5]
        [--duration 10,30] [--tail-seconds 30] [--seed 0] [--burst-seconds 2] [-o json]

One local cluster (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler v1.37 with
the GenericWorkload and TopologyAwareWorkloadScheduling feature gates, which turn on its
GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount plugins; no Prometheus) holds
`racks x nodes-per-rack` kwok nodes of the seed types, rack-labelled (`gang_workload`). The same
seeded job mix (gangs of 2-16 members of 1/2/4/8 GPUs, some bound to one rack, and single pods;
`gang_workload.generate`) is submitted at a steady rate, one run after the other, each in a fresh
namespace, to:

- kube-scheduler: pods without `spec.schedulingGroup` and no PodGroups: each pod on its own;
- kube-scheduler-gangs: a PodGroup (`scheduling.k8s.io/v1beta1`, `gang.minCount` = members, the
  rack as `schedulingConstraints.topology[0].key` where the job asks) per gang, created before its
  pods, which name it in `spec.schedulingGroup.podGroupName`;
- gpu-scheduler: the same PodGroups and pods, `schedulerName: gpu-scheduler`, served by
  `python -m scheduler.cli run` started for this run (`control_plane.start_gpu_scheduler`).

Churn: when every member of a job is bound, the job "runs" for its seeded duration; then this
process deletes its pods (grace 0) and its PodGroup. Members of a gang that never fully starts
stay bound until the run ends, holding their GPUs, as training workers waiting at a rendezvous do.
A run lasts from the first submission to `tail-seconds` after the last; then whatever is left is
deleted and the next run starts on empty nodes. The metrics and how they are counted are in
`gang_metrics`; the table ends with gpu-scheduler / kube-scheduler-gangs ratios. One more
column, from a watch on the run's PodGroups: how many the scheduler marked
`PodGroupInitiallyScheduled=True`, which shows that its gang scheduling (not pod-by-pod placement
that happened to bind every member) started them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import structlog
from kubernetes_asyncio import client

from hack.bench.control_plane import NODES_READY_TIMEOUT_S, start_gpu_scheduler
from hack.bench.control_plane_model import KUBE_SCHEDULER, KWOK_SELECTOR, pod_manifest
from hack.bench.control_plane_run import (
    POLL_INTERVAL_S,
    BoundPods,
    SeeingHandler,
    clear_namespace,
    expect_ok,
    fresh_namespace,
)
from hack.bench.gang_metrics import (
    DEFAULT_BURST_S,
    JobOutcome,
    PodOutcome,
    RunMetrics,
    ratios,
    summarize,
)
from hack.bench.gang_workload import (
    RACK_LABEL,
    BenchNode,
    Job,
    Mix,
    bench_nodes,
    generate,
    rack_specs,
    window_s,
)
from hack.localcluster import ClusterConfig, LocalCluster, NodeSpec, create_nodes, wait_nodes_ready
from scheduler.kube.client import api_client_for
from scheduler.kube.informer import Informer, KubeObject

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
SCHEDULED = "PodGroupInitiallyScheduled"
JOB_LABEL = "bench.gpu-scheduler.io/job"
PLAIN, KUBE_GANGS, GPU_SCHEDULER = "kube-scheduler", "kube-scheduler-gangs", "gpu-scheduler"
RUNS = (PLAIN, KUBE_GANGS, GPU_SCHEDULER)


@dataclass(frozen=True)
class Options:
    """One benchmark's knobs; the same for every run of it."""

    racks: int = 4
    nodes_per_rack: int = 6
    mix: Mix = field(default_factory=Mix)
    seed: int = 0
    tail_s: float = 30.0
    """A run goes on this long after the last job was submitted."""
    burst_s: float = DEFAULT_BURST_S
    """A gang whose members were all bound within this long of the first is started at once."""
    create_concurrency: int = 32
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(KWOK_SELECTOR))
    gpu_scheduler_name: str = "gpu-scheduler"
    namespace_prefix: str = "gangs"


@dataclass(frozen=True)
class RunResult:
    """One run: its metrics and its raw outcome (for the JSON document)."""

    metrics: RunMetrics
    outcomes: tuple[JobOutcome, ...]
    groups_scheduled: int | None = None
    """PodGroups the scheduler marked PodGroupInitiallyScheduled=True (None: no PodGroups),
    evidence that its gang scheduling, not pod-by-pod placement, started them."""


class PodTimeline(BoundPods):
    """Informer handler: when this process first saw each pod bound (`at`, where, which GPUs:
    `BoundPods`) and when it saw it deleted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self.deleted_at: dict[str, float] = {}

    def on_delete(self, obj: KubeObject) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        self.deleted_at.setdefault(name, self.clock())


class GroupConditions(SeeingHandler):
    """Informer handler: the PodGroups seen with PodGroupInitiallyScheduled=True."""

    def __init__(self) -> None:
        self.scheduled: set[str] = set()

    def _see(self, obj: KubeObject) -> None:
        for condition in (obj.get("status") or {}).get("conditions") or ():
            if condition.get("type") == SCHEDULED and condition.get("status") == "True":
                self.scheduled.add((obj.get("metadata") or {}).get("name", ""))

    def on_delete(self, obj: KubeObject) -> None:
        self._see(obj)


# -- objects -----------------------------------------------------------------------------------


def pod_group_manifest(job: Job) -> dict[str, Any]:
    """The job's PodGroup: a gang of all its members, on one rack when the job asks."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": job.members}}}
    if job.rack_bound:
        spec["schedulingConstraints"] = {"topology": [{"key": RACK_LABEL}]}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": job.name, "labels": {JOB_LABEL: job.name}},
        "spec": spec,
    }


def job_pods(
    job: Job, scheduler_name: str, node_selector: Mapping[str, str], groups: bool
) -> list[dict[str, Any]]:
    """The job's pods; with `groups`, a gang's pods name its PodGroup."""
    pods = []
    for name in job.pod_names():
        pod = pod_manifest(name, job.gpus, scheduler_name, node_selector)
        pod["metadata"]["labels"] = {JOB_LABEL: job.name}
        if groups and job.gang:
            pod["spec"]["schedulingGroup"] = {"podGroupName": job.name}
        pods.append(pod)
    return pods


# -- one run -----------------------------------------------------------------------------------


async def _ignore_missing(request: Any, what: str) -> None:
    response = await request
    if response.status == 404:
        response.release()
        return
    await expect_ok(response, what)


async def run_jobs(
    api: client.ApiClient,
    label: str,
    jobs: Sequence[Job],
    nodes: Sequence[BenchNode],
    options: Options,
) -> RunResult:
    """Submit `jobs` for run `label` (one of `RUNS`), finish them as they complete, and measure
    (see the module docstring)."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    clock = time.monotonic
    groups = label != PLAIN
    scheduler_name = options.gpu_scheduler_name if label == GPU_SCHEDULER else KUBE_SCHEDULER
    namespace = await fresh_namespace(core, f"{options.namespace_prefix}-{label}")
    seen = PodTimeline(clock)
    informer = Informer(
        f"bench-{label}", functools.partial(core.list_namespaced_pod, namespace), seen
    )
    conditions = GroupConditions()
    group_informer = Informer(
        f"bench-{label}-groups",
        functools.partial(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL),
        conditions,
    )
    gate = asyncio.Semaphore(options.create_concurrency)
    created: dict[str, float] = {}
    finishing: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coroutine: Coroutine[Any, Any, None]) -> None:
        tasks.add(asyncio.create_task(coroutine))

    async def create(body: dict[str, Any]) -> None:
        async with gate:
            response = await core.create_namespaced_pod(
                namespace, cast(Any, body), _preload_content=False
            )
            await expect_ok(response, f"create pod {body['metadata']['name']}")

    async def submit(job: Job) -> None:
        created[job.name] = clock() - t0
        if groups and job.gang:
            response = await custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, pod_group_manifest(job), _preload_content=False
            )
            await expect_ok(response, f"create PodGroup {job.name}")
        pods = job_pods(job, scheduler_name, options.node_selector, groups)
        await asyncio.gather(*(create(pod) for pod in pods))

    async def finish(job: Job) -> None:
        for name in job.pod_names():
            async with gate:
                await _ignore_missing(
                    core.delete_namespaced_pod(
                        name, namespace, grace_period_seconds=0, _preload_content=False
                    ),
                    f"delete pod {name}",
                )
        if groups and job.gang:
            await _ignore_missing(
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, job.name, _preload_content=False
                ),
                f"delete PodGroup {job.name}",
            )

    watch = asyncio.create_task(informer.run())
    group_watch = asyncio.create_task(group_informer.run())
    try:
        await informer.synced.wait()
        await group_informer.synced.wait()
        t0 = clock()
        end = t0 + window_s(jobs) + options.tail_s
        pending = list(jobs)
        while clock() < end:
            now = clock()
            while pending and t0 + pending[0].arrival_s <= now:
                spawn(submit(pending.pop(0)))
            for job in jobs:
                if job.name not in created or job.name in finishing:
                    continue
                bound = sorted(seen.at[n] for n in job.pod_names() if n in seen.at)
                if len(bound) == job.members and now >= bound[-1] + job.duration_s:
                    finishing.add(job.name)
                    spawn(finish(job))
            for task in [t for t in tasks if t.done()]:
                tasks.discard(task)
                task.result()  # raise a failed create or delete here
            await asyncio.sleep(POLL_INTERVAL_S)
        end_s = clock() - t0
        await asyncio.gather(*tasks)
    finally:
        for task in (watch, group_watch, *tasks):
            task.cancel()
        await asyncio.gather(watch, group_watch, *tasks, return_exceptions=True)

    def since(at: float | None) -> float | None:
        return None if at is None else at - t0

    outcomes = tuple(
        JobOutcome(
            job,
            created.get(job.name),
            tuple(
                PodOutcome(
                    name,
                    job.gpus,
                    since(seen.at.get(name)),
                    seen.node.get(name),
                    seen.gpus.get(name),
                    since(seen.deleted_at.get(name)),
                )
                for name in job.pod_names()
            ),
        )
        for job in jobs
    )
    left = [n for j in jobs if j.name in created for n in j.pod_names() if n not in seen.deleted_at]
    await clear_namespace(
        core,
        namespace,
        [n for n in left if n not in seen.at],
        [n for n in left if n in seen.at],
        options.create_concurrency,
    )
    metrics = summarize(label, outcomes, nodes, end_s, options.burst_s)
    return RunResult(metrics, outcomes, len(conditions.scheduled) if groups else None)


async def side_by_side(
    cluster: LocalCluster,
    api: client.ApiClient,
    specs: Sequence[NodeSpec],
    options: Options,
) -> list[RunResult]:
    """The three runs over the nodes of `specs` (created and Ready), in `RUNS` order."""
    nodes = bench_nodes(specs)
    jobs = generate(options.mix, nodes, options.seed)
    results = [
        await run_jobs(api, PLAIN, jobs, nodes, options),
        await run_jobs(api, KUBE_GANGS, jobs, nodes, options),
    ]
    component = start_gpu_scheduler(cluster, options.gpu_scheduler_name)
    try:
        results.append(await run_jobs(api, GPU_SCHEDULER, jobs, nodes, options))
    finally:
        component.stop()
    return results


async def bench(options: Options) -> list[RunResult]:
    """One cluster with the benchmark's nodes, and the three runs on it."""
    with LocalCluster(ClusterConfig(prometheus=False, fake_dcgm=False)) as cluster:
        api = await api_client_for(str(cluster.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            specs = rack_specs(options.racks, options.nodes_per_rack)
            names = await create_nodes(core, specs, concurrency=64)
            await wait_nodes_ready(core, names, timeout=NODES_READY_TIMEOUT_S)
            return await side_by_side(cluster, api, specs, options)
        finally:
            await api.close()


# -- reporting ---------------------------------------------------------------------------------


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def describe(jobs: Sequence[Job], nodes: Sequence[BenchNode], options: Options) -> str:
    gangs = [j for j in jobs if j.gang]
    return (
        f"{len(nodes)} nodes in {options.racks} racks, {sum(n.gpus for n in nodes)} GPUs; "
        f"{len(jobs)} jobs ({len(gangs)} gangs, {sum(j.rack_bound for j in gangs)} rack-bound, "
        f"{sum(j.members for j in gangs)} members; {len(jobs) - len(gangs)} single pods) over "
        f"{window_s(jobs):.0f} s, load {options.mix.load:g}, seed {options.seed}, "
        f"durations {options.mix.min_duration_s:g}-{options.mix.max_duration_s:g} s, "
        f"tail {options.tail_s:g} s, burst allowance {options.burst_s:g} s"
    )


def table(results: Sequence[RunResult]) -> list[str]:
    """The table's lines: one row per run, then the ratio row."""
    lines = [
        f"{'run':<21} {'gangs':>9} {'singles':>9} {'partial':>7} {'partial GPU-s':>13} "
        f"{'gangs/min':>9} {'start p50 s':>11} {'p99 s':>7} {'1 domain %':>10} "
        f"{'member 1 domain %':>17} {'1 node %':>8} {'1 rack %':>8} {'rack-bound ok':>13} "
        f"{'idle GPUs waiting':>17} {'burst s':>7} {'PodGroups scheduled':>19}"
    ]
    for result in results:
        m = result.metrics
        idle = f"{_cell(m.idle_gpus_while_waiting)} ({_cell(m.idle_pct_while_waiting, 0)} %)"
        lines.append(
            f"{m.run:<21} {f'{m.gangs_started}/{m.gangs}':>9} "
            f"{f'{m.singles_bound}/{m.singles}':>9} {m.partial_gangs:>7} "
            f"{_cell(m.partial_gpu_s):>13} {_cell(m.gangs_per_min, 2):>9} "
            f"{_cell(m.start_p50_s):>11} {_cell(m.start_p99_s):>7} "
            f"{_cell(m.one_domain_pct):>10} {_cell(m.member_domain_pct):>17} "
            f"{_cell(m.one_node_pct):>8} "
            f"{_cell(m.one_rack_pct):>8} "
            f"{f'{m.rack_bound_in_one_rack}/{m.rack_bound_started}':>13} {idle:>17} "
            f"{_cell(m.max_spread_s, 2):>7} "
            f"{'-' if result.groups_scheduled is None else result.groups_scheduled:>19}"
        )
    by_run = {r.metrics.run: r.metrics for r in results}
    if GPU_SCHEDULER in by_run and KUBE_GANGS in by_run:
        row = ratios(by_run[GPU_SCHEDULER], by_run[KUBE_GANGS])
        cells = ", ".join(f"{key} {_cell(value, 2)}x" for key, value in row.items())
        lines.append(f"gpu-scheduler / kube-scheduler-gangs: {cells}")
    return lines


def document(results: Sequence[RunResult], options: Options) -> dict[str, Any]:
    """The `-o json` document."""
    by_run = {r.metrics.run: r.metrics for r in results}
    return {
        "options": {**asdict(options), "node_selector": dict(options.node_selector)},
        "runs": [{**asdict(r.metrics), "groups_scheduled": r.groups_scheduled} for r in results],
        "ratios": ratios(by_run[GPU_SCHEDULER], by_run[KUBE_GANGS]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.gangs", description=__doc__)
    parser.add_argument("--racks", type=int, default=4)
    parser.add_argument("--nodes-per-rack", type=int, default=6)
    defaults = Mix()
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--load", type=float, default=defaults.load, help="demand / capacity")
    parser.add_argument(
        "--duration",
        default=f"{defaults.min_duration_s:g},{defaults.max_duration_s:g}",
        help="min,max seconds a job runs once started",
    )
    parser.add_argument("--tail-seconds", type=float, default=30.0)
    parser.add_argument("--burst-seconds", type=float, default=DEFAULT_BURST_S)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    low, _, high = args.duration.partition(",")
    structlog.configure(  # the watch's informer logs only problems, and to stderr
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    mix = replace(
        Mix(),
        jobs=args.jobs,
        load=args.load,
        min_duration_s=float(low),
        max_duration_s=float(high or low),
    )
    options = Options(
        racks=args.racks,
        nodes_per_rack=args.nodes_per_rack,
        mix=mix,
        seed=args.seed,
        tail_s=args.tail_seconds,
        burst_s=args.burst_seconds,
    )
    results = asyncio.run(bench(options))
    if args.output == "json":
        print(json.dumps(document(results, options), indent=2))
    else:
        specs = rack_specs(options.racks, options.nodes_per_rack)
        nodes = bench_nodes(specs)
        print(describe(generate(mix, nodes, options.seed), nodes, options))
        print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
