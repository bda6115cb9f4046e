"""Eviction through the Eviction API (policy/v1), with PodDisruptionBudgets honoured by the API
server: 429 means a budget forbids it now, 404 that the pod is already gone."""

from __future__ import annotations

from enum import Enum
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import (
    APIError,
    APINotFoundError,
    APIPreconditionFailedError,
    APITooManyRequestsError,
    api_call,
    expect_success,
)
from scheduler.kube.binding import with_lease_term


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
    Returns the result and the API server's message (empty on success). Under leader election
    the request carries the Lease term (`with_lease_term`): a term that is over is refused by
    the API server's fencing policy and reported as FAILED."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": with_lease_term(core, {}),
        },
        "deleteOptions": {"preconditions": {"uid": uid}} if uid else {},
    }
    what = f"eviction of {namespace}/{name}"
    try:
        async with api_call(what):
            response = await core.create_namespaced_pod_eviction(
                name, namespace, cast(Any, body), _preload_content=False, _request_timeout=timeout
            )
        await expect_success(response, what)
    except (APINotFoundError, APIPreconditionFailedError) as error:
        return EvictionResult.GONE, error.message
    except APITooManyRequestsError as error:
        return EvictionResult.BLOCKED, error.message
    except APIError as error:
        return EvictionResult.FAILED, str(error)
    return EvictionResult.EVICTED, ""


async def nominate(core: client.CoreV1Api, namespace: str, name: str, node: str) -> None:
    """Set status.nominatedNodeName on the preemptor (as kube-scheduler's preemption does), so
    users and other components see where room is being made for it. Raises the typed APIError
    on any failure, a lost connection included."""
    patch = {"status": {"nominatedNodeName": node}}
    what = f"nomination of {namespace}/{name}"
    async with api_call(what):
        response = await core.patch_namespaced_pod_status(
            name, namespace, cast(Any, patch), _preload_content=False
        )
    await expect_success(response, what)
