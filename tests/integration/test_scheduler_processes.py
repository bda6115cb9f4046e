"""Scheduler processes: only the leader binds, a follower takes over, and a restart mid-stream
neither double-books GPUs nor leaves a pod behind."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.faults.processes import SchedulerProcess as ReplicaProcess
from hack.localcluster import G2_EXPANSION, LocalCluster
from hack.localcluster.cluster import free_port
from tests.kube import eventually
from tests.scheduling import gpus_of, isolated, make_nodes, our_pod


class SchedulerProcess(ReplicaProcess):
    """`gpu-scheduler run` as a child process with its JSON log in a file, started at once
    (the fault suite's replica process, see `hack.faults.processes`)."""

    def __init__(self, cluster: LocalCluster, config: dict[str, Any], folder: Path, name: str):
        super().__init__(name, config, cluster.kubeconfig, folder)
        self.start()

    def events(self, event: str) -> list[dict[str, Any]]:
        """The log records of one event."""
        return [record for record in self.records() if record.get("event") == event]

    def bound_pods(self) -> set[str]:
        return {record["pod"] for record in self.events("pod_bound")}


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for process in started:
        process.stop()


def _config(namespace: str, leader_election: bool) -> dict[str, Any]:
    return {
        "schedulerName": namespace,
        "metricsAddress": f"127.0.0.1:{free_port()}",
        "backoff": {"initialSeconds": 0.2, "maxSeconds": 1.0},
        "binding": {"timeoutSeconds": 2},
        "leaderElection": {
            "enabled": leader_election,
            "leaseName": "gpu-scheduler",
            "leaseNamespace": namespace,
            "leaseDurationSeconds": 4,
            "renewDeadlineSeconds": 3,
            "retryPeriodSeconds": 0.5,
        },
    }


async def _create_pods(core: client.CoreV1Api, namespace: str, names: list[str]) -> None:
    for name in names:
        await core.create_namespaced_pod(namespace, our_pod(namespace, name, 1))


async def _bound(core: client.CoreV1Api, namespace: str) -> dict[str, dict[str, Any]]:
    response = await core.list_namespaced_pod(namespace, _preload_content=False)
    pods = json.loads(await response.read())["items"]
    return {p["metadata"]["name"]: p for p in pods if p["spec"].get("nodeName")}


def _assert_no_double_booking(pods: dict[str, dict[str, Any]], gpus_per_node: int) -> None:
    taken: dict[str, list[int]] = defaultdict(list)
    for pod in pods.values():
        taken[pod["spec"]["nodeName"]].extend(gpus_of(pod))
    for node, gpus in taken.items():
        assert len(gpus) == len(set(gpus)), f"{node} has a GPU bound twice: {sorted(gpus)}"
        assert len(gpus) <= gpus_per_node


async def _all_bound(core: client.CoreV1Api, namespace: str, count: int) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        pods = await _bound(core, namespace)
        return pods if len(pods) == count else None

    return await eventually(done, timeout=90, what=f"{count} pods bound")


async def test_only_the_leader_binds_and_a_follower_takes_over(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    processes: list[SchedulerProcess],
) -> None:
    await make_nodes(core_api, [isolated(G2_EXPANSION, namespace, count=2)])
    for name in ("alpha", "beta"):
        processes.append(SchedulerProcess(cluster, _config(namespace, True), tmp_path, name))
    coordination = client.CoordinationV1Api(core_api.api_client)

    async def holder() -> str | None:
        try:
            lease = await coordination.read_namespaced_lease("gpu-scheduler", namespace)
        except client.ApiException:
            return None
        return lease.spec.holder_identity or None

    leader_name = await eventually(holder, what="a leader")
    leader = next(p for p in processes if p.name == leader_name)
    follower = next(p for p in processes if p.name != leader_name)

    first = [f"first-{i}" for i in range(6)]
    await _create_pods(core_api, namespace, first)
    await _all_bound(core_api, namespace, 6)
    assert leader.bound_pods() == {f"{namespace}/{name}" for name in first}
    assert follower.bound_pods() == set()

    leader.kill()
    second = [f"second-{i}" for i in range(6)]
    await _create_pods(core_api, namespace, second)
    pods = await _all_bound(core_api, namespace, 12)
    assert await holder() == follower.name
    assert follower.bound_pods() == {f"{namespace}/{name}" for name in second}
    _assert_no_double_booking(pods, 8)


async def test_restart_mid_stream_leaves_no_pod_behind_and_books_no_gpu_twice(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
    processes: list[SchedulerProcess],
) -> None:
    await make_nodes(core_api, [isolated(G2_EXPANSION, namespace, count=6)])  # 48 GPUs
    await _create_pods(core_api, namespace, [f"early-{i}" for i in range(24)])
    first = SchedulerProcess(cluster, _config(namespace, False), tmp_path, "first")
    processes.append(first)

    async def some_bound() -> bool:
        return len(await _bound(core_api, namespace)) >= 4

    await eventually(some_bound, what="the first binds")
    first.kill()
    await _create_pods(core_api, namespace, [f"late-{i}" for i in range(20)])
    second = SchedulerProcess(cluster, _config(namespace, False), tmp_path, "second")
    processes.append(second)
    pods = await _all_bound(core_api, namespace, 44)
    _assert_no_double_booking(pods, 8)
    assert not first.bound_pods() & second.bound_pods()
