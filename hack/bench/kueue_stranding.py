"""GPUs stranded per admitted workload: Kueue admits, kube-scheduler or gpu-scheduler places.

    python -m hack.bench.kueue_stranding [--nodes 6] [--jobs 120] [--load 1.5]
        [--duration 10,30] [--tail-seconds 30] [--seed 0] [-o json]

One local cluster (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler; no
Prometheus) with Kueue (`hack/localcluster/kueue.py`) and `--nodes` kwok nodes of 8 GPUs in two
NVLink domains of 4 (0-3, 4-7), labelled and tainted for one ResourceFlavor as in docs/kueue.md.
Per run: a fresh namespace, two teams' ClusterQueues in one cohort, each owning half the GPUs and
allowed to borrow the other half, their LocalQueues, and the seeded Job stream of `kueue_metrics`
(1 x 1, 1 x 2, 1 x 8 and 2 x 8 GPUs, round-robin over the teams, more GPU-seconds asked than the
cluster has). The Jobs' pod template names the scheduler:

- kube-scheduler: `schedulerName: default-scheduler` (the cluster's own);
- gpu-scheduler: `schedulerName: gpu-scheduler`, served by `python -m scheduler.cli run` started
  for its run (`control_plane.start_gpu_scheduler`).

Same cluster, same Kueue, same stream, one run after the other; between runs everything of the
first is deleted. Pods run (kwok, until deleted) until their Job has had all pods bound for its
duration; then this process lets kwok complete them, so the Job finishes and Kueue frees its
quota (churn). Every `SAMPLE_INTERVAL_S` a snapshot of the informers' stores (free GPUs per node;
unbound pods per admitted workload) feeds `kueue_metrics.StrandingMeter`. The table ends with the
ratios gpu-scheduler / kube-scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import structlog
import yaml
from kubernetes_asyncio import client

from hack.bench.churn import bind_steps
from hack.bench.control_plane import NODES_READY_TIMEOUT_S, start_gpu_scheduler
from hack.bench.control_plane_model import KUBE_SCHEDULER, nvlink_quality, topologies_of
from hack.bench.control_plane_run import POLL_INTERVAL_S, SeeingHandler, expect_ok, fresh_namespace
from hack.bench.kueue_metrics import (
    Mix,
    QueuedJob,
    RunMetrics,
    StrandingMeter,
    generate,
    ratios,
    summarize,
    window_s,
)
from hack.localcluster import (
    G2_EXPANSION,
    ClusterConfig,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)
from hack.localcluster.kueue import QUEUE_LABEL, Kueue
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from scheduler.kube.client import api_client_for
from scheduler.kube.informer import Informer, KubeObject
from topology.occupancy import GPUS_ANNOTATION

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
FLAVOR = "kueue-bench"
FLAVOR_LABEL = "bench.gpu-scheduler.io/flavor"
FLAVOR_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
TEAMS = ("team-a", "team-b")
KUBE, OURS = "kube-scheduler", "gpu-scheduler"
SAMPLE_INTERVAL_S = 0.25
CLEAR_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Options:
    nodes: int = 6
    mix: Mix = field(default_factory=Mix)
    seed: int = 0
    tail_s: float = 30.0
    gpu_scheduler_name: str = "gpu-scheduler"
    gpu_scheduler_overrides: Mapping[str, Any] | None = None
    flavor: str = FLAVOR
    """The ResourceFlavor's name; its nodeLabels are `node_labels`."""
    node_labels: Mapping[str, str] = field(default_factory=lambda: {FLAVOR_LABEL: FLAVOR})
    node_prefix: str = ""
    """Prefix of the nodes' type name (and so of their names)."""
    namespace_prefix: str = "kstrand"


def node_spec(options: Options) -> NodeSpec:
    """The benchmark's nodes: 8 GPUs, NVLink domains 0-3 and 4-7, the flavor's labels and taint."""
    return replace(
        G2_EXPANSION,
        type_name=f"{options.node_prefix}KB-H200",
        count=options.nodes,
        labels={**G2_EXPANSION.labels, **options.node_labels},
        taints=(FLAVOR_TAINT,),
    )


# -- Kueue objects (docs/kueue.md's recipe, sized for the benchmark) ---------------------------


def resource_flavor(name: str, node_labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {
            "nodeLabels": dict(node_labels),
            "nodeTaints": [FLAVOR_TAINT],
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def cluster_queue(name: str, cohort: str, flavor: str, gpus: int, borrow: int) -> dict[str, Any]:
    """A team's ClusterQueue owning `gpus` GPUs of `flavor`, borrowing up to `borrow` more in
    `cohort`."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": 256},
                                {"name": "memory", "nominalQuota": "1Ti"},
                                {"name": GPU, "nominalQuota": gpus, "borrowingLimit": borrow},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name},
        "spec": {"clusterQueue": target},
    }


def job_manifest(job: QueuedJob, scheduler_name: str) -> dict[str, Any]:
    """The Job of `job`, queued in its team's LocalQueue; pods run on kwok until deleted."""
    gpus = str(job.gpus)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {QUEUE_LABEL: job.queue}},
        "spec": {
            "parallelism": job.pods,
            "completions": job.pods,
            "template": {
                "metadata": {"annotations": {RUN_ANNOTATION: UNTIL_DELETED}},
                "spec": {
                    "schedulerName": scheduler_name,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "example.invalid/cuda-train:1",
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi", GPU: gpus},
                                "limits": {GPU: gpus},
                            },
                        }
                    ],
                },
            },
        },
    }


# -- watching ----------------------------------------------------------------------------------


class Admissions(SeeingHandler):
    """Informer handler on Workloads: when this process first saw each Job's Workload admitted."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.at: dict[str, float] = {}

    def _see(self, obj: KubeObject) -> None:
        owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
        job = next((o.get("name") for o in owners if o.get("kind") == "Job"), None)
        conditions = (obj.get("status") or {}).get("conditions") or ()
        admitted = any(
            c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions
        )
        if job and admitted and job not in self.at:
            self.at[job] = self.clock()


class Pods(SeeingHandler):
    """Informer handler on pods: first time each pod was seen bound, its node and GPUs."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.node: dict[str, str] = {}
        self.gpus: dict[str, str | None] = {}

    def _see(self, obj: KubeObject) -> None:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name", "")
        node = (obj.get("spec") or {}).get("nodeName")
        if node and name not in self.node:
            self.order.append(name)
            self.node[name] = node
            self.gpus[name] = (metadata.get("annotations") or {}).get(GPUS_ANNOTATION)


def live_bound(pods: Sequence[KubeObject]) -> list[tuple[str, str, str]]:
    """(job, pod, node) of each pod bound, not terminal and not being deleted."""
    rows = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed") or metadata.get("deletionTimestamp"):
            continue
        job = (metadata.get("labels") or {}).get(JOB_NAME_LABEL, "")
        rows.append((job, metadata.get("name", ""), node))
    return rows


# -- one run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run's metrics, and its meter for the details (stranding episodes)."""

    metrics: RunMetrics
    meter: StrandingMeter


async def run_jobs(
    api: client.ApiClient,
    label: str,
    scheduler_name: str,
    jobs: Sequence[QueuedJob],
    spec: NodeSpec,
    options: Options,
) -> Run:
    """Queues, the Job stream and the measurement of run `label` (see the module docstring)."""
    core = client.CoreV1Api(api)
    batch = client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    clock = time.monotonic
    prefix = f"{options.namespace_prefix}-{label}"
    namespace = await fresh_namespace(core, prefix)
    capacity = {name: spec.gpus for name in spec.node_names()}
    total = sum(capacity.values())
    share = total // len(TEAMS)
    queues = [f"{prefix}-{team}" for team in TEAMS]
    for team, queue in zip(TEAMS, queues, strict=True):
        await custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "clusterqueues",
            cluster_queue(queue, namespace, options.flavor, share, total - share),
        )
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "localqueues", local_queue(team, queue)
        )
    by_name = {job.name: job for job in jobs}
    admissions = Admissions(clock)
    pods = Pods()
    workload_informer = Informer(
        f"{prefix}-workloads",
        functools.partial(
            custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "workloads"
        ),
        admissions,
    )
    pod_informer = Informer(
        f"{prefix}-pods", functools.partial(core.list_namespaced_pod, namespace), pods
    )
    meter = StrandingMeter()
    bound_at: dict[str, float] = {}
    finishing: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()

    async def submit(job: QueuedJob) -> None:
        body = job_manifest(job, scheduler_name)
        response = await batch.create_namespaced_job(
            namespace, cast(Any, body), _preload_content=False
        )
        await expect_ok(response, f"create Job {job.name}")

    async def finish(names: list[str]) -> None:
        """Let kwok complete the pods (the annotation off): the Job finishes, Kueue frees quota."""
        patch = {"metadata": {"annotations": {RUN_ANNOTATION: None}}}
        for name in names:
            response: Any = await core.patch_namespaced_pod(
                name, namespace, cast(Any, patch), _preload_content=False
            )
            if response.status == 404:
                response.release()
            else:
                await expect_ok(response, f"patch pod {name}")

    watches = [asyncio.create_task(i.run()) for i in (workload_informer, pod_informer)]
    try:
        await workload_informer.synced.wait()
        await pod_informer.synced.wait()
        t0 = clock()
        end = t0 + window_s(jobs) + options.tail_s
        pending = list(jobs)
        next_sample = t0
        while clock() < end:
            now = clock()
            while pending and t0 + pending[0].arrival_s <= now:
                tasks.add(asyncio.create_task(submit(pending.pop(0))))
            rows = live_bound(pod_informer.list())
            used = dict.fromkeys(capacity, 0)
            bound_pods: dict[str, list[str]] = {}
            for job_name, pod, node in rows:
                job = by_name.get(job_name)
                if job is None or node not in used:
                    continue
                used[node] += job.gpus
                bound_pods.setdefault(job_name, []).append(pod)
            waiting: dict[str, tuple[int, int]] = {}
            for job_name in admissions.at:
                job = by_name[job_name]
                count = len(bound_pods.get(job_name, ()))
                if job_name not in bound_at and count >= job.pods:
                    bound_at[job_name] = now
                if job_name not in bound_at:
                    waiting[job_name] = (job.pods - count, job.gpus)
                elif job_name not in finishing and now >= bound_at[job_name] + job.duration_s:
                    finishing.add(job_name)
                    tasks.add(asyncio.create_task(finish(bound_pods.get(job_name, []))))
            if now >= next_sample:
                free = {node: capacity[node] - used[node] for node in capacity}
                meter.observe(now - t0, free, waiting)
                next_sample = now + SAMPLE_INTERVAL_S
            for task in [t for t in tasks if t.done()]:
                tasks.discard(task)
                task.result()  # raise a failed create or patch here
            await asyncio.sleep(POLL_INTERVAL_S)
        await asyncio.gather(*tasks)
    finally:
        for task in (*watches, *tasks):
            task.cancel()
        await asyncio.gather(*watches, *tasks, return_exceptions=True)
    order = [name for name in pods.order if name in pods.node]
    sizes = {
        name: by_name[name.rsplit("-", 1)[0]].gpus
        for name in order
        if name.rsplit("-", 1)[0] in by_name
    }
    steps = bind_steps(n for n in order if n in sizes)
    nvlink = nvlink_quality(steps, sizes, pods.node, pods.gpus, topologies_of([spec]))
    await clear_run(core, batch, custom, namespace, queues)
    return Run(summarize(label, len(jobs), admissions.at, bound_at, meter, nvlink), meter)


async def clear_run(
    core: client.CoreV1Api,
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    queues: Sequence[str],
) -> None:
    """Delete the run's Jobs (their pods go with them) and namespace, wait until no pod of it is
    listed, then delete its ClusterQueues."""
    await batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
    deadline = time.monotonic() + CLEAR_TIMEOUT_S
    while time.monotonic() < deadline:
        listed = await core.list_namespaced_pod(namespace)
        if not listed.items:
            break
        for pod in listed.items:
            if not pod.metadata.deletion_timestamp:
                response: Any = await core.delete_namespaced_pod(
                    pod.metadata.name, namespace, grace_period_seconds=0, _preload_content=False
                )
                response.release()
        await asyncio.sleep(1.0)
    else:
        raise TimeoutError(f"pods of {namespace} still listed after {CLEAR_TIMEOUT_S:.0f} s")
    await core.delete_namespace(namespace, _preload_content=False)
    for queue in queues:
        response = await custom.delete_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", queue, _preload_content=False
        )
        response.release()
    await asyncio.sleep(2.0)  # let every watcher (the schedulers' caches) catch up


async def side_by_side(
    cluster: LocalCluster, api: client.ApiClient, spec: NodeSpec, options: Options
) -> list[Run]:
    """On `cluster` (Kueue running, the nodes of `spec` Ready): the flavor, the kube-scheduler
    run, then the gpu-scheduler run; the flavor is deleted at the end."""
    jobs = generate(options.mix, spec.gpus * spec.count, TEAMS, options.seed)
    custom = client.CustomObjectsApi(api)
    await custom.create_cluster_custom_object(
        GROUP, VERSION, "resourceflavors", resource_flavor(options.flavor, options.node_labels)
    )
    try:
        results = [await run_jobs(api, KUBE, KUBE_SCHEDULER, jobs, spec, options)]
        component = start_gpu_scheduler(
            cluster, options.gpu_scheduler_name, options.gpu_scheduler_overrides
        )
        try:
            results.append(
                await run_jobs(api, OURS, options.gpu_scheduler_name, jobs, spec, options)
            )
        finally:
            component.stop()
        return results
    finally:
        response = await custom.delete_cluster_custom_object(
            GROUP, VERSION, "resourceflavors", options.flavor, _preload_content=False
        )
        response.release()


async def bench(options: Options) -> list[Run]:
    """One cluster with Kueue and the benchmark's nodes, and `side_by_side` on it."""
    spec = node_spec(options)
    with LocalCluster(ClusterConfig(prometheus=False, fake_dcgm=False)) as cluster:
        kueue = Kueue(cluster)
        kueue.start()
        api = await api_client_for(str(cluster.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            names = await create_nodes(core, [spec])
            await wait_nodes_ready(core, names, timeout=NODES_READY_TIMEOUT_S)
            return await side_by_side(cluster, api, spec, options)
        finally:
            await api.close()
            kueue.stop()


# -- reporting ---------------------------------------------------------------------------------


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def describe(jobs: Sequence[QueuedJob], options: Options) -> str:
    spec = node_spec(options)
    shapes = ", ".join(
        f"{sum(1 for j in jobs if (j.pods, j.gpus) == shape)} x ({shape[0]} x {shape[1]} GPU)"
        for shape in options.mix.shapes
    )
    return (
        f"{spec.count} nodes x {spec.gpus} GPUs (NVLink {spec.nvlink_domains}); "
        f"{len(TEAMS)} ClusterQueues of {spec.count * spec.gpus // len(TEAMS)} GPUs in one "
        f"cohort, each may borrow the rest; {len(jobs)} Jobs over {window_s(jobs):.0f} s: "
        f"{shapes}; load {options.mix.load:g}, durations {options.mix.min_duration_s:g}-"
        f"{options.mix.max_duration_s:g} s, tail {options.tail_s:g} s, seed {options.seed}"
    )


def details(runs: Sequence[Run], jobs: Sequence[QueuedJob]) -> list[str]:
    """One line per stranding episode of each run: when, which workload, the free GPUs per
    node then (largest first), and how long that workload was stranded in all."""
    by_name = {job.name: job for job in jobs}
    lines = []
    for run in runs:
        for at, name, free in run.meter.episodes:
            job = by_name[name]
            lines.append(
                f"{run.metrics.run}: {name} ({job.pods} x {job.gpus} GPU, {job.queue}) stranded "
                f"at {at:.1f} s, free GPUs per node {','.join(map(str, free))}, "
                f"{run.meter.stranded_s.get(name, 0.0):.1f} s stranded in all"
            )
    return lines


def table(results: Sequence[RunMetrics]) -> list[str]:
    """One row per run, then the ratio row gpu-scheduler / kube-scheduler."""
    lines = [
        f"{'run':<15} {'admitted':>8} {'all bound':>9} {'stranded wl':>11} "
        f"{'stranded GPUs/admitted':>22} {'stranded GPU-s':>14} {'pending mean':>12} "
        f"{'max':>4} {'admit->bound p50 s':>18} {'p99 s':>6} {'1 domain %':>10}"
    ]
    for m in results:
        lines.append(
            f"{m.run:<15} {m.admitted:>8} {m.completed:>9} {m.stranded_workloads:>11} "
            f"{_cell(m.stranded_gpus_per_admitted, 2):>22} {_cell(m.stranded_gpu_s, 0):>14} "
            f"{_cell(m.pending_mean, 2):>12} {m.pending_max:>4} "
            f"{_cell(m.admit_to_bound_p50_s, 2):>18} {_cell(m.admit_to_bound_p99_s, 2):>6} "
            f"{_cell(m.one_domain_pct):>10}"
        )
    by_run = {m.run: m for m in results}
    if OURS in by_run and KUBE in by_run:
        row = ratios(by_run[OURS], by_run[KUBE])
        cells = ", ".join(f"{key} {_cell(value, 2)}x" for key, value in row.items())
        lines.append(f"gpu-scheduler / kube-scheduler: {cells}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.kueue_stranding", description=__doc__
    )
    defaults = Mix()
    parser.add_argument("--nodes", type=int, default=Options.nodes)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--load", type=float, default=defaults.load, help="demand / capacity")
    parser.add_argument(
        "--duration",
        default=f"{defaults.min_duration_s:g},{defaults.max_duration_s:g}",
        help="min,max seconds a job runs once all its pods are bound",
    )
    parser.add_argument("--tail-seconds", type=float, default=Options.tail_s)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--gpu-scheduler-config",
        default="",
        help="YAML merged into gpu-scheduler's configuration (e.g. scoring weights)",
    )
    parser.add_argument(
        "--details", action="store_true", help="after the table, each stranding episode"
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    low, _, high = args.duration.partition(",")
    structlog.configure(  # the informers log only problems, and to stderr
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    mix = replace(
        defaults,
        jobs=args.jobs,
        load=args.load,
        min_duration_s=float(low),
        max_duration_s=float(high or low),
    )
    overrides = yaml.safe_load(args.gpu_scheduler_config) if args.gpu_scheduler_config else None
    options = Options(
        nodes=args.nodes,
        mix=mix,
        seed=args.seed,
        tail_s=args.tail_seconds,
        gpu_scheduler_overrides=overrides,
    )
    runs = asyncio.run(bench(options))
    results = [run.metrics for run in runs]
    spec = node_spec(options)
    jobs = generate(mix, spec.gpus * spec.count, TEAMS, options.seed)
    if args.output == "json":
        by_run = {m.run: m for m in results}
        document = {
            "options": {**asdict(options), "mix": asdict(mix)},
            "runs": [
                {
                    **asdict(run.metrics),
                    "episodes": run.meter.episodes,
                    "stranded_s": run.meter.stranded_s,
                }
                for run in runs
            ],
            "ratios": ratios(by_run[OURS], by_run[KUBE]),
        }
        print(json.dumps(document, indent=2))
    else:
        print(describe(jobs, options))
        print("\n".join(table(results)))
        if args.details:
            print("\n".join(details(runs, jobs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
