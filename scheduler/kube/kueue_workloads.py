"""Kueue Workloads (kueue.x-k8s.io/v1beta2): find the Workload a pod runs under, and deactivate
it so that Kueue itself takes the pods down and gives the quota back.

Why deactivation (`spec.active: false`) and not an eviction of the pods: Kueue accounts quota
per Workload. Evicting a pod of an admitted Job leaves the Workload admitted; the Job controller
recreates the pod, which then competes for the GPUs just freed. A Workload set inactive is
evicted by Kueue's Workload controller (condition `Evicted`, reason `Deactivated`), its Job is
suspended (the pods are deleted), its quota reservation is released, and it is not requeued
until someone sets `spec.active` back to true. `spec.active` is the field Kueue documents for
users and tools to stop a Workload; the write is a merge patch of the spec (no status write).

The lookup follows how Kueue links a Workload to its job: the Workload is owned (an
ownerReference) by the Job, or by the Pod itself under the pod integration, and carries the
owner's UID in the label `kueue.x-k8s.io/job-uid`; a pod group's Workload is named after the
group. Every call raises the typed `APIError` (scheduler.kube.apierrors) on failure; a lookup
that finds nothing raises `WorkloadNotFound`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import api_call, expect_success
from scheduler.kube.client import fence_of

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
DEACTIVATED_BY_ANNOTATION = "gpu-scheduler.io/deactivated-by"
"""Set on a Workload gpu-scheduler deactivated: why (bounded), for whoever reactivates it."""
DEACTIVATED_IN_TERM_ANNOTATION = "gpu-scheduler.io/deactivated-in-term"
"""The Lease term the deactivation was decided in (under leader election). Not the
`gpu-scheduler.io/lease-term` of Bindings and Evictions: an annotation stays on a Workload, and
the API server's fencing policy (manifests/fencing-policy.yaml), were it extended to Workloads,
would then refuse Kueue's own later updates of it once the term is over. The write is fenced
by the client (`scheduler.kube.client.FencedApiClient`) like every other write."""
MAX_ANNOTATION_CHARS = 512
_MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
"""The generated client accepts `_content_type`; its type stubs do not list it."""


class WorkloadNotFound(LookupError):
    """No Workload in the namespace belongs to the owner looked for."""


@dataclass(frozen=True)
class WorkloadRef:
    """One Workload: where it is, its UID (the patch's precondition) and whether it is active."""

    namespace: str
    name: str
    uid: str
    active: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def match_workload(
    items: Sequence[Mapping[str, Any]], owner_uids: Sequence[str], name: str = ""
) -> WorkloadRef | None:
    """The Workload among `items` (API objects of one namespace) named `name` when given, else
    owned by (an ownerReference to) one of `owner_uids` or labelled with one as its job UID;
    None when none is. Several matches (a job split into Workload slices): the first by name,
    so the answer is stable."""
    uids = {u for u in owner_uids if u}
    found: list[WorkloadRef] = []
    for item in items:
        metadata = item.get("metadata") or {}
        if name:
            matches = metadata.get("name") == name
        else:
            owners = {str(o.get("uid") or "") for o in metadata.get("ownerReferences") or ()}
            label = str((metadata.get("labels") or {}).get(JOB_UID_LABEL) or "")
            matches = bool(uids & owners) or label in uids
        if matches:
            found.append(
                WorkloadRef(
                    str(metadata.get("namespace") or ""),
                    str(metadata.get("name") or ""),
                    str(metadata.get("uid") or ""),
                    (item.get("spec") or {}).get("active") is not False,
                )
            )
    return min(found, key=lambda ref: ref.name) if found else None


async def find_workload(
    custom: client.CustomObjectsApi,
    namespace: str,
    owner_uids: Sequence[str],
    name: str = "",
    timeout: float = 10.0,
) -> WorkloadRef:
    """The Workload of `namespace` that `match_workload` picks: read by name when `name` is
    given, else listed by the job-UID label and, when that finds none, by ownerReference among
    all the namespace's Workloads. Raises `WorkloadNotFound` or the typed `APIError`."""
    what = f"Workloads of namespace {namespace}"
    uids = sorted({u for u in owner_uids if u})
    selectors = [f"{JOB_UID_LABEL} in ({','.join(uids)})", ""] if uids else []
    if name:
        what = f"Workload {namespace}/{name}"
        async with api_call(what):
            response = await custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                _preload_content=False, _request_timeout=timeout,
            )  # fmt: skip
        items = [json.loads(await expect_success(response, what))]
        selectors = []
        ref = match_workload(items, owner_uids, name)
        if ref is not None:
            return ref
    for selector in selectors:
        async with api_call(what):
            response = await custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, label_selector=selector,
                _preload_content=False, _request_timeout=timeout,
            )  # fmt: skip
        body = json.loads(await expect_success(response, what))
        ref = match_workload(body.get("items") or [], owner_uids)
        if ref is not None:
            return ref
    owner = name or ", ".join(sorted(set(owner_uids)))
    raise WorkloadNotFound(f"no Workload in namespace {namespace} for {owner}")


def deactivation_patch(uid: str, why: str, term: str | None = None) -> dict[str, Any]:
    """The merge patch that deactivates the Workload of `uid`: `spec.active: false`, `why` (cut
    to MAX_ANNOTATION_CHARS) in the DEACTIVATED_BY_ANNOTATION and, under leader election, the
    Lease `term` in DEACTIVATED_IN_TERM_ANNOTATION; `metadata.uid` makes the API server refuse
    it for a Workload re-created under the name (409). Applying it twice changes nothing the
    second time."""
    if len(why) > MAX_ANNOTATION_CHARS:
        why = why[: MAX_ANNOTATION_CHARS - 3] + "..."
    annotations = {DEACTIVATED_BY_ANNOTATION: why}
    if term:
        annotations[DEACTIVATED_IN_TERM_ANNOTATION] = term
    return {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"active": False}}


async def deactivate_workload(
    custom: client.CustomObjectsApi, ref: WorkloadRef, why: str, timeout: float = 10.0
) -> None:
    """Set `spec.active: false` on the Workload of `ref` (`deactivation_patch`), through the
    fenced client, recording the Lease term. Raises the typed `APIError` on any failure (403
    without RBAC, 404 gone, 409 re-created, no answer)."""
    fence = fence_of(getattr(custom, "api_client", None))
    patch = deactivation_patch(ref.uid, why, fence.term if fence is not None else None)
    what = f"deactivation of Workload {ref.key}"
    async with api_call(what):
        response = await custom.patch_namespaced_custom_object(
            GROUP, VERSION, ref.namespace, PLURAL, ref.name, cast(Any, patch),
            **_MERGE, _preload_content=False, _request_timeout=timeout,
        )  # fmt: skip
    await expect_success(response, what)
