"""/metrics of a daemon running against the real cluster: after it scheduled a pod, every metric
the shipped rules and dashboard (manifests/monitoring) use is exported, and the values say what
happened."""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

from hack.localcluster import G2_EXPANSION, LocalCluster
from scheduler.daemon import Daemon
from tests.monitoring import NOT_YET_EXPORTED, exported, missing
from tests.scheduling import (
    isolated,
    make_nodes,
    our_pod,
    running_daemon,
    settings_for,
    wait_bound,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(daemon: Daemon) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{daemon.http_port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


async def test_a_running_daemon_exports_what_the_rules_and_dashboard_use(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])  # 0-3 and 4-7
    reclaim = {"mode": "dry-run", "prometheusUrl": cluster.prometheus_url}
    async with running_daemon(cluster, settings_for(namespace, reclaim=reclaim)) as daemon:
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, "train", gpus=3))
        await wait_bound(core_api, namespace, "train")
        assert daemon.allocation is not None
        await daemon.allocation.refresh()  # one query to the cluster's Prometheus
        text = await scrape(daemon)

    assert missing(text) == NOT_YET_EXPORTED
    assert not NOT_YET_EXPORTED & exported(text), "exported now: drop from NOT_YET_EXPORTED"
    found = samples(text)
    attempts = "scheduler_schedule_attempts_total"
    assert value(found, attempts, result="scheduled", profile=namespace) == 1
    assert value(found, attempts, result="error", profile=namespace) == 0
    sli = "scheduler_pod_scheduling_sli_duration_seconds_count"
    assert value(found, sli, attempts="1") == 1
    bind = "scheduler_framework_extension_point_duration_seconds_count"
    assert value(found, bind, extension_point="Bind", status="Success", profile=namespace) == 1
    for queue in ("active", "backoff", "unschedulable", "gated"):
        assert value(found, "scheduler_pending_pods", queue=queue) == 0
    gpus = "gpu_scheduler_node_gpus"
    domain0 = {"node": node, "domain": "0"}
    assert value(found, gpus, **domain0, state="allocatable") == 4
    assert value(found, gpus, **domain0, state="allocated") == 3  # best fit: one domain
    assert value(found, gpus, node=node, domain="1", state="free") == 4
    identity = daemon.elector.identity
    assert value(found, "gpu_scheduler_leader", identity=identity) == 1
    queries = "gpu_scheduler_prometheus_query_duration_seconds_count"
    assert (value(found, queries, result="ok") or 0) >= 1
    assert value(found, "gpu_scheduler_oldest_pending_pod_age_seconds") == 0
