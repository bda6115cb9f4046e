"""GPU busy time against the real cluster, Prometheus and fake dcgm-exporter: pods at 0 %, 50 %
and 100 % duty give their namespace a busy share of one half; the idle pod's GPUs count in the
idle gauge once its idle window passed; `gpu-scheduler idle-report` lists it with its policy."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hack.localcluster import LocalCluster, NodeSpec
from hack.localcluster.cluster import free_port
from scheduler.daemon import Daemon
from tests.kube import bind, eventually, gpu_pod, pod_phase
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for

ROOT = Path(__file__).resolve().parents[2]
PERIOD_S = 20
"""Two cycles of the 50 % pod's 10 s duty period: its samples in a period read 50 %."""
IDLE_WINDOW_S = 15
MEASURED_PERIODS = 3
NODE = NodeSpec(
    "B", 1, gpus=8, nvlink_domains="0-7", gpu_product="NVIDIA-H200", cpu="64", memory="512Gi"
)
POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"
DUTIES = {
    "idle": "constant:util=0",
    "half": "periodic:period=10,duty=0.5,level=100",
    "full": "constant:util=100",
}


@pytest.fixture
async def reclaimable(api_client: client.ApiClient, namespace: str) -> AsyncIterator[str]:
    """A PriorityClass with a reclaim policy (cluster-scoped, so named after the namespace)."""
    name = f"{namespace}-batch"[:60]
    annotations = {
        POLICY + "minimum-preemptable-priority": "500",
        POLICY + "toleration-seconds": "0",
        POLICY + "resource-idle-seconds": str(IDLE_WINDOW_S),
        POLICY + "resource-idle-usage-threshold": "10",
    }
    scheduling = client.SchedulingV1Api(api_client)
    await scheduling.create_priority_class(
        {"metadata": {"name": name, "annotations": annotations}, "value": 1000}
    )
    yield name
    await scheduling.delete_priority_class(name)


async def holder(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    node: str,
    priority_class: str,
    usage: str,
    gpus: tuple[int, ...],
) -> None:
    """A pod running on `node` on GPUs `gpus` with scripted usage (bound by another scheduler)."""
    manifest = gpu_pod(
        name,
        len(gpus),
        scheduler_name="someone-else",
        priority_class=priority_class,
        annotations={"fake-dcgm.gpu-scheduler.io/usage": usage},
    )
    await core.create_namespaced_pod(namespace, manifest)
    await bind(core, namespace, name, node, {"gpu-scheduler.io/gpus": ",".join(map(str, gpus))})

    async def running() -> bool:
        return await pod_phase(core, namespace, name) == "Running"

    await eventually(running, what=f"{name} Running")


def scraped(daemon: Daemon, namespace: str) -> dict[str, float]:
    """This namespace's exported GPU time, summed over PriorityClasses, from the collector."""
    text = generate_latest(daemon.metrics_registry).decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("namespace") == namespace:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scheduler.cli",
        "idle-report",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_busy_share_idle_gauge_and_idle_report(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, reclaimable: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(NODE, namespace)])
    for index, (name, usage) in enumerate(DUTIES.items()):
        gpus = (2 * index, 2 * index + 1)
        await holder(core_api, namespace, name, node, reclaimable, usage, gpus)
    settings = settings_for(
        namespace,
        reclaim={"prometheusUrl": cluster.prometheus_url, "scrapeIntervalSeconds": 1},
        accounting={
            "periodSeconds": PERIOD_S,
            "idleWindowSeconds": IDLE_WINDOW_S,
            "idleUsageThresholdPercent": 5,
        },
    )
    async with running_daemon(cluster, settings) as daemon:
        ledger = daemon.accounting.ledger

        async def measured() -> bool:
            allocated = sum(v for (ns, _), v in ledger.allocated_s.items() if ns == namespace)
            unmeasured = sum(v for (ns, _), v in ledger.unmeasured_s.items() if ns == namespace)
            return allocated - unmeasured >= MEASURED_PERIODS * PERIOD_S * 6 * 0.9

        await eventually(measured, timeout=PERIOD_S * (MEASURED_PERIODS + 4), what="periods")
        totals = scraped(daemon, namespace)
        idle_gpus = await eventually(
            lambda: _idle_gpus(daemon, namespace), timeout=PERIOD_S * 3, what="idle gauge"
        )
    share = ledger.measured_share(namespace)
    assert share is not None
    print(f"busy share of {namespace}: {share:.4f} over {ledger.periods} periods")
    assert share == pytest.approx(0.5, abs=0.04)
    busy = totals["gpu_scheduler_gpu_busy_seconds_total"]
    allocated = totals["gpu_scheduler_gpu_allocated_seconds_total"]
    unmeasured = totals["gpu_scheduler_gpu_unmeasured_seconds_total"]
    assert allocated > 0 and busy / (allocated - unmeasured) == pytest.approx(0.5, abs=0.04)
    assert idle_gpus == 2  # the 0 % pod's two GPUs; 50 % and 100 % are busy
    assert ledger.failed_periods == 0

    kubeconfig = str(cluster.kubeconfig)
    url = cluster.prometheus_url or ""
    window = ("--idle-window", str(IDLE_WINDOW_S), "--threshold", "5")
    code, out, err = await cli(
        "--kubeconfig", kubeconfig, "--prometheus-url", url, *window, "-o", "json"
    )
    assert (code, err) == (0, "")
    rows = [row for row in json.loads(out) if row["namespace"] == namespace]
    assert [(row["pod"], row["node"], row["gpus"]) for row in rows] == [("idle", node, 2)]
    assert rows[0]["reclaimable"] is True
    assert rows[0]["policy"].startswith(f"{reclaimable}: reclaimable by priority >= 500")
    assert rows[0]["usage_pct"] < 5

    code, out, err = await cli("--kubeconfig", kubeconfig, "--prometheus-url", url, *window)
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith(namespace)]
    assert line.split()[:4] == [namespace, "idle", node, "2"]

    down = f"http://127.0.0.1:{free_port()}"
    code, out, err = await cli("--kubeconfig", kubeconfig, "--prometheus-url", down)
    assert code == 1 and out == ""
    assert err.startswith("gpu-scheduler idle-report: Prometheus at http://127.0.0.1:")
    assert err.count("\n") == 1 and "Traceback" not in err


async def _idle_gpus(daemon: Daemon, namespace: str) -> float | None:
    return scraped(daemon, namespace).get("gpu_scheduler_idle_gpus") or None
