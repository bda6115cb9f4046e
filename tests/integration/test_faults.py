"""The fault suite, short version: one test per fault family, each running `gpu-scheduler run`
processes against the real local cluster under a seeded churn workload, and asserting the
invariants of `hack.faults.invariants` over the whole cluster during the fault and at rest after
it (every pending pod of ours that fits is bound within a bounded wait).

The long version of the same faults is `python -m hack.faults.soak` (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from kubernetes_asyncio import client

from hack.faults.cluster_faults import compact_etcd, restart_apiserver
from hack.faults.fake_prom import FlakyPrometheus, Mode
from hack.faults.invariants import (
    Violation,
    check_stale_writes,
    pods_on_missing_nodes,
    read_records,
)
from hack.faults.observe import Audit
from hack.faults.processes import SchedulerProcess, scheduler_config
from hack.faults.proxy import ResetProxy, proxied_kubeconfig
from hack.faults.workload import ChurnWorkload, WorkloadSpec
from hack.localcluster import G2, G2_EXPANSION, LocalCluster, NodeSpec
from tests.kube import bind, eventually, gpu_pod, pod_phase
from tests.scheduling import TEST_LABEL, isolated, make_nodes, pod_json

PODS = 40
"""Pods per churn test (seven of them: ~280 in all)."""
SETTLE_S = 90.0
LEASE_S = 4


@pytest.fixture
def replicas() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for replica in started:
        replica.stop()


def apiserver_address(cluster: LocalCluster) -> tuple[str, int]:
    parts = urlsplit(cluster.server)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def churn_nodes(core: client.CoreV1Api, namespace: str) -> list[str]:
    """Three 8-GPU and two 4-GPU nodes (32 GPUs) of this test."""
    return await make_nodes(
        core, [isolated(G2_EXPANSION, namespace, count=3), isolated(G2, namespace, count=2)]
    )


def workload_for(core: client.CoreV1Api, namespace: str, seed: int) -> ChurnWorkload:
    spec = WorkloadSpec(namespace, namespace, {TEST_LABEL: namespace}, seed=seed, max_live=14)
    return ChurnWorkload(core, spec)


def launch(
    replicas: list[SchedulerProcess],
    name: str,
    config: dict[str, Any],
    kubeconfig: Path,
    folder: Path,
) -> SchedulerProcess:
    replica = SchedulerProcess(name, config, kubeconfig, folder)
    replica.start()
    replicas.append(replica)
    return replica


async def synced(replica: SchedulerProcess) -> None:
    async def ready() -> bool:
        assert replica.alive(), f"{replica.name} exited: {replica.log_path.read_text()[-2000:]}"
        return any(r.get("event") == "caches_synced" for r in replica.records())

    await eventually(ready, timeout=60, what=f"{replica.name} synced")


async def churn_under_fault(
    audit: Audit,
    workload: ChurnWorkload,
    fault: str,
    inject: Callable[[], Awaitable[None]],
    pods: int = PODS,
) -> list[Violation]:
    """Run the workload and the injector together while checking the instant invariants every
    two seconds; then settle and check everything. Returns every violation of `fault`."""
    stop = asyncio.Event()
    watcher = asyncio.create_task(audit.watch(fault, stop))
    try:
        await asyncio.gather(workload.run(pods), inject())
    finally:
        stop.set()
        await watcher
    await audit.settle(fault, SETTLE_S)
    return audit.violations[fault]


def show(violations: list[Violation]) -> str:
    return "\n".join(str(v) for v in violations[:20])


# -- the API connection ---------------------------------------------------------------------------


async def test_connection_resets_between_scheduler_and_api_server(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    async with ResetProxy(
        apiserver_address(cluster), seed=11, chunk_reset_probability=0.03, sweep_interval_s=1.0
    ) as proxy:
        kubeconfig = proxied_kubeconfig(cluster.kubeconfig, proxy.url, tmp_path)
        replica = launch(replicas, "solo", scheduler_config(namespace), kubeconfig, tmp_path)
        await synced(replica)
        audit = Audit(api_client, {namespace}, lambda: [replica.log_path])

        async def resets() -> None:
            proxy.resets_enabled = True
            await asyncio.sleep(12)
            proxy.resets_enabled = False

        violations = await churn_under_fault(
            audit, workload_for(core_api, namespace, 11), "api resets", resets
        )
    assert proxy.resets >= 5, f"only {proxy.resets} resets injected"
    assert replica.alive()
    assert not violations, show(violations)


# -- the scheduler process ------------------------------------------------------------------------


async def test_scheduler_killed_at_random_points_and_restarted(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    replica = launch(replicas, "solo", scheduler_config(namespace), cluster.kubeconfig, tmp_path)
    await synced(replica)
    audit = Audit(api_client, {namespace}, lambda: [replica.log_path])
    rng = random.Random(22)

    async def kills() -> None:
        for _ in range(3):
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            replica.kill()
            await audit.check("sigkill")
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            replica.start()

    violations = await churn_under_fault(
        audit, workload_for(core_api, namespace, 22), "sigkill", kills
    )
    assert replica.kills == 3 and replica.starts == 4
    assert not violations, show(violations)


async def leader(api_client: client.ApiClient, namespace: str, lease: str) -> str | None:
    try:
        found = await client.CoordinationV1Api(api_client).read_namespaced_lease(lease, namespace)
    except client.ApiException:
        return None
    holder = found.spec.holder_identity
    return str(holder) if holder else None


async def two_replicas(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> tuple[dict[str, SchedulerProcess], str]:
    config = scheduler_config(namespace, leader_election=True, lease_namespace=namespace)
    by_name = {
        name: launch(replicas, name, config, cluster.kubeconfig, tmp_path)
        for name in ("alpha", "beta")
    }
    lease = config["leaderElection"]["leaseName"]
    await eventually(lambda: leader(api_client, namespace, lease), what="a leader")
    for replica in by_name.values():
        await synced(replica)
    return by_name, lease


async def test_leader_killed_and_the_follower_takes_over(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    by_name, lease = await two_replicas(cluster, api_client, namespace, tmp_path, replicas)
    audit = Audit(api_client, {namespace}, lambda: [r.log_path for r in replicas])
    leaders: list[str] = []

    async def kill_leader() -> None:
        for _ in range(2):
            await asyncio.sleep(3.0)
            holder = await leader(api_client, namespace, lease)
            assert holder is not None
            leaders.append(holder)
            by_name[holder].kill()
            await asyncio.sleep(LEASE_S + 2)
            by_name[holder].start()  # back as a follower

    violations = await churn_under_fault(
        audit, workload_for(core_api, namespace, 33), "leader sigkill", kill_leader
    )
    assert len(leaders) == 2
    assert not violations, show(violations)


async def test_leader_paused_past_its_lease_writes_nothing_after_it_resumes(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    by_name, lease = await two_replicas(cluster, api_client, namespace, tmp_path, replicas)
    audit = Audit(api_client, {namespace}, lambda: [r.log_path for r in replicas])
    paused: list[tuple[str, float]] = []

    async def pause_leader() -> None:
        await asyncio.sleep(3.0)
        holder = await leader(api_client, namespace, lease)
        assert holder is not None
        by_name[holder].pause()
        await eventually(
            lambda: _other_leads(api_client, namespace, lease, holder),
            timeout=30,
            what="the follower taking over",
        )
        await asyncio.sleep(2.0)  # the new leader binds while the old one is frozen
        resumed_at = time.time()
        by_name[holder].resume()
        paused.append((holder, resumed_at))

    violations = await churn_under_fault(
        audit, workload_for(core_api, namespace, 44), "leader sigstop", pause_leader
    )
    ((holder, resumed_at),) = paused
    stale = check_stale_writes(read_records(by_name[holder].log_path), resumed_at)
    assert not violations + stale, show(violations + stale)


async def _other_leads(api_client: client.ApiClient, namespace: str, lease: str, old: str) -> bool:
    holder = await leader(api_client, namespace, lease)
    return holder is not None and holder != old


# -- the control plane ----------------------------------------------------------------------------


async def test_api_server_restarted_mid_stream(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    replica = launch(replicas, "solo", scheduler_config(namespace), cluster.kubeconfig, tmp_path)
    await synced(replica)
    audit = Audit(api_client, {namespace}, lambda: [replica.log_path])

    async def restart() -> None:
        await asyncio.sleep(3.0)
        await restart_apiserver(cluster)

    violations = await churn_under_fault(
        audit, workload_for(core_api, namespace, 55), "apiserver restart", restart
    )
    assert replica.alive()
    assert not violations, show(violations)


async def test_watches_resumed_after_compaction_get_410_and_relist(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await churn_nodes(core_api, namespace)
    replica = launch(replicas, "solo", scheduler_config(namespace), cluster.kubeconfig, tmp_path)
    await synced(replica)
    audit = Audit(api_client, {namespace}, lambda: [replica.log_path])

    async def gone() -> None:
        await asyncio.sleep(3.0)
        await compact_etcd(cluster.etcd_url)
        await restart_apiserver(cluster)  # a fresh watch cache: older resourceVersions are gone

    violations = await churn_under_fault(
        audit, workload_for(core_api, namespace, 66), "410 gone", gone
    )
    relists = [r for r in replica.records() if r.get("event") == "informer_relist"]
    assert relists, "no watch was answered 410 Gone"
    assert not violations, show(violations)


# -- reclaim --------------------------------------------------------------------------------------

WINDOW_S = 10
POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"
PAIR = NodeSpec("P", 1, gpus=2, nvlink_domains="0-1", gpu_product="NVIDIA-H200", cpu="32")


def policy(minimum: int) -> dict[str, str]:
    return {
        POLICY + "minimum-preemptable-priority": str(minimum),
        POLICY + "toleration-seconds": "0",
        POLICY + "resource-idle-seconds": str(WINDOW_S),
        POLICY + "resource-idle-usage-threshold": "10",
    }


@pytest.fixture
async def reclaim_classes(
    api_client: client.ApiClient, namespace: str
) -> AsyncIterator[dict[str, str]]:
    scheduling = client.SchedulingV1Api(api_client)
    specs = {"idle-ok": (1000, policy(500)), "protected": (1000, {}), "preemptor": (500, {})}
    names = {short: f"{namespace}-{short}"[:60] for short in specs}
    for short, (value, notes) in specs.items():
        await scheduling.create_priority_class(
            {"metadata": {"name": names[short], "annotations": notes}, "value": value}
        )
    yield names
    for name in names.values():
        await scheduling.delete_priority_class(name)


async def holder_pod(
    core: client.CoreV1Api, namespace: str, name: str, node: str, priority_class: str, usage: str
) -> None:
    """A 2-GPU pod of another scheduler, Running on `node` with scripted usage."""
    manifest = gpu_pod(
        name,
        2,
        scheduler_name="someone-else",
        priority_class=priority_class,
        annotations={"fake-dcgm.gpu-scheduler.io/usage": usage},
    )
    await core.create_namespaced_pod(namespace, manifest)
    await bind(core, namespace, name, node, {"gpu-scheduler.io/gpus": "0,1"})

    async def running() -> bool:
        return await pod_phase(core, namespace, name) == "Running"

    await eventually(running, what=f"{name} Running")


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

    await eventually(full, timeout=WINDOW_S * 6, what="a full window of samples")


def reclaim_config(namespace: str, prometheus_url: str) -> dict[str, Any]:
    return scheduler_config(
        namespace,
        reclaim={
            "mode": "enforce",
            "prometheusUrl": prometheus_url,
            "prometheusTimeoutSeconds": 2,
            "scrapeIntervalSeconds": 1,
            "cooldownSeconds": 1,
        },
    )


async def reclaim_scene(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],
) -> list[str]:
    """Three 2-GPU nodes: one with an idle reclaimable pod, one with a busy one, one with an idle
    pod whose class has no policy. Returns the node names."""
    nodes = await make_nodes(
        core,
        [replace(isolated(PAIR, namespace), type_name=f"n{namespace[-6:]}-{i}") for i in range(3)],
    )
    await holder_pod(core, namespace, "idle", nodes[0], classes["idle-ok"], "constant:util=0")
    await holder_pod(core, namespace, "busy", nodes[1], classes["idle-ok"], "constant:util=80")
    await holder_pod(core, namespace, "kept", nodes[2], classes["protected"], "constant:util=0")
    await full_window(cluster.prometheus_url or "", namespace, ["idle", "busy", "kept"])
    return nodes


async def create_preemptor(core: client.CoreV1Api, namespace: str, classes: dict[str, str]) -> None:
    manifest = gpu_pod(
        "preemptor",
        2,
        scheduler_name=namespace,
        priority_class=classes["preemptor"],
        node_selector={TEST_LABEL: namespace},
    )
    await core.create_namespaced_pod(namespace, manifest)


def skipped(replica: SchedulerProcess, reason: str) -> int:
    return sum(
        1
        for r in replica.records()
        if r.get("event") == "reclaim_skipped" and r.get("reason") == reason
    )


async def test_prometheus_down_slow_erroring_nan_or_empty_evicts_nothing(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
    reclaim_classes: dict[str, str],
) -> None:
    nodes = await reclaim_scene(cluster, core_api, namespace, reclaim_classes)
    async with FlakyPrometheus(cluster.prometheus_url or "", slow_s=6.0) as prom:
        await prom.set_mode(Mode.DOWN)
        config = reclaim_config(namespace, prom.url)
        replica = launch(replicas, "solo", config, cluster.kubeconfig, tmp_path)
        await synced(replica)
        audit = Audit(api_client, {namespace}, lambda: [replica.log_path])
        await audit.observe()
        await create_preemptor(core_api, namespace, reclaim_classes)
        expected = {
            Mode.DOWN: "prometheus_unavailable",
            Mode.SLOW: "prometheus_unavailable",
            Mode.ERROR: "prometheus_unavailable",
            Mode.NAN: None,  # samples there, values unknown: not idle
            Mode.EMPTY: "no_metrics",
        }
        for mode, reason in expected.items():
            await prom.set_mode(mode)
            before = sum(prom.requests.values())
            attempts = len([r for r in replica.records() if r.get("event") == "reclaim_skipped"])

            async def attempted(
                before: int = before, attempts: int = attempts, mode: Mode = mode
            ) -> bool:
                if audit.evicted():
                    return True
                done = [r for r in replica.records() if r.get("event") == "reclaim_skipped"]
                return len(done) > attempts + 1 and (
                    mode is Mode.DOWN or sum(prom.requests.values()) > before
                )

            await eventually(attempted, timeout=60, what=f"two reclaim attempts with {mode.value}")
            assert audit.evicted() == [], f"evicted with Prometheus {mode.value}"
            if reason is not None:
                assert skipped(replica, reason) >= 1, f"{mode.value}: no {reason} skip"
            await audit.check(f"prometheus {mode.value}")
        await prom.set_mode(Mode.PASS)
        bound = await eventually(
            lambda: _bound_node(core_api, namespace, "preemptor"), timeout=60, what="preemptor"
        )
        await audit.check_evictions("prometheus pass")
        await audit.settle("prometheus pass", SETTLE_S)
    assert bound == nodes[0]
    assert audit.evicted() == [f"{namespace}/idle"]
    violations = [v for found in audit.violations.values() for v in found]
    assert not violations, show(violations)


async def _bound_node(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = await pod_json(core, namespace, name)
    node = pod["spec"].get("nodeName")
    return str(node) if node else None


async def test_victim_deleted_while_its_eviction_is_in_flight(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
    reclaim_classes: dict[str, str],
) -> None:
    nodes = await reclaim_scene(cluster, core_api, namespace, reclaim_classes)
    async with FlakyPrometheus(cluster.prometheus_url or "") as prom:
        deleted = asyncio.Event()

        async def delete_victim() -> None:  # reclaim is measuring: the victim goes now
            await core_api.delete_namespaced_pod("idle", namespace, grace_period_seconds=0)
            deleted.set()

        prom.on_next_query = delete_victim
        replica = launch(
            replicas, "solo", reclaim_config(namespace, prom.url), cluster.kubeconfig, tmp_path
        )
        await synced(replica)
        audit = Audit(api_client, {namespace}, lambda: [replica.log_path])
        await audit.observe()
        await create_preemptor(core_api, namespace, reclaim_classes)
        await asyncio.wait_for(deleted.wait(), 60)
        bound = await eventually(
            lambda: _bound_node(core_api, namespace, "preemptor"), timeout=60, what="preemptor"
        )
        await audit.check_evictions("victim deleted")
        await audit.settle("victim deleted", SETTLE_S)
    assert bound == nodes[0]
    for name in ("busy", "kept"):
        assert await pod_phase(core_api, namespace, name) == "Running"
    violations = audit.violations["victim deleted"]
    assert not violations, show(violations)


# -- a node deleted under assumed pods ------------------------------------------------------------


async def test_node_deleted_while_it_holds_assumed_pods(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    replicas: list[SchedulerProcess],
) -> None:
    await make_nodes(core_api, [isolated(G2_EXPANSION, namespace, count=2)])
    async with ResetProxy(apiserver_address(cluster), seed=77) as proxy:
        kubeconfig = proxied_kubeconfig(cluster.kubeconfig, proxy.url, tmp_path)
        config = scheduler_config(namespace, binding={"concurrency": 1, "timeoutSeconds": 30})
        replica = launch(replicas, "solo", config, kubeconfig, tmp_path)
        await synced(replica)
        audit = Audit(api_client, {namespace}, lambda: [replica.log_path])
        proxy.hold()  # binds stall in the proxy: placed pods stay assumed
        workload = workload_for(core_api, namespace, 77)
        await workload.run(6)

        async def placed() -> dict[str, str] | None:
            found = {
                str(r["pod"]): str(r["node"])
                for r in replica.records()
                if r.get("event") == "pod_placed"
            }
            return found if len(found) >= 6 else None

        placements = await eventually(placed, timeout=60, what="6 pods placed")
        nodes = sorted(set(placements.values()), key=list(placements.values()).count)
        doomed = nodes[-1]
        await core_api.delete_node(doomed)
        await asyncio.sleep(3.0)  # the scheduler's node watch still flows: it sees the deletion
        proxy.release()
        await audit.settle("node deleted", SETTLE_S)
        pods, nodes_now = await audit.observe()
    stranded = pods_on_missing_nodes(pods, nodes_now, {namespace})
    # At most the one bind already on the wire (concurrency 1) may land on the deleted node.
    assert len(stranded) <= 1, f"bound to deleted node {doomed}: {stranded}"
    violations = audit.violations["node deleted"]
    assert not violations, show(violations)
