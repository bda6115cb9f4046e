"""Kueue admits GPU Jobs against team quotas; gpu-scheduler places and binds their pods.

Runs the real Kueue (`kueue` fixture: hack/localcluster/kueue.py, the version of
hack/versions.env) against the session's cluster. Every Kueue object and Job is built from the
recipe of docs/kueue.md, renamed and sized per test: Jobs labelled `kueue.x-k8s.io/queue-name`,
pod template with `schedulerName: gpu-scheduler` and `nvidia.com/gpu` requests. Their pods
carry kwok's until-deleted annotation (hack/localcluster/kwok_stages.py), so they run until Kueue
suspends the Job or the test deletes it, and terminate like a kubelet's.

Each test's ResourceFlavor carries `nodeLabels: {gpu-scheduler.io/test: <namespace>}`: Kueue
copies them into the admitted pods' nodeSelector, which is what keeps the pods on the test's own
nodes. ClusterQueues and ResourceFlavors are cluster-scoped, named after the namespace, and
deleted when the test ends.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import G2_EXPANSION, LocalCluster
from hack.localcluster.kueue import QUEUE_LABEL
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from tests.docs import kueue_recipe
from tests.kube import eventually
from tests.scheduling import (
    TEST_LABEL,
    gpus_of,
    isolated,
    make_nodes,
    running_daemon,
    settings_for,
)

pytestmark = pytest.mark.usefixtures("kueue")

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
SCHEDULER = "gpu-scheduler"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
GPU = "nvidia.com/gpu"
RECIPE = kueue_recipe()
"""The objects of docs/kueue.md's recipe: the tests' objects are built from them."""
(FLAVOR_TOLERATION,) = RECIPE["ResourceFlavor", "h200"]["spec"]["tolerations"]
NVLINK_DOMAINS_OF_8 = ({0, 1, 2, 3}, {4, 5, 6, 7})


@dataclass(frozen=True)
class Team:
    """One ClusterQueue (and its LocalQueue of the same name in the test's namespace)."""

    name: str
    gpus: int
    borrowing_limit: int | None = None
    reclaim: bool = False
    """preemption.reclaimWithinCohort: Any (take lent quota back from borrowers)."""


def resource_flavor(
    name: str, namespace: str, node_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The recipe's flavor, for the test's own nodes (those with `node_labels` when given)."""
    flavor = copy.deepcopy(RECIPE["ResourceFlavor", "h200"])
    flavor["metadata"] = {"name": name}
    flavor["spec"]["nodeLabels"] = dict(node_labels or {TEST_LABEL: namespace})
    return flavor


def cluster_queue(name: str, flavor: str, team: Team, cohort: str | None) -> dict[str, Any]:
    """The recipe's team-a ClusterQueue (the lender, reclaiming) when `team.reclaim`, else its
    team-b (the borrower), with the team's GPU quota."""
    queue = copy.deepcopy(RECIPE["ClusterQueue", "team-a" if team.reclaim else "team-b"])
    queue["metadata"] = {"name": name}
    spec = queue["spec"]
    spec.pop("cohortName")
    if cohort:
        spec["cohortName"] = cohort
    ((only_flavor,),) = [group["flavors"] for group in spec["resourceGroups"]]
    only_flavor["name"] = flavor
    (gpu,) = [r for r in only_flavor["resources"] if r["name"] == GPU]
    gpu["nominalQuota"] = team.gpus
    gpu.pop("borrowingLimit", None)
    if team.borrowing_limit is not None:
        gpu["borrowingLimit"] = team.borrowing_limit
    return queue


def local_queue(name: str, target: str) -> dict[str, Any]:
    queue = copy.deepcopy(RECIPE["LocalQueue", "team-a"])
    queue["metadata"] = {"name": name}
    queue["spec"]["clusterQueue"] = target
    return queue


def gpu_job(name: str, queue: str, pods: int, gpus_per_pod: int) -> dict[str, Any]:
    """The recipe's Job with `pods` parallel pods of `gpus_per_pod` GPUs each, queued in
    `queue`; its pods run on kwok until deleted."""
    job = copy.deepcopy(RECIPE["Job", "train"])
    job["metadata"] = {"name": name, "labels": {QUEUE_LABEL: queue}}
    job["spec"].update(parallelism=pods, completions=pods)
    template = job["spec"]["template"]
    template["metadata"] = {"annotations": {RUN_ANNOTATION: UNTIL_DELETED}}
    template["spec"]["terminationGracePeriodSeconds"] = 0
    (container,) = template["spec"]["containers"]
    container["resources"]["requests"][GPU] = str(gpus_per_pod)
    container["resources"]["limits"][GPU] = str(gpus_per_pod)
    return job


@asynccontextmanager
async def team_queues(
    api_client: client.ApiClient,
    namespace: str,
    teams: Sequence[Team],
    cohort: bool = False,
    node_labels: Mapping[str, str] | None = None,
) -> AsyncIterator[None]:
    """A ResourceFlavor for the test's nodes (`resource_flavor`), a ClusterQueue per team (in
    one cohort when `cohort`) and its LocalQueue; waits until every ClusterQueue is Active,
    deletes the cluster-scoped objects at the end."""
    custom = client.CustomObjectsApi(api_client)
    cohort_name = namespace if cohort else None
    queues = {team.name: f"{namespace}-{team.name}" for team in teams}
    await custom.create_cluster_custom_object(
        GROUP, VERSION, "resourceflavors", resource_flavor(namespace, namespace, node_labels)
    )
    try:
        for team in teams:
            body = cluster_queue(queues[team.name], namespace, team, cohort_name)
            await custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", body)
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "localqueues", local_queue(team.name, queues[team.name])
            )
        for name in queues.values():

            async def active(name: str = name) -> dict[str, Any] | None:
                return await _condition(custom, "clusterqueues", None, name, "Active")

            await eventually(active, what=f"ClusterQueue {name} Active")
        yield
    finally:
        for name in queues.values():
            await _delete_quietly(
                custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
            )
        await _delete_quietly(
            custom.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", namespace)
        )


async def _delete_quietly(call: Any) -> None:
    try:
        await call
    except client.ApiException as error:
        if error.status != 404:
            raise


async def get_custom_object(
    custom: client.CustomObjectsApi, plural: str, namespace: str | None, name: str
) -> dict[str, Any]:
    if namespace is None:
        response = await custom.get_cluster_custom_object(
            GROUP, VERSION, plural, name, _preload_content=False
        )
    else:
        response = await custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, _preload_content=False
        )
    body: dict[str, Any] = json.loads(await response.read())
    return body


async def _condition(
    custom: client.CustomObjectsApi,
    plural: str,
    namespace: str | None,
    name: str,
    kind: str,
    status: str = "True",
) -> dict[str, Any] | None:
    body = await get_custom_object(custom, plural, namespace, name)
    for condition in (body.get("status") or {}).get("conditions") or ():
        if condition["type"] == kind and condition["status"] == status:
            found: dict[str, Any] = condition
            return found
    return None


@dataclass(frozen=True)
class Scene:
    """A test's 8-GPU node and its namespace under Kueue: submits Jobs and waits on them."""

    core: client.CoreV1Api
    api_client: client.ApiClient
    namespace: str
    node: str

    async def submit(self, name: str, queue: str, pods: int, gpus: int) -> None:
        """Create `gpu_job(name, queue, pods, gpus)`."""
        batch = client.BatchV1Api(self.api_client)
        await batch.create_namespaced_job(self.namespace, gpu_job(name, queue, pods, gpus))

    async def running(self, name: str, queue: str, pods: int, gpus: int) -> list[dict[str, Any]]:
        """Submit a Job and wait until it is admitted and its pods are bound and Running."""
        await self.submit(name, queue, pods, gpus)
        await self.condition(name, "Admitted")
        return await self.bound_pods(name, pods)

    async def workload(self, job: str) -> str | None:
        """The name of the Workload Kueue made for Job `job` (owned by it), None before."""
        custom = client.CustomObjectsApi(self.api_client)
        response = await custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "workloads", _preload_content=False
        )
        for item in json.loads(await response.read())["items"]:
            owners = item["metadata"].get("ownerReferences") or ()
            if any(o["kind"] == "Job" and o["name"] == job for o in owners):
                name: str = item["metadata"]["name"]
                return name
        return None

    async def condition(
        self, job: str, kind: str, status: str = "True", timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until Job `job`'s Workload has condition `kind` with `status`; returns it."""
        custom = client.CustomObjectsApi(self.api_client)

        async def probe() -> dict[str, Any] | None:
            workload = await self.workload(job)
            if workload is None:
                return None
            return await _condition(custom, "workloads", self.namespace, workload, kind, status)

        return await eventually(
            probe, timeout=timeout, what=f"Workload of Job {job}: {kind}={status}"
        )

    async def pods(self, job: str) -> list[dict[str, Any]]:
        response = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_NAME_LABEL}={job}", _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(await response.read())["items"]
        return items

    async def bound_pods(self, job: str, count: int) -> list[dict[str, Any]]:
        """Wait until Job `job` has exactly `count` pods, each bound by gpu-scheduler (node and
        GPU annotation set) and Running; returns them."""

        async def probe() -> list[dict[str, Any]] | None:
            pods = await self.pods(job)
            ready = [
                p
                for p in pods
                if p["spec"].get("nodeName")
                and gpus_of(p)
                and p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            return ready if len(ready) == count == len(pods) else None

        return await eventually(probe, what=f"{count} pod(s) of Job {job} bound and Running")

    async def pods_gone(self, job: str) -> None:
        async def none_left() -> bool:
            return await self.pods(job) == []

        await eventually(none_left, what=f"the pods of Job {job} gone")

    async def suspended(self, job: str) -> bool:
        found = await client.BatchV1Api(self.api_client).read_namespaced_job(job, self.namespace)
        return bool(found.spec.suspend)


def assert_in_one_domain(pod: dict[str, Any]) -> None:
    gpus = set(gpus_of(pod))
    assert any(gpus <= domain for domain in NVLINK_DOMAINS_OF_8), (pod["metadata"]["name"], gpus)


@asynccontextmanager
async def eight_gpus_under_kueue(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    teams: Sequence[Team],
    cohort: bool = False,
) -> AsyncIterator[Scene]:
    """One 8-GPU node (two NVLink domains of 4) of the test's own, tainted with the flavor's
    nodeTaints, the teams' queues
    (`team_queues`) and gpu-scheduler running as `SCHEDULER`."""
    taints = RECIPE["ResourceFlavor", "h200"]["spec"]["nodeTaints"]
    (node,) = await make_nodes(core, [isolated(replace(G2_EXPANSION, taints=taints), namespace)])
    async with (
        team_queues(api_client, namespace, teams, cohort),
        running_daemon(cluster, settings_for(namespace, schedulerName=SCHEDULER)),
    ):
        yield Scene(core, api_client, namespace, node)


async def test_admits_within_the_gpu_quota_and_queues_beyond_it(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    teams = [Team("team", gpus=4)]
    async with eight_gpus_under_kueue(cluster, core_api, api_client, namespace, teams) as scene:
        first = await scene.running("first", "team", pods=2, gpus=2)
        assert {p["spec"]["nodeName"] for p in first} == {scene.node}
        for pod in first:
            assert pod["spec"]["nodeSelector"][TEST_LABEL] == namespace  # from the flavor
            assert FLAVOR_TOLERATION in pod["spec"]["tolerations"]  # from the flavor
            assert len(gpus_of(pod)) == 2
            assert_in_one_domain(pod)
        assert not set(gpus_of(first[0])) & set(gpus_of(first[1]))

        # 4 of the quota's 4 GPUs are in use: the second Job waits, suspended, with no pods,
        # although the node has 4 GPUs free.
        await scene.submit("second", "team", pods=1, gpus=2)
        pending = await scene.condition("second", "QuotaReserved", status="False")
        assert pending["reason"] == "Pending", pending
        assert "nvidia.com/gpu" in pending["message"], pending
        assert await scene.suspended("second")
        assert await scene.pods("second") == []


@pytest.mark.parametrize("how", ["finished", "deleted"])
async def test_a_queued_job_is_admitted_and_bound_when_quota_frees(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    how: str,
) -> None:
    teams = [Team("team", gpus=4)]
    async with eight_gpus_under_kueue(cluster, core_api, api_client, namespace, teams) as scene:
        (running,) = await scene.running("first", "team", pods=1, gpus=4)
        await scene.submit("second", "team", pods=1, gpus=4)
        await scene.condition("second", "QuotaReserved", status="False")

        if how == "finished":  # without the annotation, kwok completes a Job's running pod
            patch = {"metadata": {"annotations": {RUN_ANNOTATION: None}}}
            await core_api.patch_namespaced_pod(running["metadata"]["name"], namespace, patch)
            await scene.condition("first", "Finished")
        else:
            batch = client.BatchV1Api(api_client)
            await batch.delete_namespaced_job("first", namespace, propagation_policy="Background")
        # A deleted Job's Workload goes through the garbage collector, which notices Kueue's
        # CRDs (installed after it started) on its next 30 s discovery resync.
        await scene.condition("second", "Admitted", timeout=120)
        (pod,) = await scene.bound_pods("second", 1)
        assert not await scene.suspended("second")
        assert pod["spec"]["nodeName"] == scene.node
        assert len(gpus_of(pod)) == 4
        assert_in_one_domain(pod)


async def test_the_lender_reclaims_its_quota_from_a_borrower_in_the_cohort(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    teams = [Team("lender", gpus=4, reclaim=True), Team("borrower", gpus=4, borrowing_limit=4)]
    async with eight_gpus_under_kueue(
        cluster, core_api, api_client, namespace, teams, cohort=True
    ) as scene:
        # The borrower takes all 8 GPUs: its own 4 and the lender's idle 4.
        borrowed = await scene.running("borrowing", "borrower", pods=4, gpus=2)
        assert sorted(g for p in borrowed for g in gpus_of(p)) == list(range(8))

        # The lender wants its 4 back: Kueue preempts the borrower (whole Workload), whose
        # pods terminate; then admits the lender, whose pod gpu-scheduler binds in one domain.
        await scene.submit("lending", "lender", pods=1, gpus=4)
        preempted = await scene.condition("borrowing", "Preempted")
        assert preempted["reason"] == "InCohortReclamation", preempted
        await scene.condition("lending", "Admitted")
        (pod,) = await scene.bound_pods("lending", 1)
        assert pod["spec"]["nodeName"] == scene.node
        assert len(gpus_of(pod)) == 4
        assert_in_one_domain(pod)
        await scene.pods_gone("borrowing")
        # Requeued, it cannot come back: 8 GPUs no longer fit in what the cohort has left.
        await scene.condition("borrowing", "QuotaReserved", status="False")
        assert await scene.suspended("borrowing")
