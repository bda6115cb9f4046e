"""Idle reclaim under Kueue: an idle Kueue-admitted Job is taken back through its Workload
(deactivated, so Kueue suspends the Job and releases its quota), never by evicting its pod alone.

One 8-GPU node; two ClusterQueues of 8 GPUs each (together 16: overcommitted). Team A's Job
holds all 8 GPUs; team B's Job is admitted on its own quota but its pod cannot be placed. The
daemon runs as the ServiceAccount of manifests/rbac.yaml (with leader election, so its writes
carry the Lease term), with idle reclaim enforced against Prometheus and the fake dcgm-exporter,
whose usage the Jobs' pod templates script.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import G2_EXPANSION, LocalCluster, NodeSpec
from scheduler.daemon import Daemon
from scheduler.kube.kueue_workloads import (
    DEACTIVATED_BY_ANNOTATION,
    DEACTIVATED_IN_TERM_ANNOTATION,
)
from scheduler.postfilter.kueue_takeback import WORKLOAD_DEACTIVATED
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.integration.test_kueue import (
    RECIPE,
    SCHEDULER,
    Scene,
    Team,
    get_custom_object,
    gpu_job,
    team_queues,
)
from tests.integration.test_reclaim import policy, samples_for
from tests.kube import eventually
from tests.scheduling import gpus_of, isolated, make_nodes, pod_events, running_daemon, settings_for

pytestmark = pytest.mark.usefixtures("kueue")

USAGE = "fake-dcgm.gpu-scheduler.io/usage"
IDLE, BUSY = "constant:util=0", "constant:util=90"


@dataclass(frozen=True)
class Reclaim:
    scene: Scene
    daemon: Daemon
    classes: dict[str, str]
    prometheus: str

    async def submit(
        self, name: str, queue: str, gpus: int, klass: str, usage: str | None = None
    ) -> None:
        """A Job of one pod of `gpus` GPUs in `queue`, of PriorityClass `klass`."""
        job = gpu_job(name, queue, 1, gpus)
        template = job["spec"]["template"]
        template["spec"]["priorityClassName"] = self.classes[klass]
        if usage is not None:
            template["metadata"]["annotations"][USAGE] = usage
        batch = client.BatchV1Api(self.scene.api_client)
        await batch.create_namespaced_job(self.scene.namespace, job)

    async def workload(self, job: str) -> dict[str, Any]:
        name = await eventually(lambda: self.scene.workload(job), what=f"Workload of {job}")
        custom = client.CustomObjectsApi(self.scene.api_client)
        return await get_custom_object(custom, "workloads", self.scene.namespace, name)

    async def notes(self, name: str, reason: str) -> list[str] | None:
        """None while there are none (see `test_reclaim.notes`)."""
        events = await pod_events(self.scene.api_client, self.scene.namespace, name)
        return [e["note"] for e in events if e["reason"] == reason] or None

    async def idle_holder_and_pending_b(self, usage: str) -> tuple[dict[str, Any], str]:
        """Team A's Job "holder" (8 GPUs, scripted `usage`) Running with a full window of
        samples, then team B's Job "wants" (8 GPUs) admitted; returns A's pod and B's pod name."""
        await self.submit("holder", "a", 8, "victim", usage)
        (held,) = await self.scene.bound_pods("holder", 1)
        await samples_for(self.prometheus, self.scene.namespace, [held["metadata"]["name"]])
        await self.submit("wants", "b", 8, "preemptor")
        await self.scene.condition("wants", "Admitted")

        async def created() -> list[dict[str, Any]] | None:
            return await self.scene.pods("wants") or None

        (wanting,) = await eventually(created, what="B's pod created")
        return held, wanting["metadata"]["name"]


@asynccontextmanager
async def priority_classes(
    api_client: client.ApiClient, namespace: str
) -> AsyncIterator[dict[str, str]]:
    """A's class (priority 1000, reclaimable by priority >= 500 after WINDOW_S idle) and B's
    (500), cluster-scoped so named after the namespace."""
    scheduling = client.SchedulingV1Api(api_client)
    specs = {"victim": (1000, policy(500)), "preemptor": (500, {})}
    names = {short: f"{namespace}-{short}"[:60] for short in specs}
    for short, (value, class_annotations) in specs.items():
        body = {
            "metadata": {"name": names[short], "annotations": class_annotations},
            "value": value,
        }
        await scheduling.create_priority_class(body)
    try:
        yield names
    finally:
        for name in names.values():
            await scheduling.delete_priority_class(name)


async def _daemon_kubeconfig(
    cluster: LocalCluster, core: client.CoreV1Api, namespace: str, tmp_path: Path, patch: bool
) -> Path:
    """A kubeconfig of the manifests' ServiceAccount (moved into `namespace`); without `patch`,
    its ClusterRole may read Workloads but not patch them."""
    documents = rbac_documents(namespace)
    if not patch:
        for document in documents:
            if document["kind"] == "ClusterRole":
                rules: list[dict[str, Any]] = document["rules"]  # type: ignore[assignment]
                for rule in rules:
                    if "workloads" in rule["resources"]:
                        rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    return await scheduler_kubeconfig(cluster, core, namespace, documents, tmp_path)


@asynccontextmanager
async def overcommitted(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    patch: bool = True,
    spec: NodeSpec = G2_EXPANSION,
) -> AsyncIterator[Reclaim]:
    """The module docstring's set-up, gpu-scheduler running with idle reclaim enforced; the
    8-GPU node is of `spec` (`D8` for GPUs published through DRA)."""
    kubeconfig = await _daemon_kubeconfig(cluster, core, namespace, tmp_path, patch)
    taints = RECIPE["ResourceFlavor", "h200"]["spec"]["nodeTaints"]
    (node,) = await make_nodes(core, [isolated(replace(spec, taints=taints), namespace)])
    settings = settings_for(
        namespace,
        schedulerName=SCHEDULER,
        reclaim={
            "mode": "enforce",
            "prometheusUrl": cluster.prometheus_url,
            "scrapeIntervalSeconds": 1,
            "cooldownSeconds": 5,
        },
        queue={"unschedulableFlushSeconds": 1},
        leaderElection={
            "enabled": True,
            "leaseName": "gpu-scheduler",
            "leaseNamespace": namespace,
            "leaseDurationSeconds": 15,
            "renewDeadlineSeconds": 10,
            "retryPeriodSeconds": 1,
        },
    )
    teams = [Team("a", gpus=8), Team("b", gpus=8)]
    async with (
        priority_classes(api_client, namespace) as classes,
        team_queues(api_client, namespace, teams),
        running_daemon(cluster, settings, kubeconfig) as daemon,
    ):
        yield Reclaim(
            Scene(core, api_client, namespace, node), daemon, classes, cluster.prometheus_url or ""
        )


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in workload["status"]["conditions"] if c["type"] == kind]
    return copy.deepcopy(found)


async def test_an_idle_kueue_job_gives_its_quota_back_and_the_pending_job_runs(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    async with overcommitted(cluster, core_api, api_client, namespace, tmp_path) as reclaim:
        scene = reclaim.scene
        held, wanting = await reclaim.idle_holder_and_pending_b(IDLE)

        # A's Workload is deactivated: Kueue evicts it (Deactivated), releases its quota and does
        # not requeue it; its Job is suspended and its pod goes.
        await scene.condition("holder", "QuotaReserved", status="False")
        await scene.condition("holder", "Admitted", status="False")
        await scene.pods_gone("holder")
        assert await scene.suspended("holder")

        # B's pod binds on the GPUs A held.
        await scene.bound_pods("wants", 1)
        bound = await scene.pods("wants")
        assert [p["metadata"]["name"] for p in bound] == [wanting]
        assert bound[0]["spec"]["nodeName"] == scene.node
        assert sorted(gpus_of(bound[0])) == sorted(gpus_of(held)) == list(range(8))

        # ... and A stays down while B runs.
        workload = await reclaim.workload("holder")
        assert workload["spec"]["active"] is False
        evicted = _condition(workload, "Evicted")
        assert evicted["status"] == "True" and evicted["reason"] == "Deactivated", evicted
        requeued = _condition(workload, "Requeued")
        assert requeued["status"] == "False", requeued
        assert _condition(workload, "QuotaReserved")["status"] == "False"
        why = workload["metadata"]["annotations"][DEACTIVATED_BY_ANNOTATION]
        assert why.startswith("idle GPU reclaim by gpu-scheduler for pod "), why
        term = workload["metadata"]["annotations"][DEACTIVATED_IN_TERM_ANNOTATION]
        assert term.startswith(f"{namespace}/gpu-scheduler/"), term  # decided in the Lease's term
        assert await scene.pods("holder") == []
        assert await scene.suspended("holder")

        stats = reclaim.daemon.reclaimer.stats
        assert stats.evictions[WORKLOAD_DEACTIVATED] == 1
        assert stats.evictions["evicted"] == 0
        preemptor_uid = bound[0]["metadata"]["uid"]
        victim_notes = await eventually(
            lambda: reclaim.notes(held["metadata"]["name"], "Reclaimed"), what="victim event"
        )
        name = workload["metadata"]["name"]
        assert victim_notes[0].startswith(f"Kueue Workload {name} deactivated: GPU usage ")
        found = await pod_events(api_client, namespace, name)  # any object's events
        workload_notes = [e["note"] for e in found if e["reason"] == "Reclaimed"]
        assert len(workload_notes) == 1, workload_notes
        assert f"for pod {preemptor_uid} " in workload_notes[0]


async def test_a_busy_kueue_job_is_not_reclaimed(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    async with overcommitted(cluster, core_api, api_client, namespace, tmp_path) as reclaim:
        held, wanting = await reclaim.idle_holder_and_pending_b(BUSY)
        stats = reclaim.daemon.reclaimer.stats

        async def judged() -> bool:
            return stats.skips["no_idle_pods"] >= 1

        await eventually(judged, what="a reclaim attempt that found nothing idle")
        workload = await reclaim.workload("holder")
        assert workload["spec"].get("active") is not False
        assert _condition(workload, "Admitted")["status"] == "True"
        (still,) = await reclaim.scene.pods("holder")
        assert still["metadata"]["uid"] == held["metadata"]["uid"]
        assert not still["metadata"].get("deletionTimestamp")
        (pending,) = await reclaim.scene.pods("wants")
        assert pending["metadata"]["name"] == wanting and not pending["spec"].get("nodeName")
        assert stats.evictions[WORKLOAD_DEACTIVATED] == stats.evictions["evicted"] == 0


async def test_a_kueue_victim_whose_workload_patch_is_refused_is_not_evicted(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    async with overcommitted(
        cluster, core_api, api_client, namespace, tmp_path, patch=False
    ) as reclaim:
        held, wanting = await reclaim.idle_holder_and_pending_b(IDLE)
        stats = reclaim.daemon.reclaimer.stats

        async def refused() -> bool:
            return stats.skips["kueue_workload_unavailable"] >= 1

        await eventually(refused, what="a reclaim attempt refused by the Workload patch")
        victim = held["metadata"]["name"]
        notes = await eventually(
            lambda: reclaim.notes(victim, "ReclaimSkipped"), what="an event on the victim"
        )
        assert "deactivating its Kueue Workload" in notes[0] and "403" in notes[0], notes
        assert stats.evictions["evicted"] == stats.evictions[WORKLOAD_DEACTIVATED] == 0
        (still,) = await reclaim.scene.pods("holder")
        assert still["metadata"]["uid"] == held["metadata"]["uid"]
        assert not still["metadata"].get("deletionTimestamp")
        workload = await reclaim.workload("holder")
        assert workload["spec"].get("active") is not False
        assert _condition(workload, "Admitted")["status"] == "True"
        (pending,) = await reclaim.scene.pods("wants")
        assert pending["metadata"]["name"] == wanting and not pending["spec"].get("nodeName")
