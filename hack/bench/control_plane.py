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
import math
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import structlog
import yaml
from kubernetes_asyncio import client

from hack.bench.churn import Reaper, Step, bind_steps, peak_held, timeline
from hack.bench.dra_shares import (
    SHARE_HEADER,
    DraPods,
    ShareUse,
    parse_share_sizes,
    share_cells,
    share_requests,
    share_use,
    shared_sizes,
)
from hack.bench.dra_workload import (
    AllocatedClaims,
    create_templates,
    dra_node_specs,
    dra_quality,
    extended_indices,
    wait_claims_gone,
)
from hack.bench.feature_workload import create_pod_groups, feature_kinds, with_features
from hack.bench.pending import (
    NodeKind,
    RunPlacements,
    occupancy_lines,
    pending_reasons,
    pending_rows,
    render_pending,
)
from hack.localcluster import (
    SEED_NODE_TYPES,
    ClusterConfig,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)
from hack.localcluster.cluster import REPO_ROOT, free_port
from hack.localcluster.processes import Component
from scheduler.kube.client import api_client_for
from scheduler.kube.informer import Informer, KubeObject
from topology.domains import NodeTopology, parse_domains
from topology.occupancy import GPUS_ANNOTATION, choose_gpus, parse_gpus_annotation

POD_SIZES = (1, 2, 4, 8)
DEFAULT_MIX = (0.4, 0.3, 0.2, 0.1)
NOBODY = "bench-nobody"
KUBE_SCHEDULER = "default-scheduler"
KUBE_DEFAULTS = "kube-defaults"
"""The run label, component and scheduler name of the kube-scheduler at its own client limits."""
BASELINES = ("kube-scheduler", KUBE_DEFAULTS)
KWOK_SELECTOR: Mapping[str, str] = {"type": "kwok"}
SAMPLE_INTERVAL_S = 0.25
POLL_INTERVAL_S = 0.1
MAX_RUN_S = 3600.0
READY_TIMEOUT_S = 120.0
NODES_READY_TIMEOUT_S = 1800.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Options:
    """One benchmark's knobs; the same for every run of it."""

    pods: int = 5000
    qps: int = 400
    """Client rate limit of kube-scheduler and of the ceiling loop (burst twice this)."""
    seed: int = 0
    mix: tuple[float, ...] = DEFAULT_MIX
    """Shares of pods asking for 1, 2, 4 and 8 GPUs."""
    settle_s: float = 15.0
    """A run with pods left unbound ends this long after the last pod was bound or created."""
    create_concurrency: int = 32
    bind_concurrency: int = 64
    """Bindings in flight at once in the ceiling loop."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(KWOK_SELECTOR))
    gpu_scheduler_name: str = "gpu-scheduler"
    namespace_prefix: str = "bench"
    rates: tuple[float, ...] = ()
    """Steady arrival rates (pods created a second), each a mode of its own besides the burst."""
    burst: bool = True
    """Whether the burst mode (all pods at once) runs."""
    variants: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """Extra gpu-scheduler runs: (label, configuration overrides merged into its config file)."""
    features: bool = False
    """The feature mix (`feature_kinds`): pods with pod affinity, topology spread and gangs
    instead of plain pods."""
    trees: tuple[tuple[str, str], ...] = ()
    """Extra gpu-scheduler runs from other checkouts of the repository: (label, path), default
    settings; e.g. the tree before a change, measured side by side with the current one."""
    dra: bool = False
    """DRA nodes and pods with claims from templates (`hack.bench.dra_workload`)."""
    profile: str = ""
    """When set, one more gpu-scheduler run (default settings, burst mode only, label
    "cprofile") under `python -m cProfile -o <profile>`; its figures include cProfile's cost."""
    profile_variant: str = ""
    """When set, the cprofile run takes the settings of the variant of this label."""
    lifetime: float | None = None
    """Churn: each pod is deleted (grace 0) this many seconds after it was seen bound, while
    the others keep arriving (`hack.bench.churn`); no ceiling run then."""
    dra_extended: float = 0.0
    """With `dra`: the share of pods asking for `nvidia.com/gpu` (served through the
    DeviceClass's `extendedResourceName`) instead of naming a template."""
    shared: float = 0.0
    """With `dra`: S8 nodes, and the share of pods asking for part of one GPU's memory
    (`hack.bench.dra_shares`)."""
    share_sizes: tuple[int, ...] = ()
    """With `shared`: the sizes (Gi) shares are drawn from; empty: the openb trace's."""
    kube_defaults: bool = False
    """One more kube-scheduler run per mode: a second kube-scheduler (profile `kube-defaults`)
    at its own client defaults, qps 50 and burst 100, so that each scheduler is also measured
    at its defaults."""

    def dra_pods(self) -> DraPods:
        """What each pod of the set asks for in the DRA mode."""
        extended = extended_indices(self.pods, self.dra_extended, self.seed)
        shares = share_requests(self.pods, self.shared, self.seed, self.share_sizes)
        return DraPods(shares, extended)

    def cluster_nodes(self, count: int) -> list[NodeSpec]:
        """A cluster's `count` nodes: the seed types, D8 with `dra`, S8 with `shared`."""
        return dra_node_specs(count, shared=self.shared > 0) if self.dra else node_specs(count)

    def sizes(self) -> list[int]:
        """Whole GPUs asked by each pod of the set, in creation order (0 for a share pod)."""
        return shared_sizes(pod_sizes(self.pods, self.seed, self.mix), self.dra_pods().shares)

    def modes(self) -> list[float | None]:
        """The arrival modes to run, in order: None is the burst, a number a steady rate."""
        return ([None] if self.burst else []) + list(self.rates)


def mode_name(rate: float | None) -> str:
    """ "burst", or "50/s" for a steady rate."""
    return "burst" if rate is None else f"{rate:g}/s"


@dataclass(frozen=True)
class RunResult:
    nodes: int
    run: str
    pods: int
    bound: int
    pending: int
    gpus_bound: int
    seconds: float
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_s: float | None
    cpu_s_per_1000_pods: float | None
    peak_rss_mib: float | None
    multi_gpu_pods: int
    one_domain_pods: int
    one_domain_pct: float | None
    mode: str = "burst"
    deleted: int = 0
    """Pods deleted during the run (churn)."""
    peak_gpus: int = 0
    """The most GPUs held at once by the run's bound pods (all of them without churn)."""
    placed: dict[str, str] = field(default_factory=dict)
    """Pod name -> the node it was first seen bound to."""
    pending_why: dict[str, str] = field(default_factory=dict)
    """Pod name -> its PodScheduled=False message when the run ended, for each pending pod
    (`hack.bench.pending`)."""
    shares: ShareUse | None = None
    """With `Options.shared`: what the share pods held when the run ended (not the ceiling)."""


# -- the cluster and the pod set ---------------------------------------------------------------


def node_specs(
    count: int, prefix: str = "", labels: Mapping[str, str] | None = None
) -> list[NodeSpec]:
    """`count` nodes of the seed types in equal shares (the first types take the remainder)."""
    kinds = len(SEED_NODE_TYPES)
    return [
        replace(
            spec,
            type_name=prefix + spec.type_name,
            count=count // kinds + (1 if index < count % kinds else 0),
            labels={**spec.labels, **(labels or {})},
        )
        for index, spec in enumerate(SEED_NODE_TYPES)
    ]


def topologies_of(specs: Sequence[NodeSpec]) -> dict[str, NodeTopology]:
    """NVLink domains of every node of `specs`, by node name."""
    topologies: dict[str, NodeTopology] = {}
    for spec in specs:
        topology = parse_domains(spec.nvlink_domains or "", spec.gpus)
        topologies.update(dict.fromkeys(spec.node_names(), topology))
    return topologies


def pod_sizes(count: int, seed: int, mix: Sequence[float] = DEFAULT_MIX) -> list[int]:
    """GPUs asked by each pod of the set, in creation order (seeded)."""
    rng = np.random.default_rng(seed)
    shares = np.asarray(mix, dtype=float)  # shares: (sizes,)
    return [int(g) for g in rng.choice(POD_SIZES, size=count, p=shares / shares.sum())]


def pod_name(index: int) -> str:
    return f"p-{index:05d}"


def pod_manifest(
    name: str, gpus: int, scheduler_name: str, node_selector: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(node_selector),
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda-job:1",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def plan_bindings(sizes: Sequence[int], capacity: Sequence[tuple[str, int]]) -> dict[int, str]:
    """Node for each pod index the ceiling loop binds: next fit by free GPUs, in pod order.

    Pods that fit nowhere are left out. Free GPUs only shrink, so once a size fits nowhere no
    larger pod is tried again.
    """
    free = [gpus for _, gpus in capacity]
    plan: dict[int, str] = {}
    cursor, too_big = 0, math.inf
    for index, need in enumerate(sizes):
        if need >= too_big:
            continue
        for step in range(len(free)):
            row = (cursor + step) % len(free)
            if free[row] >= need:
                free[row] -= need
                plan[index] = capacity[row][0]
                cursor = row
                break
        else:
            too_big = need
    return plan


def nvlink_quality(
    steps: Sequence[Step],
    sizes: Mapping[str, int],
    nodes: Mapping[str, str],
    annotated: Mapping[str, str | None],
    topologies: Mapping[str, NodeTopology],
) -> tuple[int, int]:
    """(bound pods a domain could hold asking for more than one GPU, those inside one domain).

    Pods are replayed per node in the order of `steps` (`hack.bench.churn`): at its bind a pod
    takes its annotation's GPUs when it has one, else the best choice among the node's GPUs
    still free (`choose_gpus`); at its release it gives them back.
    """
    largest = max((len(d) for t in topologies.values() for d in t.domains), default=0)
    holders: dict[str, dict[str, tuple[int, ...]]] = {}
    released: set[str] = set()
    eligible = inside = 0
    for name, release in steps:
        node = nodes.get(name)
        if node is None or node not in topologies:
            continue
        on_node = holders.setdefault(node, {})
        if release:
            released.add(name)
            on_node.pop(name, None)
            continue
        if name in released or name in on_node:
            continue
        topology = topologies[node]
        mask = np.zeros(topology.gpu_count, dtype=np.bool_)  # mask: (gpus,)
        for taken in on_node.values():
            mask[list(taken)] = True
        size = sizes[name]
        text = annotated.get(name)
        if text:
            gpus = parse_gpus_annotation(text, topology.gpu_count)
        else:
            choice = choose_gpus(topology, mask, size)
            gpus = choice.gpus if choice is not None else ()
        on_node[name] = tuple(gpus)
        if 1 < size <= largest:
            eligible += 1
            if gpus and any(set(gpus) <= set(domain) for domain in topology.domains):
                inside += 1
    return eligible, inside


# -- measuring ---------------------------------------------------------------------------------


class ProcessMeter:
    """CPU time and peak RSS of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        """utime + stime of every thread of the process, in seconds."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)

    def peak_rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmHWM for process {self.pid}")

    def reset_peak(self) -> None:
        """Start the high-water mark again from the current RSS (Linux >= 4.0)."""
        with open(f"/proc/{self.pid}/clear_refs", "w") as clear:
            clear.write("5")


class SeeingHandler:
    """Informer handler base: every added or updated object goes to `_see`; deletes are
    ignored (a subclass overrides `on_delete` when it counts them)."""

    def _see(self, obj: KubeObject) -> None:
        raise NotImplementedError

    def on_add(self, obj: KubeObject) -> None:
        self._see(obj)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self._see(new)

    def on_delete(self, obj: KubeObject) -> None:
        pass


class BoundPods(SeeingHandler):
    """Informer handler: when this process first saw each pod bound, where, and which GPUs;
    and when it saw each bound pod deleted (`gone_at`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at: dict[str, float] = {}
        self.node: dict[str, str] = {}
        self.gpus: dict[str, str | None] = {}
        self.gone_at: dict[str, float] = {}

    def on_delete(self, obj: KubeObject) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if name in self.at and name not in self.gone_at:
            self.gone_at[name] = self.clock()

    def _see(self, obj: KubeObject) -> None:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name", "")
        node = (obj.get("spec") or {}).get("nodeName")
        if not node or name in self.at:
            return
        self.at[name] = self.clock()
        self.node[name] = node
        self.gpus[name] = (metadata.get("annotations") or {}).get(GPUS_ANNOTATION)


class TokenBucket:
    """client-go's client-side rate limit: `qps` tokens a second, at most `burst` saved up."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.qps, self.burst, self.clock = qps, burst, clock
        self.tokens = float(burst)
        self.last = clock()

    async def take(self) -> None:
        while True:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


async def expect_ok(response: Any, what: str) -> None:
    """Check a raw (`_preload_content=False`) response and release it."""
    try:
        if not 200 <= response.status <= 299:
            body = (await response.read()).decode(errors="replace")[:300]
            raise RuntimeError(f"{what}: HTTP {response.status}: {body}")
    finally:
        response.release()


async def fresh_namespace(core: client.CoreV1Api, name: str) -> str:
    """Create namespace `name` and wait for its default ServiceAccount (pods need it)."""
    await core.create_namespace(cast(Any, {"metadata": {"name": name}}))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        accounts = await core.list_namespaced_service_account(name)
        if any(sa.metadata.name == "default" for sa in accounts.items):
            return name
        await asyncio.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"no default ServiceAccount in namespace {name}")


async def clear_namespace(
    core: client.CoreV1Api,
    namespace: str,
    pending: Sequence[str],
    bound: Sequence[str],
    concurrency: int,
    before_delete: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Delete the run's pods (grace 0), the pending ones first so that no scheduler places them
    in the room the others leave; wait until none is listed (and for `before_delete`, when
    given), then delete the namespace.

    One DELETE per pod: a delete-collection of thousands of pods outlasts the API server's
    request timeout."""
    gate = asyncio.Semaphore(concurrency)

    async def delete(name: str) -> None:
        async with gate:
            response: Any = await core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=0, _preload_content=False
            )
            if response.status != 404:
                await expect_ok(response, f"delete {name}")
            else:
                response.release()

    await asyncio.gather(*(delete(name) for name in pending))
    await asyncio.gather(*(delete(name) for name in bound))
    deadline = time.monotonic() + MAX_RUN_S
    while time.monotonic() < deadline:
        listed: Any = await core.list_namespaced_pod(namespace, limit=1, _preload_content=False)
        items = json.loads(await listed.read())["items"]
        listed.release()
        if not items:
            break
        await asyncio.sleep(0.5)
    else:
        raise TimeoutError(f"pods of {namespace} still listed after {MAX_RUN_S:.0f} s")
    if before_delete is not None:
        await before_delete()
    await core.delete_namespace(namespace, _preload_content=False)
    await asyncio.sleep(2.0)  # let every watcher (the schedulers' caches) catch up


async def run_pods(
    api: client.ApiClient,
    label: str,
    scheduler_name: str,
    sizes: Sequence[int],
    topologies: Mapping[str, NodeTopology],
    options: Options,
    meter: ProcessMeter | None = None,
    plan: Mapping[int, str] | None = None,
    rate: float | None = None,
    slug: str = "",
) -> RunResult:
    """Create the pod set for `scheduler_name` and wait until it is bound (see the module
    docstring). With `plan`, this process binds the planned pods itself (the ceiling). With
    `rate`, pod i's create request is sent at i / rate seconds after the first (never earlier;
    later only when `create_concurrency` requests are already waiting). With
    `options.lifetime`, pods are deleted that long after they were seen bound (`Reaper`) until
    the run ends; not with `plan`. `slug` (a DNS label) names the run's namespace; the default
    is `label`."""
    core = client.CoreV1Api(api)
    clock = time.monotonic
    namespace = await fresh_namespace(core, f"{options.namespace_prefix}-{slug or label}")
    seen = BoundPods(clock)
    informer = Informer(
        f"bench-{label}", functools.partial(core.list_namespaced_pod, namespace), seen
    )
    names = [pod_name(i) for i in range(len(sizes))]
    target = len(plan) if plan is not None else len(names)
    created: dict[str, float] = {}
    samples: list[tuple[float, float]] = []
    create_gate = asyncio.Semaphore(options.create_concurrency)
    bind_gate = asyncio.Semaphore(options.bind_concurrency)
    bucket = TokenBucket(options.qps, 2 * options.qps, clock)
    binds: set[asyncio.Task[None]] = set()
    creation_done = 0.0
    arrival_start = 0.0

    async def bind(name: str, node: str) -> None:
        async with bind_gate:
            await bucket.take()
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            response = await core.create_namespaced_pod_binding(
                name, namespace, cast(Any, body), _preload_content=False
            )
            await expect_ok(response, f"bind {name}")

    kinds = feature_kinds(len(sizes), options.seed) if options.features else []
    dra_pods = options.dra_pods()

    async def create(index: int) -> None:
        name = names[index]
        make = functools.partial(dra_pods.manifest, index) if options.dra else pod_manifest
        manifest = make(name, sizes[index], scheduler_name, options.node_selector)
        if kinds:
            with_features(manifest, index, *kinds[index])
        if rate is not None:
            await asyncio.sleep(max(0.0, arrival_start + index / rate - clock()))
        async with create_gate:
            created[name] = clock()
            response = await core.create_namespaced_pod(
                namespace, cast(Any, manifest), _preload_content=False
            )
            await expect_ok(response, f"create {name}")
        if plan is not None and index in plan:
            task = asyncio.create_task(bind(name, plan[index]))
            binds.add(task)
            task.add_done_callback(binds.discard)

    async def create_all() -> None:
        nonlocal creation_done, arrival_start
        arrival_start = clock()
        await asyncio.gather(*(create(i) for i in range(len(names))))
        creation_done = clock()

    async def sample() -> None:
        while meter is not None:
            samples.append((clock(), meter.cpu_seconds()))
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    claims = AllocatedClaims(clock)
    reaper = (
        Reaper(core, namespace, options.lifetime, options.create_concurrency, clock)
        if options.lifetime is not None and plan is None
        else None
    )
    claim_informer = Informer(
        f"bench-claims-{label}",
        functools.partial(client.ResourceV1Api(api).list_namespaced_resource_claim, namespace),
        claims,
    )
    watch = asyncio.create_task(informer.run())
    claim_watch = asyncio.create_task(claim_informer.run()) if options.dra else None
    sampler = asyncio.create_task(sample())
    try:
        await informer.synced.wait()
        if claim_watch is not None:
            await claim_informer.synced.wait()
            await create_templates(api, namespace, sizes, dra_pods.templates())
        await create_pod_groups(api, namespace, kinds)
        cpu_start = meter.cpu_seconds() if meter is not None else 0.0
        creating = asyncio.create_task(create_all())
        if reaper is not None:
            reaper.start(seen.at)
        deadline = clock() + MAX_RUN_S
        while len(seen.at) < target and clock() < deadline:
            await asyncio.sleep(POLL_INTERVAL_S)
            if creating.done():
                creating.result()  # raise a creation failure here
                last = max([creation_done, *seen.at.values()])
                if clock() - last > options.settle_s:
                    break
        await creating
        for task in list(binds):
            await task
        samples.append((clock(), meter.cpu_seconds() if meter is not None else 0.0))
        if reaper is not None:
            await reaper.stop()
        if claim_watch is not None and plan is None:
            live = [n for n in seen.at if reaper is None or n not in reaper.deleted]
            await claims.wait_allocated(live, options.settle_s)
    finally:
        if reaper is not None and reaper.task is not None:
            reaper.task.cancel()
        tasks = [t for t in (watch, claim_watch, sampler) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    bound = [n for n in names if n in seen.at]
    first = min(created.values())
    last_bound = max((seen.at[n] for n in bound), default=first)
    elapsed = last_bound - first
    latencies = sorted(seen.at[n] - created[n] for n in bound)
    cpu_s = per_1000 = peak = None
    if meter is not None:
        cpu_end = next((cpu for t, cpu in samples if t >= last_bound), samples[-1][1])
        cpu_s = cpu_end - cpu_start
        per_1000 = cpu_s * 1000 / len(bound) if bound else None
        peak = meter.peak_rss_mib()
    eligible = inside = 0
    size_of = dict(zip(names, sizes, strict=True))
    deleted = reaper.deleted if reaper is not None else {}
    # releases: a DRA pod's devices when its claim's allocation is seen gone, a plain pod's GPUs
    # when the pod is seen deleted (see hack.bench.churn)
    steps = timeline(seen.at, claims.released if options.dra else seen.gone_at)
    if plan is None and options.dra:
        eligible, inside = dra_quality(steps, size_of, seen.node, claims.devices, topologies)
    elif plan is None:
        # without churn, kube-scheduler's pods are replayed in creation order, as before
        order = steps if deleted else bind_steps(names)
        eligible, inside = nvlink_quality(order, size_of, seen.node, seen.gpus, topologies)
    asked = {names[index]: gib for index, gib in dra_pods.shares.items()}
    shares = share_use(claims.results, asked, claims.released) if asked and plan is None else None
    pending = [n for n in names if n not in seen.at]
    pending_why = await pending_reasons(core, namespace, pending) if pending else {}
    await clear_namespace(
        core,
        namespace,
        pending,
        [n for n in bound if n not in deleted],
        options.create_concurrency,
        before_delete=functools.partial(wait_claims_gone, api, namespace) if options.dra else None,
    )
    return RunResult(
        nodes=len(topologies),
        run=label,
        pods=len(names),
        bound=len(bound),
        pending=len(names) - len(bound),
        gpus_bound=sum(size for name, size in zip(names, sizes, strict=True) if name in seen.at),
        seconds=elapsed,
        pods_per_s=len(bound) / elapsed if elapsed > 0 else 0.0,
        p50_ms=_percentile(latencies, 0.50) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000,
        cpu_s=cpu_s,
        cpu_s_per_1000_pods=per_1000,
        peak_rss_mib=peak,
        multi_gpu_pods=eligible,
        one_domain_pods=inside,
        one_domain_pct=100.0 * inside / eligible if eligible else None,
        mode=mode_name(rate),
        deleted=len(deleted),
        peak_gpus=peak_held(steps, size_of),
        placed=dict(seen.node),
        pending_why=pending_why,
        shares=shares,
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


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


def kube_scheduler_pid(cluster: LocalCluster) -> int:
    for component in cluster.processes.components:
        if component.name == "kube-scheduler" and component.alive():
            return int(component.process.pid)
    raise RuntimeError("the cluster runs no kube-scheduler")


async def side_by_side(
    cluster: LocalCluster,
    api: client.ApiClient,
    specs: Sequence[NodeSpec],
    options: Options,
) -> list[RunResult]:
    """Per mode (`Options.modes`), the runs over the nodes of `specs` (created and Ready):
    ceiling (not under churn: its plan binds each pod once, into room that only shrinks),
    gpu-scheduler, each variant of it, kube-scheduler."""
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
                await run_pods(
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
                    await run_pods(
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
        meter = ProcessMeter(kube_scheduler_pid(cluster))
        meter.reset_peak()
        results.append(
            await run_pods(
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
            results.append(await run_kube_defaults(cluster, api, sizes, topologies, options, rate))
    return results


async def run_kube_defaults(
    cluster: LocalCluster,
    api: client.ApiClient,
    sizes: Sequence[int],
    topologies: Mapping[str, NodeTopology],
    options: Options,
    rate: float | None,
) -> RunResult:
    """The run of a second kube-scheduler at its own client defaults (`Options.kube_defaults`),
    started for this run and stopped after it."""
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


# -- reporting ---------------------------------------------------------------------------------


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
        f"{'one domain':>16}" + (f" {'deleted':>7} {'peak GPUs':>9}" if churn else "")
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
            f"{_cell(r.cpu_s_per_1000_pods, 2):>9} {_cell(r.peak_rss_mib, 0):>8} {domain:>16}"
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


if __name__ == "__main__":
    raise SystemExit(main())
