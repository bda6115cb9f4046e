"""The API writes of DynamicResources' PreBind, and their undo.

As kube-scheduler's `bindClaim` (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/
dynamicresources/dynamicresources.go), for each claim of a pod, before the pod's Binding:

1. a claim to allocate first gets the finalizer `resource.kubernetes.io/delete-protection`
   (a write to the object itself): without it the resourceclaim controller never clears the
   allocation once the claim is no longer used; under leader election the same write stamps
   the claim with the Lease term of the client's write fence (annotation
   `gpu-scheduler.io/lease-term`, as Bindings carry it; removed when the fence is unarmed), so
   it is sent even when the finalizer is there already;
2. then one write of the `status` subresource sets `status.allocation` (with its
   `allocationTimestamp`) and appends the pod to `status.reservedFor`; a claim allocated already
   only gets the pod appended.

Every write is a strategic merge patch (the finalizer and the `reservedFor` entry are merged into
the lists, `reservedFor` by uid) carrying the `metadata.resourceVersion` the decision was made on,
so the API server refuses it (409) when the claim changed since: a claim allocated meanwhile by
another scheduler is never allocated twice by this one. The finalizer patch answers with the new
version, which the status patch then carries. Writing `status.allocation` and
`status.reservedFor` needs update/patch on `resourceclaims/binding` as well as on
`resourceclaims/status` (manifests/ grants both).

The stamp is what the API server's half of the write fence judges a claim write by
(manifests/fencing-policy.yaml, docs/reliability.md "A paused leader"): a status write only
carries the object's stored annotations (the status strategy resets metadata), so the term a
replica wrote with the finalizer is the one its later status write is judged in. A replica paused
between the two writes, after another took the Lease over, has its allocation refused.

`release_claim` undoes a status write after a later step failed: the pod is taken out of
`reservedFor` and, when this scheduler allocated the claim in the same attempt and nobody else
reserved it meanwhile, the allocation is cleared too, so its devices are free again. Every failure
is raised as a `ClaimWriteError` (an `APIError` about the claim, never about the pod).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, PreBindError, api_call, expect_success
from scheduler.kube.client import fence_of
from scheduler.kube.fence import LEASE_TERM_ANNOTATION
from scheduler.model.allocations import Allocation, DeviceResult
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER, ResourceClaim
from scheduler.model.device_taints import DeviceToleration
from scheduler.model.dra_fields import OpaqueConfig
from scheduler.model.fields import SelectorRequirement
from scheduler.model.node_selection import NodeSelector
from scheduler.model.quantity import BINARY_SUFFIXES


class ClaimWriteError(PreBindError):
    """A PreBind write to a ResourceClaim failed (the pod was not bound)."""


def pod_reference(name: str, uid: str) -> dict[str, str]:
    """A `reservedFor` entry for a pod (core API group)."""
    return {"resource": "pods", "name": name, "uid": uid}


async def _patch(call: Any, what: str) -> dict[str, Any]:
    try:
        async with api_call(what):
            response = await call
        body = await expect_success(response, what)
    except APIError as error:
        raise ClaimWriteError(what, error) from error
    answer = json.loads(body) if body else {}
    return answer if isinstance(answer, dict) else {}


def _version(answer: Mapping[str, Any]) -> str:
    metadata = answer.get("metadata")
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, Mapping) else ""


async def allocate_and_reserve(
    api: client.ResourceV1Api,
    claim: ResourceClaim,
    allocation: Allocation | None,
    pod: tuple[str, str],
    now: datetime,
    timeout: float,
) -> str:
    """Write `allocation` (None: the claim is allocated already) and reserve `claim` for the pod
    (name, uid), as described in the module docstring. Returns the claim's resourceVersion after
    the writes."""
    version = claim.resource_version
    term = lease_term_of(api)
    if allocation is not None and (term or DELETE_PROTECTION_FINALIZER not in claim.finalizers):
        patch: dict[str, Any] = {
            "metadata": {
                "resourceVersion": version,
                "finalizers": [DELETE_PROTECTION_FINALIZER],
                "annotations": {LEASE_TERM_ANNOTATION: term or None},
            }
        }
        call = api.patch_namespaced_resource_claim(
            claim.name, claim.namespace, cast(Any, patch), _preload_content=False,
            _request_timeout=timeout,
        )  # fmt: skip
        answer = await _patch(call, f"adding the finalizer to resourceclaim {claim.key}")
        version = _version(answer) or version
    status: dict[str, Any] = {"reservedFor": [pod_reference(*pod)]}
    if allocation is not None:
        status["allocation"] = allocation_json(allocation, now)
    patch = {"metadata": {"resourceVersion": version}, "status": status}
    call = api.patch_namespaced_resource_claim_status(
        claim.name, claim.namespace, cast(Any, patch), _preload_content=False,
        _request_timeout=timeout,
    )  # fmt: skip
    what = (
        f"adding allocation and reservation to resourceclaim {claim.key}"
        if allocation is not None
        else f"adding reservation to resourceclaim {claim.key}"
    )
    return _version(await _patch(call, what)) or version


def lease_term_of(api: client.ResourceV1Api) -> str | None:
    """The Lease term the write fence of `api`'s client is open for (None: unarmed, closed, or
    a client without a fence)."""
    fence = fence_of(getattr(api, "api_client", None))
    return fence.term if fence is not None else None


async def release_claim(
    api: client.ResourceV1Api,
    claim: ResourceClaim,
    version: str,
    pod_uid: str,
    deallocate: bool,
    timeout: float,
) -> None:
    """Undo `allocate_and_reserve` for the pod with `pod_uid`, given the claim's `version`
    after it: reservedFor without the pod, and with `deallocate` (this attempt allocated it)
    the allocation cleared when no other consumer is left."""
    others = [ref for ref in claim.reserved_for if ref.uid != pod_uid]
    status: dict[str, Any] = {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]}
    if deallocate and not others:
        status["allocation"] = None
    patch = {"metadata": {"resourceVersion": version}, "status": status}
    call = api.patch_namespaced_resource_claim_status(
        claim.name, claim.namespace, cast(Any, patch), _preload_content=False,
        _request_timeout=timeout,
    )  # fmt: skip
    await _patch(call, f"releasing resourceclaim {claim.key}")


# -- the allocation as the API spells it --------------------------------------------------------


def allocation_json(allocation: Allocation, now: datetime) -> dict[str, Any]:
    """`status.allocation` for `allocation`; `allocationTimestamp` is `allocation`'s own time,
    else `now` (kube-scheduler 1.37 sets it in PreBind)."""
    devices: dict[str, Any] = {"results": [_result_json(r) for r in allocation.results]}
    if allocation.config:
        devices["config"] = [_config_json(config) for config in allocation.config]
    body: dict[str, Any] = {
        "devices": devices,
        "allocationTimestamp": _timestamp(allocation.allocated_at or now),
    }
    if allocation.node_selector is not None:
        body["nodeSelector"] = node_selector_json(allocation.node_selector)
    return body


def _timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _result_json(result: DeviceResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "request": result.request,
        "driver": result.driver,
        "pool": result.pool,
        "device": result.device,
    }
    if result.admin_access:
        body["adminAccess"] = True
    if result.share_id:
        body["shareID"] = result.share_id
    if result.consumed_capacity:
        body["consumedCapacity"] = {
            name: _quantity(value) for name, value in result.consumed_capacity.items()
        }
    if result.tolerations:
        body["tolerations"] = [_toleration_json(t) for t in result.tolerations]
    return body


def _quantity(value: Decimal) -> str:
    """A quantity as the API server would print it: a whole multiple of 1Ki with the largest
    binary suffix that keeps it whole (`10Gi`, as kube-scheduler writes a share rounded on a
    binary step), anything else in plain decimal notation (the API server canonicalizes it)."""
    if value > 0 and value == value.to_integral_value():
        whole = int(value)
        for suffix, factor in reversed(BINARY_SUFFIXES.items()):
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return format(value.normalize(), "f")


def _toleration_json(toleration: DeviceToleration) -> dict[str, Any]:
    body: dict[str, Any] = {"operator": toleration.operator}
    if toleration.key:
        body["key"] = toleration.key
    if toleration.value:
        body["value"] = toleration.value
    if toleration.effect:
        body["effect"] = toleration.effect
    if toleration.toleration_seconds is not None:
        body["tolerationSeconds"] = toleration.toleration_seconds
    return body


def _config_json(config: OpaqueConfig) -> dict[str, Any]:
    body: dict[str, Any] = {
        "source": config.source,
        "opaque": {"driver": config.driver, "parameters": json.loads(config.parameters)},
    }
    if config.requests:
        body["requests"] = list(config.requests)
    return body


def node_selector_json(selector: NodeSelector) -> dict[str, Any]:
    """A v1 NodeSelector."""

    def requirement(req: SelectorRequirement) -> dict[str, Any]:
        body: dict[str, Any] = {"key": req.key, "operator": req.operator}
        if req.values:
            body["values"] = list(req.values)
        return body

    terms = []
    for term in selector.terms:
        entry: dict[str, Any] = {}
        if term.expressions:
            entry["matchExpressions"] = [requirement(r) for r in term.expressions]
        if term.fields:
            entry["matchFields"] = [requirement(r) for r in term.fields]
        terms.append(entry)
    return {"nodeSelectorTerms": terms}


def list_device_taint_rules(api_client: client.ApiClient) -> Callable[..., Awaitable[Any]]:
    """A list function over DeviceTaintRules (resource.k8s.io/v1, GA in Kubernetes 1.37, newer
    than the generated client), for `scheduler.kube.informer`."""
    custom = client.CustomObjectsApi(api_client)
    return functools.partial(
        custom.list_cluster_custom_object, "resource.k8s.io", "v1", "devicetaintrules"
    )


async def list_dra_objects(api_client: client.ApiClient) -> list[dict[str, Any]]:
    """Every DeviceClass, ResourceSlice, ResourceClaim and DeviceTaintRule, each with its
    `kind`; a kind the API server does not serve (404) is left out."""
    resource = client.ResourceV1Api(api_client)
    calls: list[tuple[str, Callable[..., Awaitable[Any]]]] = [
        ("DeviceClass", resource.list_device_class),
        ("ResourceSlice", resource.list_resource_slice),
        ("ResourceClaim", resource.list_resource_claim_for_all_namespaces),
        ("DeviceTaintRule", list_device_taint_rules(api_client)),
    ]
    objects: list[dict[str, Any]] = []
    for kind, call in calls:
        what = f"listing {kind} objects"
        try:
            async with api_call(what):
                response = await call(_preload_content=False)
            body = json.loads(await expect_success(response, what))
        except APIError as error:
            if error.not_found:
                continue
            raise
        objects += [{**item, "kind": kind} for item in body.get("items") or ()]
    return objects
