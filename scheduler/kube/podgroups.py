"""PodGroup (scheduling.k8s.io/v1beta1) reads and status writes, through the generic custom
objects API (kubernetes_asyncio has no typed client for v1beta1 PodGroups)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import api_call, expect_success

GROUP = "scheduling.k8s.io"
VERSION = "v1beta1"
PLURAL = "podgroups"
CONDITION_TYPE = "PodGroupInitiallyScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
SCHEDULER_ERROR = "SchedulerError"
"""Condition type and reasons of scheduling.k8s.io/v1beta1 PodGroupStatus."""
_STRATEGIC: dict[str, Any] = {"_content_type": "application/strategic-merge-patch+json"}
"""Patch as a strategic merge (conditions merge by type); the generated client accepts
`_content_type`, its type stubs do not list it."""


def list_pod_groups(api_client: client.ApiClient) -> Callable[..., Awaitable[Any]]:
    """A list function over PodGroups of every namespace, for `scheduler.kube.informer`."""
    custom = client.CustomObjectsApi(api_client)
    return functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)


async def set_pod_group_condition(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    status: str,
    reason: str,
    message: str,
    timeout: float = 30.0,
    uid: str = "",
    condition_type: str = CONDITION_TYPE,
) -> None:
    """Set one condition of the PodGroup, PodGroupInitiallyScheduled unless `condition_type`
    says otherwise (a strategic merge patch of the status subresource, keyed by condition type:
    other conditions stay). Raises the typed `APIError` on any failure; with `uid`, a PodGroup
    re-created under the name is refused."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    patch: dict[str, Any] = {"status": {"conditions": [condition]}}
    if uid:
        patch["metadata"] = {"uid": uid}
    what = f"{condition_type} condition of PodGroup {namespace}/{name}"
    async with api_call(what):
        response = await custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            cast(Any, patch),
            **_STRATEGIC,
            _preload_content=False,
            _request_timeout=timeout,
        )
    await expect_success(response, what)
