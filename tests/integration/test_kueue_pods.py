"""Kueue's Pod integration, TopologyAwareScheduling and pod groups, with gpu-scheduler binding.

Runs the real Kueue (`kueue` fixture; hack/localcluster/kueue.py enables its `pod` integration)
against the session's cluster. The pods are built from the yaml of docs/kueue.md's sections
"Plain pods", "Topology-aware scheduling" and "Pod groups", renamed and sized per test; they carry
kwok's until-deleted annotation, so they stay Running until deleted.

Each test's ResourceFlavor has `nodeLabels: {gpu-scheduler.io/test: <namespace>}` (Kueue copies
them into the admitted pods' nodeSelector, which keeps the pods on the test's own nodes); the
ClusterQueue, ResourceFlavor and Topology are cluster-scoped, named after the namespace and
deleted when the test ends. What gpu-scheduler did is read from its own counters and Events,
not from timing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hack.localcluster import G2_EXPANSION, LocalCluster
from hack.localcluster.kueue import ADMISSION_GATE, QUEUE_LABEL
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from scheduler.daemon import Daemon
from tests.docs import KUEUE, section_blocks
from tests.kube import eventually
from tests.scheduling import (
    TEST_LABEL,
    gpus_of,
    isolated,
    make_nodes,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
)

pytestmark = pytest.mark.usefixtures("kueue")

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
SCHEDULER = "gpu-scheduler"
GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
NVLINK_DOMAINS_OF_8 = ({0, 1, 2, 3}, {4, 5, 6, 7})


def _documents(heading: str) -> list[dict[str, Any]]:
    (block,) = section_blocks(KUEUE.read_text(), heading, "yaml")
    return [d for d in yaml.safe_load_all(block) if d]


(PLAIN_POD,) = _documents("Plain pods (Kueue's Pod integration)")
TOPOLOGY, TAS_FLAVOR, TAS_POD = _documents("Topology-aware scheduling")
(GROUP_POD,) = _documents("Pod groups")
RACK = TOPOLOGY["spec"]["levels"][0]["nodeLabel"]
"""The rack level of the documented Topology (a node label)."""


def pod_from(doc: dict[str, Any], name: str, gpus: int) -> dict[str, Any]:
    """The documented pod renamed, queued in LocalQueue "team", with `gpus` GPUs, running on kwok
    until deleted; namespace left to the create call."""
    pod = copy.deepcopy(doc)
    metadata = pod["metadata"]
    metadata["name"] = name
    metadata.pop("namespace", None)
    metadata["labels"][QUEUE_LABEL] = "team"
    metadata.setdefault("annotations", {})[RUN_ANNOTATION] = UNTIL_DELETED
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    (container,) = pod["spec"]["containers"]
    container["resources"]["requests"][GPU] = str(gpus)
    container["resources"]["limits"][GPU] = str(gpus)
    return pod


def gate_names(pod: dict[str, Any]) -> set[str]:
    return {g["name"] for g in pod["spec"].get("schedulingGates") or ()}


def assert_in_one_domain(pod: dict[str, Any]) -> None:
    gpus = set(gpus_of(pod))
    assert any(gpus <= domain for domain in NVLINK_DOMAINS_OF_8), (pod["metadata"]["name"], gpus)


def scheduler_counter(daemon: Daemon, result: str) -> float:
    """gpu-scheduler's scheduler_schedule_attempts_total{result=...} (summed over profiles)."""
    text = generate_latest(daemon.metrics_registry).decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "scheduler_schedule_attempts_total"
                and sample.labels.get("result") == result
            ):
                total += sample.value
    return total


async def _delete_quietly(call: Any) -> None:
    try:
        await call
    except client.ApiException as error:
        if error.status != 404:
            raise


@dataclass(frozen=True)
class Scene:
    """A test's namespace under Kueue, its nodes and the running gpu-scheduler."""

    core: client.CoreV1Api
    api_client: client.ApiClient
    namespace: str
    daemon: Daemon

    async def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create the pod; returns it as the API server stored it (after the webhooks)."""
        response = await self.core.create_namespaced_pod(
            self.namespace, pod, _preload_content=False
        )
        created: dict[str, Any] = json.loads(await response.read())
        return created

    async def pod(self, name: str) -> dict[str, Any]:
        return await pod_json(self.core, self.namespace, name)

    async def bound(self, names: Sequence[str], timeout: float = 60) -> list[dict[str, Any]]:
        """Wait until every pod of `names` is ungated, bound by gpu-scheduler (node and GPU
        annotation) and Running; returns them in order."""

        async def probe() -> list[dict[str, Any]] | None:
            pods = [await self.pod(name) for name in names]
            done = all(
                p["spec"].get("nodeName")
                and gpus_of(p)
                and p["status"].get("phase") == "Running"
                and not gate_names(p)
                for p in pods
            )
            return pods if done else None

        return await eventually(probe, timeout=timeout, what=f"{', '.join(names)} bound")

    async def workload_condition(
        self, pod: str, kind: str, status: str = "True", timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until the Workload owning pod `pod` has condition `kind` = `status`."""
        custom = client.CustomObjectsApi(self.api_client)

        async def probe() -> dict[str, Any] | None:
            response = await custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "workloads", _preload_content=False
            )
            for item in json.loads(await response.read())["items"]:
                owners = item["metadata"].get("ownerReferences") or ()
                if not any(o["kind"] == "Pod" and o["name"] == pod for o in owners):
                    continue
                for condition in (item.get("status") or {}).get("conditions") or ():
                    if condition["type"] == kind and condition["status"] == status:
                        found: dict[str, Any] = condition
                        return found
            return None

        return await eventually(
            probe, timeout=timeout, what=f"Workload of pod {pod}: {kind}={status}"
        )

    async def failed_binds(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """gpu-scheduler's Events of failed Bindings on these pods."""
        found = []
        for name in names:
            for event in await pod_events(self.api_client, self.namespace, name):
                if event.get("reason") == "FailedScheduling" and event.get("action") == "Binding":
                    found.append(event)
        return found


@asynccontextmanager
async def under_kueue(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    gpu_quota: int,
    racks: Sequence[int] = (1,),
    topology: bool = False,
) -> AsyncIterator[Scene]:
    """8-GPU nodes of the test's own (two NVLink domains of 4; `racks[i]` of them in rack
    "<namespace>-r<i+1>"), a ResourceFlavor for them (with the documented Topology when
    `topology`), a ClusterQueue of `gpu_quota` GPUs, its LocalQueue "team", and gpu-scheduler
    running as `SCHEDULER`."""
    specs = [
        isolated(
            replace(G2_EXPANSION, type_name=f"R{i + 1}", labels={RACK: f"{namespace}-r{i + 1}"}),
            namespace,
            count,
        )
        for i, count in enumerate(racks)
    ]
    await make_nodes(core, specs)
    custom = client.CustomObjectsApi(api_client)
    flavor = copy.deepcopy(TAS_FLAVOR)
    flavor["metadata"] = {"name": namespace}
    flavor["spec"]["nodeLabels"] = {TEST_LABEL: namespace}
    if topology:
        body = copy.deepcopy(TOPOLOGY)
        body["metadata"] = {"name": namespace}
        await custom.create_cluster_custom_object(GROUP, VERSION, "topologies", body)
        flavor["spec"]["topologyName"] = namespace
    else:
        del flavor["spec"]["topologyName"]
    queue = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": namespace},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": namespace,
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "256Gi"},
                                {"name": GPU, "nominalQuota": gpu_quota},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    local = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": "team"},
        "spec": {"clusterQueue": namespace},
    }
    try:
        await custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
        await custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", queue)
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "localqueues", local
        )

        async def active() -> bool:
            response = await custom.get_cluster_custom_object(
                GROUP, VERSION, "clusterqueues", namespace, _preload_content=False
            )
            body = json.loads(await response.read())
            conditions = (body.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

        await eventually(active, what=f"ClusterQueue {namespace} Active")
        async with running_daemon(
            cluster, settings_for(namespace, schedulerName=SCHEDULER)
        ) as daemon:
            yield Scene(core, api_client, namespace, daemon)
    finally:
        await _delete_quietly(
            custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", namespace)
        )
        await _delete_quietly(
            custom.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", namespace)
        )
        if topology:
            await _delete_quietly(
                custom.delete_cluster_custom_object(GROUP, VERSION, "topologies", namespace)
            )


async def test_plain_pods_are_gated_until_admitted_and_queued_beyond_the_quota(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    async with under_kueue(cluster, core_api, api_client, namespace, gpu_quota=4) as scene:
        first = await scene.create(pod_from(PLAIN_POD, "first", gpus=4))
        assert ADMISSION_GATE in gate_names(first)  # gated by Kueue's webhook at creation
        assert not first["spec"].get("nodeName")
        await scene.workload_condition("first", "Admitted")
        (bound,) = await scene.bound(["first"])
        assert bound["spec"]["nodeSelector"][TEST_LABEL] == namespace  # the flavor's nodeLabels
        assert len(gpus_of(bound)) == 4
        assert_in_one_domain(bound)

        # The quota's 4 GPUs are in use: the second pod's Workload waits and the pod stays
        # gated, never bound, although the node has 4 GPUs free.
        second = await scene.create(pod_from(PLAIN_POD, "second", gpus=2))
        assert ADMISSION_GATE in gate_names(second)
        pending = await scene.workload_condition("second", "QuotaReserved", status="False")
        assert pending["reason"] == "Pending", pending
        waiting = await scene.pod("second")
        assert ADMISSION_GATE in gate_names(waiting)
        assert not waiting["spec"].get("nodeName")
        (scheduled,) = [c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "SchedulingGated")
        assert scene.daemon.scheduler.bound == 1  # gpu-scheduler bound only the first

        # Deleting the first pod frees the quota: Kueue admits and ungates the second, which
        # gpu-scheduler binds.
        await core_api.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
        await scene.workload_condition("second", "Admitted", timeout=120)
        (bound,) = await scene.bound(["second"], timeout=120)
        assert len(gpus_of(bound)) == 2
        assert_in_one_domain(bound)
        assert scene.daemon.scheduler.bound == 2
        assert await scene.failed_binds(["first", "second"]) == []


async def test_topology_aware_scheduling_pins_and_gpu_scheduler_binds_there(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    async with under_kueue(
        cluster, core_api, api_client, namespace, gpu_quota=24, racks=(1, 2), topology=True
    ) as scene:
        names = ["train-0", "train-1"]
        for name in names:
            created = await scene.create(pod_from(TAS_POD, name, gpus=8))
            assert created["metadata"]["annotations"][REQUIRED_TOPOLOGY] == RACK
            assert {ADMISSION_GATE, TOPOLOGY_GATE} <= gate_names(created)
        await scene.workload_condition("train-0", "Admitted")
        pods = await scene.bound(names)
        nodes = [p["spec"]["nodeName"] for p in pods]
        for pod in pods:
            selector = pod["spec"]["nodeSelector"]
            # Kueue pinned the pod to a node (the lowest level: the node names the rack too);
            # gpu-scheduler bound it exactly there.
            assert pod["spec"]["nodeName"] == selector[HOSTNAME], selector
            assert selector[TEST_LABEL] == namespace, selector  # the flavor's nodeLabels
            assert sorted(gpus_of(pod)) == list(range(8))
        assert len(set(nodes)) == 2
        for node in nodes:
            labels = (await core_api.read_node(node)).metadata.labels
            assert labels[RACK] == f"{namespace}-r2"
        assert scene.daemon.scheduler.bound == 2
        assert scheduler_counter(scene.daemon, "error") == 0  # no failed Binding
        assert await scene.failed_binds(names) == []


async def test_an_admitted_pod_group_binds_all_at_once_or_nothing(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    async with under_kueue(cluster, core_api, api_client, namespace, gpu_quota=16) as scene:
        names = ["worker-0", "worker-1", "worker-2"]
        for name in names:
            created = await scene.create(pod_from(GROUP_POD, name, gpus=4))
            assert created["metadata"]["annotations"][TOTAL_COUNT] == "3"
            assert ADMISSION_GATE in gate_names(created)
        await scene.workload_condition("worker-0", "Admitted")

        # Admitted (12 of 16 GPUs of quota), but one 8-GPU node holds only two of the three:
        # gpu-scheduler binds none of them and says why.
        async def reported() -> list[dict[str, Any]] | None:
            found = []
            for name in names:
                for event in await pod_events(api_client, namespace, name):
                    if event.get("reason") == "FailedScheduling" and "minCount 3" in (
                        event.get("note") or ""
                    ):
                        found.append(event)
                        break
            return found if len(found) == len(names) else None

        events = await eventually(reported, what="the group reported unschedulable")
        assert events[0]["note"].startswith("gang workers: only 2 of minCount 3 members fit")
        for name in names:
            pod = await scene.pod(name)
            assert not gate_names(pod)  # Kueue ungated them all
            assert not pod["spec"].get("nodeName")
        assert scene.daemon.scheduler.bound == 0

        # A second node: the whole group is bound, in one go.
        spec = replace(G2_EXPANSION, type_name="More", labels={RACK: f"{namespace}-r1"})
        await make_nodes(core_api, [isolated(spec, namespace)])
        pods = await scene.bound(names)
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
        for pod in pods:
            assert len(gpus_of(pod)) == 4
            assert_in_one_domain(pod)
        assert scene.daemon.scheduler.bound == 3
        assert await scene.failed_binds(names) == []
