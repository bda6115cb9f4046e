"""The API writes of VolumeBinding's PreBind: pre-bind a PersistentVolume to a claim, or mark a
claim with the node its volume must be provisioned for.

Both are patches carrying the `metadata.resourceVersion` the decision was made on, so the API
server refuses them (409) when the object changed since: a PV another scheduler or the PV
controller took meanwhile is never taken twice. Like kube-scheduler, only the PV's claimRef is
written for a static binding; the PV controller then binds the claim (its `spec.volumeName` and
`pv.kubernetes.io/bind-completed`), and provisions volumes for claims marked with
`volume.kubernetes.io/selected-node`. Every failure is raised as a `VolumeBindingError`, an
`APIError` about the volume, never about the pod (it is neither "not found" nor "already
assigned" for the pod's binding).
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, PreBindError, api_call, expect_success

SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"


class VolumeBindingError(PreBindError):
    """A PreBind write failed (the pod was not bound)."""


async def _patch(call: Any, what: str) -> None:
    try:
        async with api_call(what):
            response = await call
        await expect_success(response, what)
    except APIError as error:
        raise VolumeBindingError(what, error) from error


async def prebind_volume(
    core_api: client.CoreV1Api,
    volume: str,
    volume_version: str,
    claim: tuple[str, str, str, str],
    mark_bound_by_controller: bool,
    timeout: float,
) -> None:
    """Set PV `volume`'s spec.claimRef to `claim` (namespace, name, uid, resourceVersion), as
    kube-scheduler's GetBindVolumeToClaim, if the PV is still at `volume_version`."""
    namespace, name, uid, version = claim
    metadata: dict[str, Any] = {"resourceVersion": volume_version}
    if mark_bound_by_controller:
        metadata["annotations"] = {BOUND_BY_CONTROLLER_ANNOTATION: "yes"}
    patch = {
        "metadata": metadata,
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": namespace,
                "name": name,
                "uid": uid,
                "resourceVersion": version,
            }
        },
    }
    call = core_api.patch_persistent_volume(
        volume, cast(Any, patch), _preload_content=False, _request_timeout=timeout
    )
    await _patch(call, f"pre-binding persistentvolume {volume} to {namespace}/{name}")


async def select_node(
    core_api: client.CoreV1Api,
    namespace: str,
    name: str,
    claim_version: str,
    node: str,
    timeout: float,
) -> None:
    """Annotate claim `namespace/name` with `volume.kubernetes.io/selected-node: node`, if the
    claim is still at `claim_version`."""
    patch = {
        "metadata": {
            "resourceVersion": claim_version,
            "annotations": {SELECTED_NODE_ANNOTATION: node},
        }
    }
    call = core_api.patch_namespaced_persistent_volume_claim(
        name, namespace, cast(Any, patch), _preload_content=False, _request_timeout=timeout
    )
    await _patch(call, f"selecting node {node} for persistentvolumeclaim {namespace}/{name}")
