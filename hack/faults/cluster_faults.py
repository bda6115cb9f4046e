"""Faults of the control plane itself: an API server restart or pause, and etcd compaction, which
makes every watch resumed from an older resourceVersion answer 410 Gone."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp

from hack.localcluster import LocalCluster
from hack.localcluster.cluster import restart_component


async def restart_apiserver(cluster: LocalCluster) -> None:
    """Stop kube-apiserver and start it again on the same port (blocking work off the loop)."""
    await asyncio.to_thread(restart_component, cluster, "kube-apiserver")


@contextmanager
def paused_component(cluster: LocalCluster, name: str) -> Iterator[None]:
    """SIGSTOP the running component `name` (e.g. kube-apiserver) for the block, SIGCONT after:
    connections stay open, requests get no answer until it goes on."""
    component = next(c for c in cluster.processes.components if c.name == name and c.alive())
    os.kill(component.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(component.process.pid, signal.SIGCONT)


async def restart_controller_manager(cluster: LocalCluster) -> None:
    """Restart kube-controller-manager. After etcd is compacted under it, its ServiceAccount
    controller can stay behind for minutes (new namespaces get no `default` ServiceAccount, so no
    pod can be created in them); the fault suite restarts it so later tests are not hit. It is
    not the system under test."""
    await asyncio.to_thread(restart_component, cluster, "kube-controller-manager")


async def restart_kwok(cluster: LocalCluster) -> None:
    """Restart kwok, the fake kubelets. After etcd is compacted and the API server restarted,
    kwok (v0.7) can go more than a minute without playing any pod stage (its pod watch answered
    410 Gone), so a pod bound meanwhile never turns Running; the fault suite restarts it so later
    tests are not hit. It is not the system under test: real kubelets relist."""
    await asyncio.to_thread(restart_component, cluster, "kwok")


async def compact_etcd(etcd_url: str) -> int:
    """Compact etcd's whole history up to its current revision (through its JSON gateway), so a
    watch from any resourceVersion before it gets 410 Gone. Returns the revision."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{etcd_url}/v3/kv/range", json={"key": "AA=="}) as response:
            revision = int((await response.json())["header"]["revision"])
        async with session.post(
            f"{etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
        ) as response:
            if response.status != 200:
                raise RuntimeError(
                    f"etcd compaction failed: {response.status} {await response.text()}"
                )
    return revision
