"""The API writes for a pod's extended-resource claim (`scheduler.dra.extended`), as
kube-scheduler 1.37's PreBind and Unreserve make them (k8s.io/kubernetes@v1.37.2
pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go):

1. `create_extended_claim`: the claim is created from its manifest (generateName
   `<pod>-extended-resources-`, the pod as controller owner, the annotation marking it); under
   leader election it is created stamped with the Lease term of the client's write fence
   (manifests/fencing-policy.yaml judges the create and the later allocating status write by
   it); `scheduler.kube.claims.allocate_and_reserve` then writes its finalizer, allocation and
   reservation as for any claim;
2. `write_extended_status`: the pod's `status.extendedResourceClaimStatus` names the claim and
   maps each container's extended resource to its device request (the kubelet reads it);
3. `discard_extended_claim`: after a later failure, or for a claim an earlier attempt left
   behind, the claim is released (the pod out of `reservedFor`, the allocation cleared) and
   deleted (precondition: its uid); the resourceclaim controller then removes its finalizer, as
   for any deleted claim nobody uses.

Every failure is raised as a `ClaimWriteError` naming the write.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, api_call, expect_success
from scheduler.kube.claims import ClaimWriteError, lease_term_of, release_claim
from scheduler.kube.fence import LEASE_TERM_ANNOTATION
from scheduler.model.claims import ResourceClaim, parse_resource_claim


async def create_extended_claim(
    api: client.ResourceV1Api, manifest: Mapping[str, Any], timeout: float
) -> ResourceClaim:
    """Create the claim of `manifest` (stamped with the fence's term when armed); returns it as
    the API server stored it (its generated name, uid, resourceVersion)."""
    body = copy.deepcopy(dict(manifest))
    term = lease_term_of(api)
    if term:
        body["metadata"].setdefault("annotations", {})[LEASE_TERM_ANNOTATION] = term
    namespace = str(body["metadata"]["namespace"])
    what = f"creating the extended-resource claim of pod {namespace}/" + str(
        body["metadata"]["ownerReferences"][0]["name"]
    )
    try:
        async with api_call(what):
            response = await api.create_namespaced_resource_claim(
                namespace, cast(Any, body), _preload_content=False, _request_timeout=timeout
            )
        created = json.loads(await expect_success(response, what))
    except APIError as error:
        raise ClaimWriteError(what, error) from error
    return parse_resource_claim(created)


async def write_extended_status(
    core: client.CoreV1Api,
    pod: tuple[str, str],
    claim_name: str,
    mappings: Sequence[Mapping[str, str]],
    timeout: float,
) -> None:
    """Set `status.extendedResourceClaimStatus` of the pod (namespace, name)."""
    namespace, name = pod
    patch = {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": claim_name,
                "requestMappings": [dict(m) for m in mappings],
            }
        }
    }
    what = f"writing the extended resource claim status of pod {namespace}/{name}"
    try:
        async with api_call(what):
            response = await core.patch_namespaced_pod_status(
                name, namespace, cast(Any, patch), _preload_content=False, _request_timeout=timeout
            )
        await expect_success(response, what)
    except APIError as error:
        raise ClaimWriteError(what, error) from error


async def discard_extended_claim(
    api: client.ResourceV1Api, claim: ResourceClaim, pod_uid: str, timeout: float
) -> bool:
    """Release (when reserved for the pod with `pod_uid`) and delete `claim`, read again first;
    False when it is gone or is another object by now."""
    what = f"reading resourceclaim {claim.key}"
    try:
        async with api_call(what):
            response = await api.read_namespaced_resource_claim(
                claim.name, claim.namespace, _preload_content=False, _request_timeout=timeout
            )
        current = parse_resource_claim(json.loads(await expect_success(response, what)))
    except APIError as error:
        if error.not_found:
            return False
        raise ClaimWriteError(what, error) from error
    if current.uid != claim.uid:
        return False
    if current.reserved_for_pod(pod_uid):
        await release_claim(
            api, current, current.resource_version, pod_uid, deallocate=True, timeout=timeout
        )
    what = f"deleting resourceclaim {claim.key}"
    options = {"preconditions": {"uid": claim.uid}}
    try:
        async with api_call(what):
            response = await api.delete_namespaced_resource_claim(
                claim.name,
                claim.namespace,
                body=cast(Any, options),
                _preload_content=False,
                _request_timeout=timeout,
            )
        await expect_success(response, what)
    except APIError as error:
        if error.not_found:
            return False
        raise ClaimWriteError(what, error) from error
    return True
