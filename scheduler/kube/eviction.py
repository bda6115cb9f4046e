"""Eviction through the Eviction API (policy/v1), with PodDisruptionBudgets honoured by the API
server: 429 means a budget forbids it now, 404 that the pod is already gone."""

from __future__ import annotations

from enum import Enum
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, expect_success


class EvictionResult(Enum):
    EVICTED = "evicted"
    GONE = "gone"
    """The pod no longer exists (or is another pod now): nothing left to evict."""
    BLOCKED = "blocked"
    """A PodDisruptionBudget forbids the eviction (HTTP 429)."""
    FAILED = "failed"


async def evict_pod(
    core: client.CoreV1Api, namespace: str, name: str, uid: str, timeout: float = 10.0
) -> tuple[EvictionResult, str]:
    """Evict one pod; the UID precondition keeps a re-created pod of the same name safe.
    Returns the result and the API server's message (empty on success)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": uid}} if uid else {},
    }
    try:
        response = await core.create_namespaced_pod_eviction(
            name, namespace, cast(Any, body), _preload_content=False, _request_timeout=timeout
        )
        await expect_success(response)
    except APIError as error:
        if error.not_found or (error.conflict and "UID" in error.message):
            return EvictionResult.GONE, error.message
        if error.too_many_requests:
            return EvictionResult.BLOCKED, error.message
        return EvictionResult.FAILED, str(error)
    except (OSError, TimeoutError) as error:
        return EvictionResult.FAILED, repr(error)
    return EvictionResult.EVICTED, ""


async def nominate(core: client.CoreV1Api, namespace: str, name: str, node: str) -> None:
    """Set status.nominatedNodeName on the preemptor (as kube-scheduler's preemption does), so
    users and other components see where room is being made for it. Raises APIError."""
    patch = {"status": {"nominatedNodeName": node}}
    response = await core.patch_namespaced_pod_status(
        name, namespace, cast(Any, patch), _preload_content=False
    )
    await expect_success(response)
