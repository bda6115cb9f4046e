"""Idle reclaim under Kueue for a Job whose GPUs come from a ResourceClaimTemplate: the idle,
admitted Job is taken back through its Workload (deactivated: Kueue suspends the Job, its pod
and the pod's claim go, the quota and the devices are released), and the waiting Job's pod is
bound with its claim allocated the devices the idle one held.

The set-up of tests/integration/test_kueue_reclaim.py (two ClusterQueues of 8 GPUs each on one
8-GPU node, the daemon with the manifests' RBAC, idle reclaim enforced against Prometheus and
the fake dcgm-exporter) on a DRA node (`D8`), both Jobs asking for their 8 GPUs through the
template of docs/kueue.md's section on DRA; Kueue counts them as `nvidia.com/gpu`.

What it needs of gpu-scheduler beyond Kueue: the DRA pod's usage attributed to it through its
claim's devices (the fake exporter and the victim's GPU count), and the reclaim what-if that
frees a victim's DRA devices (docs/reclaim.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import D8, LocalCluster
from scheduler.postfilter.kueue_takeback import WORKLOAD_DEACTIVATED
from tests.integration.test_dra_allocation import allocated_devices, template_claim_name
from tests.integration.test_kueue_dra import bound_dra_pods, dra_job, gpu_template
from tests.integration.test_kueue_reclaim import IDLE, USAGE, Reclaim, overcommitted
from tests.integration.test_reclaim import samples_for
from tests.kube import eventually

pytestmark = pytest.mark.usefixtures("kueue")

Json = dict[str, Any]
TEMPLATE = "eight-gpus"


async def submit(reclaim: Reclaim, name: str, queue: str, klass: str, usage: str | None) -> None:
    """A Job of one pod with a claim of `TEMPLATE` in `queue`, of PriorityClass `klass`."""
    job = dra_job(name, queue, 1, TEMPLATE)
    template = job["spec"]["template"]
    template["spec"]["priorityClassName"] = reclaim.classes[klass]
    if usage is not None:
        template["metadata"]["annotations"][USAGE] = usage
    batch: Any = client.BatchV1Api(reclaim.scene.api_client)  # the stubs want models, not JSON
    await batch.create_namespaced_job(reclaim.scene.namespace, job)


async def test_an_idle_dra_job_gives_its_quota_back_and_the_pending_job_runs(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    resource: Any = client.ResourceV1Api(api_client)
    await resource.create_namespaced_resource_claim_template(
        namespace, gpu_template(TEMPLATE, namespace, 8)
    )
    async with overcommitted(
        cluster, core_api, api_client, namespace, tmp_path, spec=D8
    ) as reclaim:
        scene = reclaim.scene
        await submit(reclaim, "holder", "a", "victim", IDLE)
        (held,) = await bound_dra_pods(scene, "holder", 1)
        held_claim = await template_claim_name(core_api, namespace, held["metadata"]["name"])
        assert len(await allocated_devices(api_client, namespace, held_claim)) == 8
        await samples_for(reclaim.prometheus, namespace, [held["metadata"]["name"]])
        await submit(reclaim, "wants", "b", "preemptor", None)
        await scene.condition("wants", "Admitted")

        async def created() -> list[Json] | None:
            return await scene.pods("wants") or None

        (wanting,) = await eventually(created, what="B's pod created")

        # A's Workload is deactivated: Kueue releases its quota, suspends the Job; its pod goes,
        # and with it the claim, whose devices B's claim gets.
        await scene.condition("holder", "QuotaReserved", status="False")
        await scene.pods_gone("holder")
        assert await scene.suspended("holder")
        (bound,) = await bound_dra_pods(scene, "wants", 1)
        assert bound["metadata"]["name"] == wanting["metadata"]["name"]
        assert bound["spec"]["nodeName"] == scene.node
        claim = await template_claim_name(core_api, namespace, bound["metadata"]["name"])
        devices = await allocated_devices(api_client, namespace, claim)
        assert devices == sorted(f"gpu-{i}" for i in range(8))

        workload = await reclaim.workload("holder")
        assert workload["spec"]["active"] is False
        (evicted,) = [c for c in workload["status"]["conditions"] if c["type"] == "Evicted"]
        assert evicted["status"] == "True" and evicted["reason"] == "Deactivated", evicted
        stats = reclaim.daemon.reclaimer.stats
        assert stats.evictions[WORKLOAD_DEACTIVATED] == 1
        assert stats.evictions["evicted"] == 0
