"""DRA GPUs in usage attribution, the idle verdict and GPU time accounting, end to end: two pods
of a ResourceClaimTemplate of two GPUs, scheduled by gpu-scheduler on a D8 node (GPUs published
through DRA only), one scripted at 0 % and one at 100 %. The fake dcgm-exporter attributes each
claim's allocated devices to its pod (the series' UUIDs are the claim's devices' UUIDs), the
scheduler's reclaim path (`Reclaimer.eligible`, then `Reclaimer.measure`) finds the 0 % pod idle
and the 100 % pod busy, each holding two GPUs, and one accounting period counts both pods'
devices x time as allocated, the 100 % pod's as busy; `idle-report` lists the 0 % pod with its
two GPUs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER
from scheduler.model.objects import parse_pod
from tests.dra_objects import claim_spec, claim_template, exact, request
from tests.integration.test_busy_time import cli
from tests.integration.test_dra_allocation import (
    allocated_devices,
    dra_pod,
    template_claim_name,
    uuids,
)
from tests.kube import eventually, pod_phase
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for, wait_bound

Json = dict[str, Any]
WINDOW_S = 12
"""The reclaim policy's idle window and accounting's; a few scrapes (1 s) fill it."""
PERIOD_S = 10.0
POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"
USAGE = "fake-dcgm.gpu-scheduler.io/usage"
PODS = {"idle": "constant:util=0", "busy": "constant:util=100"}


@pytest.fixture
async def reclaimable(api_client: client.ApiClient, namespace: str) -> AsyncIterator[str]:
    """A PriorityClass whose pods idle for `WINDOW_S` under 10 % may be reclaimed."""
    name = f"{namespace}-batch"[:60]
    annotations = {
        POLICY + "minimum-preemptable-priority": "500",
        POLICY + "toleration-seconds": "0",
        POLICY + "resource-idle-seconds": str(WINDOW_S),
        POLICY + "resource-idle-usage-threshold": "10",
    }
    scheduling: Any = client.SchedulingV1Api(api_client)  # takes plain JSON bodies
    await scheduling.create_priority_class(
        {"metadata": {"name": name, "annotations": annotations}, "value": 100}
    )
    yield name
    await scheduling.delete_priority_class(name)


def _pod(namespace: str, name: str, priority_class: str) -> Json:
    pod = dra_pod(namespace, name, [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}])
    pod["metadata"]["annotations"] = {USAGE: PODS[name]}
    pod["spec"]["priorityClassName"] = priority_class
    return pod


async def _exported_uuids(url: str, namespace: str) -> dict[str, set[str]]:
    """Pod -> the UUIDs of the GPU utilization series the exporter serves for it."""
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        text = await response.text()
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "DCGM_FI_DEV_GPU_UTIL":
            continue
        for sample in family.samples:
            if sample.labels.get("namespace") == namespace:
                found.setdefault(sample.labels["pod"], set()).add(sample.labels["UUID"])
                assert sample.labels["container"] == "main"
    return found


async def test_dra_pods_are_attributed_judged_and_accounted_by_their_devices(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, reclaimable: str
) -> None:
    assert cluster.prometheus_url is not None and cluster.dcgm_url is not None
    core: Any = core_api  # takes plain JSON bodies
    api = core.api_client
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    ids = await uuids(api, node)
    spec = claim_spec(request("gpus", exact(DRIVER, count=2)))
    resource: Any = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim_template(
        namespace, claim_template("two-gpus", namespace, spec)
    )
    settings = settings_for(
        namespace,
        reclaim={
            "mode": "dry-run",  # measured by hand below; nothing pending to reclaim for
            "prometheusUrl": cluster.prometheus_url,
            "scrapeIntervalSeconds": 1,
        },
        accounting={
            "periodSeconds": 3600,  # sampled by hand below
            "idleWindowSeconds": WINDOW_S,
            "idleUsageThresholdPercent": 10,
        },
    )
    async with running_daemon(cluster, settings) as daemon:
        for name in PODS:
            await core.create_namespaced_pod(namespace, _pod(namespace, name, reclaimable))
        devices: dict[str, list[str]] = {}
        for name in PODS:
            assert (await wait_bound(core_api, namespace, name))["spec"]["nodeName"] == node
            claim = await template_claim_name(core_api, namespace, name)
            devices[name] = await allocated_devices(api, namespace, claim)

            async def running(name: str = name) -> bool:
                return await pod_phase(core_api, namespace, name) == "Running"

            await eventually(running, what=f"{name} Running")
        assert all(len(d) == 2 for d in devices.values())

        # The exporter attributes the claims' devices, by UUID, to their pods.
        want = {name: {ids[d] for d in found} for name, found in devices.items()}

        async def attributed() -> dict[str, set[str]] | None:
            found = await _exported_uuids(cluster.dcgm_url or "", namespace)
            return found if found == want else None

        await eventually(attributed, timeout=30, what=f"series of {sorted(want)} = {want}")

        # A full window of samples after both started, then the scheduler's own verdicts.
        await asyncio.sleep(WINDOW_S + 4)
        preemptor = parse_pod(
            {
                "metadata": {"name": "preemptor", "namespace": namespace, "uid": "uid-p"},
                "spec": {"priority": 1000, "containers": [{"name": "main"}]},
            }
        )
        reclaimer = daemon.reclaimer

        async def eligible() -> list[Any] | None:
            found = reclaimer.eligible(preemptor, [node])
            return found if len(found) == len(PODS) else None

        victims = await eventually(eligible, timeout=20, what="both pods eligible")
        assert {v.pod.name: v.held_gpus for v in victims} == {"idle": 2, "busy": 2}
        measured = await reclaimer.measure(preemptor, victims)
        assert measured is not None
        verdicts = {v.pod.name: v.verdict for v in measured}
        assert verdicts["idle"] is not None and verdicts["idle"].idle, verdicts["idle"]
        assert verdicts["busy"] is not None and not verdicts["busy"].idle, verdicts["busy"]
        assert len(verdicts["idle"].gpus) == 2  # both devices measured

        # Accounting: both pods' two devices for the whole period, the busy pod's busy.
        increments = await daemon.accounting.sample(PERIOD_S)
    group = (namespace, reclaimable)
    assert increments.allocated_s[group] == pytest.approx(2 * 2 * PERIOD_S)
    assert increments.unmeasured_s[group] == pytest.approx(0.0)
    assert increments.busy_s[group] == pytest.approx(2 * PERIOD_S, rel=0.1)
    assert increments.idle_gpus[namespace] == 2
    assert [key[1] for key in increments.idle_pods] == ["idle"]

    # idle-report counts the idle pod's GPUs by its claim's devices too.
    window = ("--idle-window", str(WINDOW_S), "--threshold", "10")
    code, out, err = await cli(
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--prometheus-url",
        cluster.prometheus_url,
        *window,
        "-o",
        "json",
    )
    assert (code, err) == (0, "")
    rows = [row for row in json.loads(out) if row["namespace"] == namespace]
    assert [(row["pod"], row["node"], row["gpus"]) for row in rows] == [("idle", node, 2)]
