"""The fault families, one coroutine each, shared by the CI tests (tests/integration/
test_faults.py) and the soak (`python -m hack.faults.soak`).

Each scenario runs in a `Scene`: its own namespace, its own fake GPU nodes (labelled
`gpu-scheduler.io/test=<namespace>`), its own scheduler name (the namespace) and its own
`gpu-scheduler run` processes. It runs a seeded churn workload while injecting its fault, checks
the instant invariants every two seconds over the whole cluster, then stops the fault, waits
(bounded) until every pending pod of ours that fits is bound, and checks everything again. It
returns an `Outcome`: what was injected, how many pods, which invariants broke, and facts the
caller may assert on (`notes`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio import client

from hack.faults.cluster_faults import (
    compact_etcd,
    paused_component,
    restart_apiserver,
    restart_controller_manager,
    restart_kwok,
)
from hack.faults.fake_prom import FlakyPrometheus, Mode
from hack.faults.freeze import stop_on_event
from hack.faults.invariants import (
    Violation,
    check_stale_writes,
    pods_on_missing_nodes,
    read_records,
)
from hack.faults.observe import API_TROUBLE, Audit
from hack.faults.processes import SchedulerProcess, scheduler_config
from hack.faults.proxy import ResetProxy, proxied_kubeconfig
from hack.faults.workload import ChurnWorkload, WorkloadSpec
from hack.localcluster import (
    G2,
    G2_EXPANSION,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)

NODE_LABEL = "gpu-scheduler.io/test"
"""Label on a scene's nodes (value: the namespace); the pods' nodeSelector."""
SETTLE_S = 90.0
LEASE_S = 4
WINDOW_S = 10
POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"
PAIR = NodeSpec("P", 1, gpus=2, nvlink_domains="0-1", gpu_product="NVIDIA-H200", cpu="32")
USAGE = "fake-dcgm.gpu-scheduler.io/usage"


@dataclass
class Outcome:
    """What one scenario did and found."""

    fault: str
    injected: int
    pods: int
    violations: list[Violation]
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scene:
    """One scenario's namespace, nodes, replicas and audit; see the module docstring."""

    cluster: LocalCluster
    api: client.ApiClient
    namespace: str
    folder: Path
    seed: int
    replicas: list[SchedulerProcess] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def spec(self, base: NodeSpec, count: int, tag: str = "") -> NodeSpec:
        return replace(
            base,
            type_name=f"n{self.namespace[-6:]}{tag}-{base.type_name}",
            count=count,
            labels={**base.labels, NODE_LABEL: self.namespace},
        )

    async def nodes(self, specs: Sequence[NodeSpec]) -> list[str]:
        names = await create_nodes(self.core, specs)
        await wait_nodes_ready(self.core, names)
        return names

    async def churn_nodes(self) -> list[str]:
        """Three 8-GPU and two 4-GPU nodes: 32 GPUs."""
        return await self.nodes([self.spec(G2_EXPANSION, 3), self.spec(G2, 2)])

    def workload(self, max_live: int = 14, **overrides: Any) -> ChurnWorkload:
        spec = WorkloadSpec(
            self.namespace,
            self.namespace,
            {NODE_LABEL: self.namespace},
            seed=self.seed,
            max_live=max_live,
            **overrides,
        )
        return ChurnWorkload(self.core, spec)

    def config(self, **kwargs: Any) -> dict[str, Any]:
        return scheduler_config(self.namespace, lease_namespace=self.namespace, **kwargs)

    def launch(
        self, name: str, config: dict[str, Any], kubeconfig: Path | None = None
    ) -> SchedulerProcess:
        replica = SchedulerProcess(name, config, kubeconfig or self.cluster.kubeconfig, self.folder)
        replica.start()
        self.replicas.append(replica)
        return replica

    def audit(self) -> Audit:
        return Audit(self.api, {self.namespace}, lambda: [r.log_path for r in self.replicas])

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()

    async def cleanup(self, timeout_s: float = 60.0) -> None:
        """Stop the replicas, delete the scene's pods and nodes, and wait (bounded) until its
        pods are gone, so the next scene's cluster-wide checks do not see them."""
        self.stop()
        core = self.core

        async def delete() -> bool:
            try:
                await core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
                await core.delete_collection_node(label_selector=f"{NODE_LABEL}={self.namespace}")
            except API_TROUBLE:  # the API server may still be restarting
                return False
            return True

        await eventually(delete, timeout_s, f"the pods of {self.namespace} deleted", interval=1.0)

        async def gone() -> bool:
            try:
                pods = await core.list_namespaced_pod(self.namespace)
            except API_TROUBLE:
                return False
            return not pods.items

        await eventually(gone, timeout_s, f"the pods of {self.namespace} deleted", interval=0.5)


async def eventually(
    probe: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.25
) -> Any:
    """Await `probe` until it returns something truthy; TimeoutError naming `what` otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout:.0f} s")


async def synced(replica: SchedulerProcess) -> None:
    async def ready() -> bool:
        if not replica.alive():
            raise RuntimeError(f"{replica.name} exited: {replica.log_path.read_text()[-2000:]}")
        return any(r.get("event") == "caches_synced" for r in replica.records())

    await eventually(ready, 60, f"{replica.name} synced")


async def churn_under_fault(
    audit: Audit,
    workload: ChurnWorkload,
    fault: str,
    inject: Callable[[], Awaitable[None]],
    pods: int,
) -> list[Violation]:
    """Run the workload and the injector together, checking the instant invariants every two
    seconds; then settle and check everything. Returns the violations of `fault`."""
    stop = asyncio.Event()
    watcher = asyncio.create_task(audit.watch(fault, stop))
    try:
        await asyncio.gather(workload.run(pods), inject())
    finally:
        stop.set()
        await watcher
    await audit.settle(fault, SETTLE_S)
    return audit.violations[fault]


def apiserver_address(cluster: LocalCluster) -> tuple[str, int]:
    parts = urlsplit(cluster.server)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


# -- the API connection ---------------------------------------------------------------------------


def reset_proxy(scene: Scene, seconds: float) -> ResetProxy:
    """The seeded proxy that resets connections between a scene's replica and the API server,
    at most ten times a second over `seconds`."""
    return ResetProxy(
        apiserver_address(scene.cluster),
        seed=scene.seed,
        chunk_reset_probability=0.15,
        sweep_interval_s=1.0,
        max_resets=int(seconds * 10),
    )


async def api_resets(scene: Scene, pods: int, seconds: float = 12.0) -> Outcome:
    """Connections between the scheduler and the API server reset at random (seeded)."""
    await scene.churn_nodes()
    async with reset_proxy(scene, seconds) as proxy:
        kubeconfig = proxied_kubeconfig(scene.cluster.kubeconfig, proxy.url, scene.folder)
        replica = scene.launch("solo", scene.config(), kubeconfig)
        await synced(replica)
        audit = scene.audit()

        async def resets() -> None:
            proxy.resets_enabled = True
            await asyncio.sleep(seconds)
            proxy.resets_enabled = False

        violations = await churn_under_fault(audit, scene.workload(), "api resets", resets, pods)
    return Outcome(
        "api connection resets", proxy.resets, pods, violations, {"alive": replica.alive()}
    )


# -- the scheduler process ------------------------------------------------------------------------


async def scheduler_kills(scene: Scene, pods: int, kills: int = 3) -> Outcome:
    """SIGKILL the only scheduler at seeded random points, restart it each time."""
    await scene.churn_nodes()
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    audit = scene.audit()
    rng = random.Random(scene.seed)
    workload = scene.workload()

    async def kill_loop() -> None:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            replica.kill()
            await audit.check("sigkill")
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            replica.start()

    violations = await churn_under_fault(audit, workload, "sigkill", kill_loop, pods)
    return Outcome("scheduler SIGKILL + restart", replica.kills, pods, violations)


async def leader(api: client.ApiClient, namespace: str, lease: str) -> str | None:
    try:
        found = await client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace)
    except client.ApiException:
        return None
    holder = found.spec.holder_identity
    return str(holder) if holder else None


async def two_replicas(scene: Scene) -> tuple[dict[str, SchedulerProcess], str]:
    config = scene.config(leader_election=True)
    by_name = {name: scene.launch(name, config) for name in ("alpha", "beta")}
    lease = str(config["leaderElection"]["leaseName"])
    await eventually(lambda: leader(scene.api, scene.namespace, lease), 60, "a leader")
    for replica in by_name.values():
        await synced(replica)
    return by_name, lease


async def leader_kills(scene: Scene, pods: int, kills: int = 2) -> Outcome:
    """Two replicas; SIGKILL whichever leads, restart it as a follower."""
    await scene.churn_nodes()
    by_name, lease = await two_replicas(scene)
    audit = scene.audit()
    leaders: list[str] = []
    rng = random.Random(scene.seed)

    async def kill_leader() -> None:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(2.0, 4.0))
            holder = await leader(scene.api, scene.namespace, lease)
            if holder is None or holder not in by_name:
                continue
            leaders.append(holder)
            by_name[holder].kill()
            await asyncio.sleep(LEASE_S + 2)
            by_name[holder].start()

    violations = await churn_under_fault(
        audit, scene.workload(), "leader sigkill", kill_leader, pods
    )
    return Outcome("leader SIGKILL", len(leaders), pods, violations)


async def leader_pause(scene: Scene, pods: int, pauses: int = 1) -> Outcome:
    """Two replicas; SIGSTOP the leader until the follower has taken over and bound for a while,
    then SIGCONT: the old leader must write nothing more until elected again (`stale_write`)."""
    await scene.churn_nodes()
    by_name, lease = await two_replicas(scene)
    audit = scene.audit()
    resumed: list[tuple[str, float]] = []

    async def other_leads(old: str) -> bool:
        holder = await leader(scene.api, scene.namespace, lease)
        return holder is not None and holder != old

    async def pause_loop() -> None:
        for _ in range(pauses):
            await asyncio.sleep(3.0)
            holder = await leader(scene.api, scene.namespace, lease)
            if holder is None or holder not in by_name:
                continue
            by_name[holder].pause()
            try:
                await eventually(partial(other_leads, holder), 30, "the follower taking over")
                await asyncio.sleep(2.0)  # the new leader binds while the old one is frozen
            finally:
                resumed.append((holder, time.time()))
                by_name[holder].resume()

    violations = await churn_under_fault(
        audit, scene.workload(), "leader sigstop", pause_loop, pods
    )
    stale = [
        v
        for holder, at in resumed
        for v in check_stale_writes(read_records(by_name[holder].log_path), at)
    ]
    return Outcome("leader SIGSTOP past Lease", len(resumed), pods, violations + stale)


STOP_AFTER_S = (0.001, 0.003, 0.002)
"""How long after `pod_placed` each round of `sole_leader_freeze` stops the replica."""
API_PAUSE_S = 2.0
"""How long the API server stays paused after the frozen replica wakes (`sole_leader_freeze`)."""


SOLE_LEASE = {"leaseDurationSeconds": 8, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}
"""The sole leader's Lease (`sole_leader_freeze`); its bind timeout is 4 s."""


def sole_leader_config(scene: Scene) -> dict[str, Any]:
    config = scene.config(leader_election=True, binding={"timeoutSeconds": 4})
    config["leaderElection"].update(SOLE_LEASE)
    return config


@dataclass
class Freezes:
    """What `freeze_rounds` did: the measured stop delays (ms) and the wall-clock moments the
    replica was resumed."""

    delays_ms: list[float] = field(default_factory=list)
    resumed: list[float] = field(default_factory=list)


async def freeze_rounds(
    scene: Scene,
    replica: SchedulerProcess,
    probe: Callable[[int], dict[str, Any]],
    rounds: int,
    freezes: Freezes,
) -> None:
    """`rounds` times: create the pod `probe(round)`, SIGSTOP `replica` 1 to 3 ms after it logs
    `pod_placed` (`STOP_AFTER_S`), hold it past its Lease, resume it while the API server is
    paused for `API_PAUSE_S`, and wait until it is elected again (see `sole_leader_freeze`)."""

    def elections() -> int:
        return sum(1 for r in replica.records() if r.get("event") == "leader_elected")

    async def elected_since(before: int) -> bool:
        return elections() > before

    for index in range(rounds):
        assert replica.process is not None
        before = elections()
        after_s = STOP_AFTER_S[index % len(STOP_AFTER_S)]
        pid = replica.process.pid
        stop = asyncio.create_task(stop_on_event(replica.log_path, "pod_placed", pid, 60, after_s))
        await asyncio.sleep(0.5)  # the watcher has reached the end of the log
        await scene.core.create_namespaced_pod(scene.namespace, cast(Any, probe(index)))
        delay = await stop
        if delay is None:
            continue  # nothing was placed
        freezes.delays_ms.append(delay)
        try:
            await asyncio.sleep(SOLE_LEASE["leaseDurationSeconds"] + 3)  # past the Lease
        finally:
            freezes.resumed.append(time.time())
            with paused_component(scene.cluster, "kube-apiserver"):
                replica.resume()
                await asyncio.sleep(API_PAUSE_S)
        await eventually(partial(elected_since, before), 60, "the replica elected again")


async def sole_leader_freeze(scene: Scene, pods: int, rounds: int = 3) -> Outcome:
    """One replica with leader election on (Lease 8 s, renew 5 s, retry 1 s, bind timeout 4 s),
    SIGSTOPped 1 to 3 ms after logging `pod_placed` (`STOP_AFTER_S`: its Binding waits for a
    connection, is being sent or waits for its answer; each round creates a 2-GPU pod of its
    own, so there is one to place), held past its Lease, then SIGCONT while the API server is
    paused for `API_PAUSE_S`: the Binding gets no answer (its outcome unknown), the read-back
    of the pod gets none either, and the replica loses the Lease meanwhile, then wins it back,
    with no other replica to bind for it. It must settle the pod it was binding: at rest every
    pod that fits is bound and no GPU stays reserved for a pod not in flight (`reserved_gpus`),
    and it sent nothing between waking and being elected again (`stale_write`)."""
    await scene.churn_nodes()
    config = sole_leader_config(scene)
    replica = scene.launch("solo", config)
    lease = str(config["leaderElection"]["leaseName"])
    await eventually(lambda: leader(scene.api, scene.namespace, lease), 60, "the replica leading")
    await synced(replica)
    audit = scene.audit()
    freezes = Freezes()

    def probe(index: int) -> dict[str, Any]:
        selector = {NODE_LABEL: scene.namespace}
        return gpu_pod(f"freeze-{index}", 2, scene.namespace, nodeSelector=selector)

    fault = "sole leader sigstop"
    workload = scene.workload(max_live=6)  # about 15 GPUs of 32: room for each round's pod
    inject = partial(freeze_rounds, scene, replica, probe, rounds, freezes)
    violations = await churn_under_fault(audit, workload, fault, inject, pods)
    violations = [*violations, *await audit.check_reserved(fault, replica.metrics_url)]
    records = replica.records()
    stale = [v for at in freezes.resumed for v in check_stale_writes(records, at)]
    notes = {"delays_ms": freezes.delays_ms, "alive": replica.alive()}
    return Outcome(
        "sole leader SIGSTOP mid-bind", len(freezes.delays_ms), pods, violations + stale, notes
    )


# -- the control plane ----------------------------------------------------------------------------


async def apiserver_restarts(scene: Scene, pods: int, restarts: int = 1) -> Outcome:
    """kube-apiserver stopped and started again on the same port, mid-stream."""
    await scene.churn_nodes()
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    audit = scene.audit()

    async def restart_loop() -> None:
        for _ in range(restarts):
            await asyncio.sleep(3.0)
            await restart_apiserver(scene.cluster)

    violations = await churn_under_fault(
        audit, scene.workload(), "apiserver restart", restart_loop, pods
    )
    return Outcome("kube-apiserver restart", restarts, pods, violations, {"alive": replica.alive()})


async def watch_gone(scene: Scene, pods: int, times: int = 1) -> Outcome:
    """etcd compacted, then the API server restarted: its fresh watch cache no longer has the
    informers' resourceVersions, so their watches are answered 410 Gone and must relist."""
    await scene.churn_nodes()
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    audit = scene.audit()

    async def gone() -> None:
        for _ in range(times):
            await asyncio.sleep(3.0)
            await compact_etcd(scene.cluster.etcd_url)
            await restart_apiserver(scene.cluster)
            await restart_controller_manager(scene.cluster)
            await restart_kwok(scene.cluster)

    violations = await churn_under_fault(audit, scene.workload(), "410 gone", gone, pods)
    relists = sum(1 for r in replica.records() if r.get("event") == "informer_relist")
    return Outcome("watch 410 Gone (compaction)", times, pods, violations, {"relists": relists})


# -- reclaim --------------------------------------------------------------------------------------


def policy(minimum: int) -> dict[str, str]:
    return {
        POLICY + "minimum-preemptable-priority": str(minimum),
        POLICY + "toleration-seconds": "0",
        POLICY + "resource-idle-seconds": str(WINDOW_S),
        POLICY + "resource-idle-usage-threshold": "10",
    }


@asynccontextmanager
async def priority_classes(scene: Scene) -> AsyncIterator[dict[str, str]]:
    """The scene's PriorityClasses (cluster-scoped, so named after the namespace)."""
    scheduling = client.SchedulingV1Api(scene.api)
    specs: dict[str, tuple[int, dict[str, str]]] = {
        "idle-ok": (1000, policy(500)),
        "protected": (1000, {}),
        "preemptor": (500, {}),
    }
    names = {short: f"{scene.namespace}-{short}"[:60] for short in specs}
    for short, (value, notes) in specs.items():
        body = {"metadata": {"name": names[short], "annotations": notes}, "value": value}
        await scheduling.create_priority_class(cast(Any, body))
    try:
        yield names
    finally:
        for name in names.values():
            await scheduling.delete_priority_class(name)


def gpu_pod(name: str, gpus: int, scheduler: str, **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
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
            **spec,
        },
    }


async def holder_pod(
    scene: Scene,
    name: str,
    node: str,
    priority_class: str,
    usage: str,
    gpus: str = "0,1",
    labels: dict[str, str] | None = None,
) -> None:
    """A pod of another scheduler holding GPUs `gpus` of `node`, bound by hand and Running,
    with scripted usage."""
    core = scene.core
    manifest = gpu_pod(
        name,
        len(gpus.split(",")),
        "someone-else",
        priorityClassName=priority_class,
        annotations={USAGE: usage},
    )
    manifest["metadata"]["labels"] = labels or {}
    await core.create_namespaced_pod(scene.namespace, cast(Any, manifest))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": {"gpu-scheduler.io/gpus": gpus}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    response: Any = await core.create_namespaced_pod_binding(
        name, scene.namespace, cast(Any, binding), _preload_content=False
    )
    response.release()

    async def running() -> bool:
        pod = await core.read_namespaced_pod(name, scene.namespace)
        return bool(pod.status and pod.status.phase == "Running")

    await eventually(running, 60, f"{name} Running")


async def full_window(prometheus_url: str, namespace: str, pods: list[str]) -> None:
    async def full() -> bool:
        async with aiohttp.ClientSession() as session:
            for pod in pods:
                query = (
                    f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",'
                    f'pod="{pod}"}}[{WINDOW_S}s])'
                )
                async with session.get(
                    f"{prometheus_url}/api/v1/query", params={"query": query}
                ) as response:
                    result = (await response.json())["data"]["result"]
                if not result or float(result[0]["value"][1]) < WINDOW_S:
                    return False
        return True

    await eventually(full, WINDOW_S * 6, "a full window of samples", interval=1.0)


async def reclaim_scene(scene: Scene, classes: dict[str, str]) -> list[str]:
    """Three 2-GPU nodes: one with an idle reclaimable pod (`idle`), one with a busy one
    (`busy`), one with an idle pod whose class has no policy (`kept`)."""
    nodes = await scene.nodes([scene.spec(PAIR, 1, tag=str(i)) for i in range(3)])
    await holder_pod(scene, "idle", nodes[0], classes["idle-ok"], "constant:util=0")
    await holder_pod(scene, "busy", nodes[1], classes["idle-ok"], "constant:util=80")
    await holder_pod(scene, "kept", nodes[2], classes["protected"], "constant:util=0")
    await full_window(scene.cluster.prometheus_url or "", scene.namespace, ["idle", "busy", "kept"])
    return nodes


def reclaim_config(scene: Scene, prometheus_url: str) -> dict[str, Any]:
    return scene.config(
        reclaim={
            "mode": "enforce",
            "prometheusUrl": prometheus_url,
            "prometheusTimeoutSeconds": 2,
            "scrapeIntervalSeconds": 1,
            "cooldownSeconds": 1,
        }
    )


async def create_preemptor(scene: Scene, classes: dict[str, str], gpus: int = 2) -> None:
    manifest = gpu_pod(
        "preemptor",
        gpus,
        scene.namespace,
        priorityClassName=classes["preemptor"],
        nodeSelector={NODE_LABEL: scene.namespace},
    )
    await scene.core.create_namespaced_pod(scene.namespace, cast(Any, manifest))


async def bound_node(scene: Scene, name: str) -> str | None:
    pod = await scene.core.read_namespaced_pod(name, scene.namespace)
    return str(pod.spec.node_name) if pod.spec.node_name else None


PROMETHEUS_MODES: dict[Mode, str | None] = {
    Mode.DOWN: "prometheus_unavailable",
    Mode.SLOW: "prometheus_unavailable",
    Mode.ERROR: "prometheus_unavailable",
    Mode.NAN: None,  # samples there, values unknown: not idle, whatever the skip reason
    Mode.EMPTY: "no_metrics",
}
"""Each bad mode, and the reclaim_skipped reason the scheduler must log for it."""


async def prometheus_faults(scene: Scene) -> Outcome:
    """Reclaim while Prometheus is down, slow, erroring, answering NaN or nothing: no eviction,
    the expected skip; then Prometheus answers again and exactly the idle pod is evicted."""
    fault = "prometheus"
    async with priority_classes(scene) as classes:
        nodes = await reclaim_scene(scene, classes)
        async with FlakyPrometheus(scene.cluster.prometheus_url or "", slow_s=6.0) as prom:
            await prom.set_mode(Mode.DOWN)
            replica = scene.launch("solo", reclaim_config(scene, prom.url))
            await synced(replica)
            audit = scene.audit()
            await audit.observe()
            await create_preemptor(scene, classes)
            wrong: list[Violation] = []
            for mode, reason in PROMETHEUS_MODES.items():
                await prom.set_mode(mode)
                await _two_attempts(replica, prom, audit, mode)
                if audit.evicted():
                    wrong.append(Violation("bad_eviction", mode.value, "evicted without data"))
                if reason is not None and _skips(replica, reason) == 0:
                    wrong.append(Violation("reclaim_skip", mode.value, f"no {reason} skip"))
                await audit.check(fault)
            await prom.set_mode(Mode.PASS)
            bound = await eventually(lambda: bound_node(scene, "preemptor"), 60, "preemptor bound")
            await audit.check_evictions(fault)
            await audit.settle(fault, SETTLE_S)
    if bound != nodes[0]:
        wrong.append(Violation("reclaim_target", "preemptor", f"bound to {bound}, not {nodes[0]}"))
    evicted = audit.evicted()
    if evicted != [f"{scene.namespace}/idle"]:
        wrong.append(Violation("bad_eviction", "evictions", f"evicted {evicted}"))
    return Outcome(
        "Prometheus down/slow/500/NaN/empty",
        len(PROMETHEUS_MODES),
        4,
        audit.violations[fault] + wrong,
        {"requests": dict(prom.requests)},
    )


def _skips(replica: SchedulerProcess, reason: str | None = None) -> int:
    return sum(
        1
        for r in replica.records()
        if r.get("event") == "reclaim_skipped" and (reason is None or r.get("reason") == reason)
    )


async def _two_attempts(
    replica: SchedulerProcess, prom: FlakyPrometheus, audit: Audit, mode: Mode
) -> None:
    """Wait for two more reclaim attempts under `mode` (or any eviction, which ends it)."""
    before, attempts = sum(prom.requests.values()), _skips(replica)

    async def attempted() -> bool:
        if audit.evicted():
            return True
        asked = mode is Mode.DOWN or sum(prom.requests.values()) > before
        return _skips(replica) > attempts + 1 and asked

    await eventually(attempted, 60, f"two reclaim attempts with Prometheus {mode.value}")


def hold_writes_on_next_query(
    proxy: ResetProxy, prom: FlakyPrometheus, meanwhile: Callable[[], Awaitable[None]]
) -> asyncio.Event:
    """Arrange that when reclaim next queries Prometheus (its plan is being made), the
    scheduler's new API requests are held in `proxy` (its watches keep flowing) while
    `meanwhile` changes the cluster under the plan; then they go out. Returns an event set once
    they are released."""
    released = asyncio.Event()
    running: list[asyncio.Task[None]] = []  # keeps the task referenced until it ends

    async def change_then_release() -> None:
        try:
            await meanwhile()
        finally:
            proxy.release()
            released.set()

    async def hold() -> None:
        proxy.hold()
        running.append(asyncio.create_task(change_then_release()))

    prom.on_next_query = hold
    return released


async def victim_deleted(scene: Scene) -> Outcome:
    """The idle victim is deleted while its eviction is in flight: when reclaim queries
    Prometheus, the scheduler's requests to the API server are held in a proxy (its watches still
    flow), the victim is deleted directly, then the held requests (the nomination and the
    eviction) go out. The eviction finds the pod gone; the preemptor must still land on the freed
    node, and nothing else may be evicted."""
    fault = "victim deleted"
    async with (
        priority_classes(scene) as classes,
        ResetProxy(apiserver_address(scene.cluster), seed=scene.seed) as proxy,
    ):
        nodes = await reclaim_scene(scene, classes)
        async with FlakyPrometheus(scene.cluster.prometheus_url or "") as prom:

            async def delete_victim() -> None:
                await asyncio.sleep(1.0)  # the plan is made, its writes wait in the proxy
                await scene.core.delete_namespaced_pod(
                    "idle", scene.namespace, grace_period_seconds=0
                )
                await asyncio.sleep(1.0)

            deleted = hold_writes_on_next_query(proxy, prom, delete_victim)
            kubeconfig = proxied_kubeconfig(scene.cluster.kubeconfig, proxy.url, scene.folder)
            replica = scene.launch("solo", reclaim_config(scene, prom.url), kubeconfig)
            await synced(replica)
            audit = scene.audit()
            await audit.observe()
            await create_preemptor(scene, classes)
            await asyncio.wait_for(deleted.wait(), 60)
            bound = await eventually(lambda: bound_node(scene, "preemptor"), 60, "preemptor bound")
            await audit.check_evictions(fault)
            await audit.settle(fault, SETTLE_S)
    wrong = []
    if bound != nodes[0]:
        wrong.append(Violation("reclaim_target", "preemptor", f"bound to {bound}, not {nodes[0]}"))
    for name in ("busy", "kept"):
        pod = await scene.core.read_namespaced_pod(name, scene.namespace)
        if pod.metadata.deletion_timestamp or pod.status.phase != "Running":
            wrong.append(Violation("bad_eviction", name, "not Running any more"))
    results = [str(r.get("result")) for r in replica.records() if r.get("event") == "reclaim_evict"]
    return Outcome(
        "victim deleted during eviction",
        1,
        4,
        audit.violations[fault] + wrong,
        {"eviction_results": results},
    )


async def stale_plan(scene: Scene) -> Outcome:
    """The room a reclaim plan counts on is taken before its eviction goes out: a 4-GPU node has
    an idle reclaimable 2-GPU pod and two free GPUs, the preemptor wants all four. When reclaim
    queries Prometheus, the scheduler's API requests are held in the proxy and another
    scheduler's pod is bound to the two free GPUs; then the requests go out. Evicting the idle
    pod now makes no room for the preemptor (`needless_eviction`): the plan must be checked
    against the cache (whose watches kept flowing) before each eviction."""
    fault = "stale plan"
    async with (
        priority_classes(scene) as classes,
        ResetProxy(apiserver_address(scene.cluster), seed=scene.seed) as proxy,
    ):
        (node,) = await scene.nodes([scene.spec(G2, 1)])
        await holder_pod(scene, "idle", node, classes["idle-ok"], "constant:util=0", gpus="0,1")
        await full_window(scene.cluster.prometheus_url or "", scene.namespace, ["idle"])
        async with FlakyPrometheus(scene.cluster.prometheus_url or "") as prom:

            async def take_free_gpus() -> None:
                await holder_pod(
                    scene, "intruder", node, classes["protected"], "constant:util=90", "2,3"
                )
                await asyncio.sleep(1.0)  # the scheduler's pod watch delivers it meanwhile

            taken = hold_writes_on_next_query(proxy, prom, take_free_gpus)
            kubeconfig = proxied_kubeconfig(scene.cluster.kubeconfig, proxy.url, scene.folder)
            replica = scene.launch("solo", reclaim_config(scene, prom.url), kubeconfig)
            await synced(replica)
            audit = scene.audit()
            await audit.observe()
            await create_preemptor(scene, classes, gpus=4)
            await asyncio.wait_for(taken.wait(), 90)

            async def attempts() -> bool:
                done = [r for r in replica.records() if r.get("event") == "reclaim_skipped"]
                return len(done) >= 2

            await eventually(attempts, 60, "two more reclaim attempts")
            await audit.check_evictions(fault)
            await audit.settle(fault, SETTLE_S)
    return Outcome(
        "stale reclaim plan", 1, 3, audit.violations[fault], {"evicted": audit.evicted()}
    )


async def pdb_guarded(scene: Scene) -> Outcome:
    """Every way to make room needs a pod a PodDisruptionBudget protects: one node holds two
    idle 1-GPU pods, `guarded-a` and the unguarded `batch` (which sorts first among equals);
    another holds one guarded idle 2-GPU pod. Reclaim must evict nothing: not the guarded pods
    (the API server refuses those) and not `batch` either, since its node cannot host the
    preemptor without `guarded-a` going too."""
    fault = "pdb"
    async with priority_classes(scene) as classes:
        mixed, whole = await scene.nodes([scene.spec(PAIR, 1, tag=str(i)) for i in range(2)])
        for name, node, gpus, guarded in (
            ("batch", mixed, "0", False),
            ("guarded-a", mixed, "1", True),
            ("guarded-b", whole, "0,1", True),
        ):
            await holder_pod(
                scene,
                name,
                node,
                classes["idle-ok"],
                "constant:util=0",
                gpus=gpus,
                labels={"app": "guarded"} if guarded else {},
            )
        policy_api = client.PolicyV1Api(scene.api)
        budget = {
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}},
        }
        await policy_api.create_namespaced_pod_disruption_budget(scene.namespace, cast(Any, budget))

        async def budget_seen() -> bool:
            found = await policy_api.read_namespaced_pod_disruption_budget("keep", scene.namespace)
            return bool(found.status and found.status.current_healthy == 2)

        await eventually(budget_seen, 60, "the budget's status")
        await full_window(
            scene.cluster.prometheus_url or "", scene.namespace, ["batch", "guarded-a", "guarded-b"]
        )
        replica = scene.launch("solo", reclaim_config(scene, scene.cluster.prometheus_url or ""))
        await synced(replica)
        audit = scene.audit()
        await audit.observe()
        await create_preemptor(scene, classes)

        async def attempts() -> bool:
            done = [r for r in replica.records() if r.get("event") == "reclaim_skipped"]
            return len(done) >= 3

        await eventually(attempts, 90, "three reclaim attempts")
        await audit.check_evictions(fault)
        await audit.check(fault)
    evicted = audit.evicted()
    return Outcome("PDB-guarded victims", 1, 4, audit.violations[fault], {"evicted": evicted})


# -- a node deleted under assumed pods ------------------------------------------------------------


async def node_deleted(scene: Scene, pods: int = 6) -> Outcome:
    """Binds stall in the proxy (one at a time), so placed pods stay assumed; the node holding
    most of them is deleted; binds flow again. At most the one bind already on the wire may land
    on the deleted node; the rest must be placed again elsewhere."""
    fault = "node deleted"
    await scene.nodes([scene.spec(G2_EXPANSION, 2)])
    async with ResetProxy(apiserver_address(scene.cluster), seed=scene.seed) as proxy:
        kubeconfig = proxied_kubeconfig(scene.cluster.kubeconfig, proxy.url, scene.folder)
        config = scene.config(binding={"concurrency": 1, "timeoutSeconds": 30})
        replica = scene.launch("solo", config, kubeconfig)
        await synced(replica)
        audit = scene.audit()
        proxy.hold()
        try:
            # 1- and 2-GPU pods only: all six fit on the two nodes, so every one is placed.
            await scene.workload(sizes=(1, 2), weights=(0.5, 0.5)).run(pods)

            async def placed() -> dict[str, str] | None:
                found = {
                    str(r["pod"]): str(r["node"])
                    for r in replica.records()
                    if r.get("event") == "pod_placed"
                }
                return found if len(found) >= pods else None

            placements = await eventually(placed, 60, f"{pods} pods placed")
            counts = list(placements.values())
            doomed = max(sorted(set(counts)), key=counts.count)
            await scene.core.delete_node(doomed)
            await asyncio.sleep(3.0)  # watch events still flow down: the scheduler sees it
        finally:
            proxy.release()
        await audit.settle(fault, SETTLE_S)
        found, nodes_now = await audit.observe()
    stranded = pods_on_missing_nodes(found, nodes_now, {scene.namespace})
    wrong = [
        Violation("bound_to_deleted_node", key, f"bound to {doomed} after its deletion")
        for key in stranded[1:]  # the first may have been on the wire already
    ]
    return Outcome(
        "node deleted under assumed pods",
        1,
        pods,
        audit.violations[fault] + wrong,
        {"stranded": stranded},
    )
