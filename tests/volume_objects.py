"""JSON builders for PersistentVolumeClaims, PersistentVolumes and StorageClasses, shared by the
unit tests (plain data) and the integration tests (created on the API server)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Json = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def make_claim(
    name: str,
    storage_class: str | None,
    *,
    namespace: str = "default",
    request: str = "1Gi",
    volume_name: str | None = None,
    bind_completed: bool = False,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    selector: Json | None = None,
    annotations: Mapping[str, str] | None = None,
    version: str = "1",
) -> Json:
    """A PVC; `bind_completed` adds pv.kubernetes.io/bind-completed (as the PV controller)."""
    notes = dict(annotations or {})
    if bind_completed:
        notes["pv.kubernetes.io/bind-completed"] = "yes"
    spec: Json = {
        "accessModes": list(access_modes),
        "resources": {"requests": {"storage": request}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume_name is not None:
        spec["volumeName"] = volume_name
    if selector is not None:
        spec["selector"] = selector
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": version,
    }
    if notes:
        metadata["annotations"] = notes
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def make_volume(
    name: str,
    storage_class: str,
    *,
    capacity: str = "1Gi",
    node: str | None = None,
    phase: str | None = "Available",
    claim: tuple[str, str] | None = None,
    claim_uid: str | None = None,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    labels: Mapping[str, str] | None = None,
    volume_mode: str | None = None,
    version: str = "1",
) -> Json:
    """A local PV pinned to `node` by nodeAffinity on kubernetes.io/hostname (None: no
    affinity); `claim` (namespace, name) pre-binds it through spec.claimRef."""
    spec: Json = {
        "capacity": {"storage": capacity},
        "accessModes": list(access_modes),
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
        "local": {"path": f"/mnt/{name}"},
    }
    if node is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
                ]
            }
        }
    else:
        spec.pop("local")
        spec["hostPath"] = {"path": f"/mnt/{name}"}
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
        if claim_uid is not None:
            spec["claimRef"]["uid"] = claim_uid
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    metadata: Json = {"name": name, "resourceVersion": version, "uid": f"uid-{name}"}
    if labels:
        metadata["labels"] = dict(labels)
    volume: Json = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata}
    volume["spec"] = spec
    if phase is not None:
        volume["status"] = {"phase": phase}
    return volume


def make_class(
    name: str,
    *,
    wait_for_first_consumer: bool = True,
    provisioner: str = NO_PROVISIONER,
    allowed_topologies: Sequence[tuple[str, Sequence[str]]] = (),
) -> Json:
    """A StorageClass; `allowed_topologies` gives one term per (label key, values)."""
    storage_class: Json = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wait_for_first_consumer else "Immediate",
    }
    if allowed_topologies:
        storage_class["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": key, "values": list(values)}]}
            for key, values in allowed_topologies
        ]
    return storage_class


def with_claims(pod: Json, *claims: str) -> Json:
    """`pod` with one volume per claim name."""
    pod["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}}
        for i, claim in enumerate(claims)
    ]
    return pod
