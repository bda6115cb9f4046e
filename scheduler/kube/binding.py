"""The API calls of a scheduling decision: the Binding, and the PodScheduled condition.

The Binding's annotations are copied onto the pod by the API server in the same call, so the
GPU indices and NVLink domain the scheduler chose land on the pod atomically with its node. Under
leader election the Binding also carries the Lease term it was decided in
(`scheduler.kube.fence.LEASE_TERM_ANNOTATION`), which the fencing policy checks on the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APINotFoundError, api_call, expect_success
from scheduler.kube.client import fence_of
from scheduler.kube.fence import LEASE_TERM_ANNOTATION

CONDITION_TYPE = "PodScheduled"
UNSCHEDULABLE_REASON = "Unschedulable"
SCHEDULING_GATED_REASON = "SchedulingGated"
SCHEDULER_ERROR_REASON = "SchedulerError"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


async def bind_pod(
    core_api: client.CoreV1Api,
    namespace: str,
    name: str,
    uid: str,
    node: str,
    annotations: Mapping[str, str],
    timeout: float,
) -> None:
    """POST pods/{name}/binding. Raises the typed `APIError` on any failure, whatever the
    client raised (a lost connection is an `APITransportError`; a pod bound meanwhile an
    `APIAlreadyAssignedError`; a deleted pod an `APINotFoundError`).

    The pod's UID is a precondition, so a pod deleted and re-created under the same name is
    never bound by a decision made for its predecessor. The client's Lease term, if any, goes
    with it (`with_lease_term`).
    """
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "annotations": with_lease_term(core_api, annotations),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    what = f"binding {namespace}/{name}"
    async with api_call(what):
        response = await core_api.create_namespaced_pod_binding(
            name, namespace, cast(Any, body), _preload_content=False, _request_timeout=timeout
        )
    await expect_success(response, what)


def with_lease_term(core_api: client.CoreV1Api, annotations: Mapping[str, str]) -> dict[str, str]:
    """`annotations` plus the Lease term the write fence of `core_api`'s client is open for, when
    it is armed and open (the API server's fencing policy refuses the request once the term is
    over)."""
    fence = fence_of(getattr(core_api, "api_client", None))
    term = fence.term if fence is not None else None
    return {**annotations, LEASE_TERM_ANNOTATION: term} if term else dict(annotations)


async def set_unschedulable(
    core_api: client.CoreV1Api,
    namespace: str,
    name: str,
    message: str,
    timeout: float = 30.0,
    uid: str = "",
    reason: str = UNSCHEDULABLE_REASON,
) -> None:
    """Set PodScheduled=False, reason Unschedulable (or `reason`, e.g. SchedulingGated), with
    the FitError message (what cluster-autoscaler and Karpenter look for). Raises the typed
    `APIError` on any failure (an HTTP error answer included). With `uid`, the patch applies
    only to that pod: for a pod re-created under the same name the API server refuses it (422:
    metadata.uid is immutable) instead of marking the new pod with its predecessor's message."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                    "lastProbeTime": None,
                }
            ]
        }
    }
    if uid:
        patch["metadata"] = {"uid": uid}
    what = f"PodScheduled condition of {namespace}/{name}"
    async with api_call(what):
        response = await core_api.patch_namespaced_pod_status(
            name, namespace, cast(Any, patch), _preload_content=False, _request_timeout=timeout
        )
    await expect_success(response, what)


async def read_binding(
    core_api: client.CoreV1Api, namespace: str, name: str, timeout: float
) -> tuple[str, str] | None:
    """The pod's (UID, spec.nodeName) as the API server has it now ("" when unbound), or None
    when no pod of that name exists. Used after a Binding whose answer was lost: whether it
    landed is read back, not guessed. Raises the typed `APIError` on any other failure."""
    what = f"reading pod {namespace}/{name}"
    async with api_call(what):
        response = await core_api.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=timeout
        )
    try:
        body = await expect_success(response, what)
    except APINotFoundError:
        return None
    pod = json.loads(body)
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return str(metadata.get("uid") or ""), str(spec.get("nodeName") or "")
