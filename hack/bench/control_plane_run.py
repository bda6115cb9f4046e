"""One run of the control-plane benchmark (`python -m hack.bench.control_plane`): the pod set
created in a fresh namespace for one scheduler, watched until bound, measured, then cleared.

- `run_pods`: the run itself (burst or steady arrival, the ceiling's own bindings with a plan,
  churn with `Options.lifetime`), returning its `RunResult`; what it measures is described in
  `hack.bench.control_plane`'s docstring.
- `ProcessMeter`: CPU time and peak RSS of the scheduler process, from /proc.
- `SeeingHandler`, `BoundPods`: informer handlers; `BoundPods` records when and where this
  process first saw each pod bound.
- `TokenBucket`: client-go's client-side rate limit, for the ceiling's bindings.
- `expect_ok`, `fresh_namespace`, `clear_namespace`: raw responses checked, and a run's
  namespace made and emptied; also used by the gang and Kueue benchmarks.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from kubernetes_asyncio import client

from hack.bench.churn import Reaper, bind_steps, peak_held, timeline
from hack.bench.control_plane_model import (
    Options,
    RunResult,
    mode_name,
    nvlink_quality,
    pod_manifest,
    pod_name,
)
from hack.bench.dra_shares import share_use
from hack.bench.dra_workload import (
    AllocatedClaims,
    create_templates,
    dra_quality,
    wait_claims_gone,
)
from hack.bench.feature_workload import create_pod_groups, feature_kinds, with_features
from hack.bench.pending import pending_reasons
from scheduler.kube.informer import Informer, KubeObject
from topology.domains import NodeTopology
from topology.occupancy import GPUS_ANNOTATION

SAMPLE_INTERVAL_S = 0.25
POLL_INTERVAL_S = 0.1
MAX_RUN_S = 3600.0
READY_TIMEOUT_S = 120.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def cpu_reading(meter: ProcessMeter | None) -> float:
    """`meter`'s CPU seconds so far; 0 without a meter."""
    return meter.cpu_seconds() if meter is not None else 0.0


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
    apiserver: ProcessMeter | None = None,
) -> RunResult:
    """Create the pod set for `scheduler_name` and wait until it is bound (see the docstring of
    `hack.bench.control_plane`). With `plan`, this process binds the planned pods itself (the
    ceiling). With `rate`, pod i's create request is sent at i / rate seconds after the first
    (never earlier; later only when `create_concurrency` requests are already waiting). With
    `options.lifetime`, pods are deleted that long after they were seen bound (`Reaper`) until
    the run ends; not with `plan`. `slug` (a DNS label) names the run's namespace; the default
    is `label`. `meter` measures the scheduler's process, `apiserver` the API server's (CPU
    only), both from the first create to the last bind."""
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
    samples: list[tuple[float, float, float]] = []
    """(time, the scheduler's CPU seconds, the API server's), every `SAMPLE_INTERVAL_S`."""
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
        while meter is not None or apiserver is not None:
            samples.append((clock(), cpu_reading(meter), cpu_reading(apiserver)))
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
        cpu_start, api_start = cpu_reading(meter), cpu_reading(apiserver)
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
        samples.append((clock(), cpu_reading(meter), cpu_reading(apiserver)))
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
    cpu_s = per_1000 = peak = api_per_1000 = None
    at_last_bound = next((s for s in samples if s[0] >= last_bound), samples[-1])
    if meter is not None:
        cpu_s = at_last_bound[1] - cpu_start
        per_1000 = cpu_s * 1000 / len(bound) if bound else None
        peak = meter.peak_rss_mib()
    if apiserver is not None and bound:
        api_per_1000 = (at_last_bound[2] - api_start) * 1000 / len(bound)
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
        apiserver_cpu_s_per_1000_pods=api_per_1000,
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
