"""Helpers for tests that run the scheduler against the local cluster.

Tests share one cluster, so each test isolates itself: its own scheduler name (pods opt in with
it), its own nodes labelled `gpu-scheduler.io/test=<namespace>`, and a nodeSelector on that label
for every pod it creates, so no test sees another test's nodes as candidates.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import LocalCluster, NodeSpec, create_nodes, wait_nodes_ready
from hack.localcluster.cluster import free_port
from scheduler.config import SchedulerConfig, config_from_data
from scheduler.daemon import Daemon
from scheduler.kube.client import api_client_for
from tests.kube import eventually, gpu_pod

TEST_LABEL = "gpu-scheduler.io/test"


def isolated(spec: NodeSpec, namespace: str, count: int = 1) -> NodeSpec:
    """`spec` renamed after the test and labelled with its namespace."""
    return replace(
        spec,
        type_name=f"n{namespace[-6:]}-{spec.type_name}",
        count=count,
        labels={**spec.labels, TEST_LABEL: namespace},
    )


async def make_nodes(core: client.CoreV1Api, specs: Sequence[NodeSpec]) -> list[str]:
    names = await create_nodes(core, specs)
    await wait_nodes_ready(core, names)
    return names


def our_pod(namespace: str, name: str, gpus: int = 1, **kwargs: Any) -> dict[str, Any]:
    """A GPU pod for this test's scheduler, limited to this test's nodes."""
    selector = {TEST_LABEL: namespace, **kwargs.pop("node_selector", {})}
    scheduler = kwargs.pop("scheduler_name", namespace)
    return gpu_pod(name, gpus, scheduler_name=scheduler, node_selector=selector, **kwargs)


def settings_for(namespace: str, **overrides: Any) -> SchedulerConfig:
    data: dict[str, Any] = {
        "schedulerName": namespace,
        "leaderElection": {"enabled": False},
        "metricsAddress": f"127.0.0.1:{free_port()}",
        "backoff": {"initialSeconds": 0.2, "maxSeconds": 1.0},
    }
    for key, value in overrides.items():
        data[key] = value
    return config_from_data(data, "<test>", {}, {})


@asynccontextmanager
async def running_daemon(
    cluster: LocalCluster, settings: SchedulerConfig, kubeconfig: Path | None = None
) -> AsyncIterator[Daemon]:
    """A Daemon running in this event loop until the block ends (then stopped gracefully),
    talking to the cluster as the admin or as whoever `kubeconfig` names."""
    api = await api_client_for(str(kubeconfig or cluster.kubeconfig))
    daemon = Daemon(settings, api)
    task = asyncio.create_task(daemon.run())
    try:
        await eventually(lambda: _synced(daemon, task), what="scheduler caches synced")
        yield daemon
    finally:
        daemon.stop()
        await asyncio.wait_for(task, 30)
        await api.close()


async def _synced(daemon: Daemon, task: asyncio.Task[None]) -> bool:
    if task.done():
        task.result()  # surface the daemon's exception
        raise AssertionError("the daemon stopped")
    return daemon.synced()


async def pod_json(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    response = await core.read_namespaced_pod(name, namespace, _preload_content=False)
    body: dict[str, Any] = json.loads(await response.read())
    return body


async def wait_bound(
    core: client.CoreV1Api, namespace: str, name: str, timeout: float = 60
) -> dict[str, Any]:
    async def bound() -> dict[str, Any] | None:
        pod = await pod_json(core, namespace, name)
        return pod if pod["spec"].get("nodeName") else None

    return await eventually(bound, timeout=timeout, what=f"{namespace}/{name} bound")


def gpus_of(pod: Mapping[str, Any]) -> list[int]:
    value = (pod["metadata"].get("annotations") or {}).get("gpu-scheduler.io/gpus", "")
    return [int(g) for g in value.split(",") if g]


async def pod_events(
    api_client: client.ApiClient, namespace: str, name: str
) -> list[dict[str, Any]]:
    events = client.EventsV1Api(api_client)
    response = await events.list_namespaced_event(
        namespace, field_selector=f"regarding.name={name}", _preload_content=False
    )
    body: dict[str, Any] = json.loads(await response.read())
    items: list[dict[str, Any]] = body["items"]
    return items
