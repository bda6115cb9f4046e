"""What the informer stores keep of Pods and Nodes: the fields the scheduler reads.

An informer keeps every object it lists or watches and hands that same object to its handler
(`scheduler.kube.informer`, `InformerOptions.trim`), so whatever it keeps stays in memory for
the object's life. As the API server returns them, most of a pod and of a node is what the
scheduler never reads: a pod's service-account volume and the container's mount of it, image,
termination-message settings, managedFields and kubelet status (21.6 KB of Python objects for a
pod of the control-plane benchmark; 3.9 KB kept); a kwok node's managedFields, conditions,
images, addresses and node info (18.1 KB; 2.7 KB kept). The trims keep:

Pods (`trim_pod`):
- metadata: `POD_METADATA_KEPT`;
- spec: `POD_SPEC_KEPT`, what `parse_pod`, `pod_ref` and the handlers read; every container and
  init container cut to `CONTAINER_KEPT`, every volume to `VOLUME_KEPT` (its name, the sources
  the scheduler reads: claims, and the kinds `scheduler.model.unsupported` refuses). No item of
  a list is dropped, so positions, and the field paths that errors name, stay as they were;
- status: `POD_STATUS_KEPT`, and of the conditions only PodScheduled (`parse_pod` reads its
  lastTransitionTime, the pod handler whether a gated pod already shows it).

Nodes (`trim_node`): metadata without managedFields; spec whole; status cut to
`NODE_STATUS_KEPT`.

The handlers compare a stored object with the new one to skip updates that change nothing they
read (`scheduler.core.handlers`); with the trims, a change confined to a dropped field (a
container's image, a heartbeat) is such an update too.

What holds (tests/unit/scheduler/test_trimmed_stores.py): `parse_pod`, `pod_ref` and
`parse_node` return the same from trimmed and whole objects, and every value the handlers read
of a whole object they read, the same, of the trimmed one (their reads are recorded).

Each trim modifies its argument in place (the informer owns the freshly decoded object) and
returns it; parts that are not dicts or lists where the API has them are left as they are, for
the parsers to report.
"""

from __future__ import annotations

from typing import Any

from scheduler.model.unsupported import UNSUPPORTED

POD_METADATA_KEPT = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
)
POD_SPEC_KEPT = (
    "containers",
    "initContainers",
    "volumes",
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulingGates",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "overhead",
    "resources",
    "resourceClaims",
    "schedulingGroup",
)
CONTAINER_KEPT = ("name", "resources", "restartPolicy", "ports")
"""Requests, limits and claims; sidecars (restartPolicy Always); host ports."""
_VOLUME_PATH = "spec.volumes[*]."
VOLUME_KEPT = (
    "name",
    "persistentVolumeClaim",
    *(
        row.path.removeprefix(_VOLUME_PATH)
        for row in UNSUPPORTED
        if row.path.startswith(_VOLUME_PATH)
    ),
)
"""A volume's name and the sources the scheduler reads: claims (VolumeBinding) and the kinds it
refuses (`scheduler.model.unsupported`, generic ephemeral volumes among them)."""
POD_STATUS_KEPT = ("phase", "startTime", "nominatedNodeName", "resourceClaimStatuses")
POD_SCHEDULED = "PodScheduled"
NODE_STATUS_KEPT = ("allocatable",)
"""What `parse_node` and the node handler read of a Node's status: conditions, images,
addresses, capacity and nodeInfo go."""


def _kept(part: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: part[name] for name in names if name in part}


def _cut_items(items: object, names: tuple[str, ...]) -> object:
    """Each dict of the list `items` cut to `names`; anything else as it is."""
    if not isinstance(items, list):
        return items
    return [_kept(item, names) if isinstance(item, dict) else item for item in items]


def trim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A Pod's JSON as the pods informer keeps it (see the module docstring)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        obj["metadata"] = _kept(metadata, POD_METADATA_KEPT)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        kept = _kept(spec, POD_SPEC_KEPT)
        for name in ("containers", "initContainers"):
            if name in kept:
                kept[name] = _cut_items(kept[name], CONTAINER_KEPT)
        if "volumes" in kept:
            kept["volumes"] = _cut_items(kept["volumes"], VOLUME_KEPT)
        obj["spec"] = kept
    status = obj.get("status")
    if isinstance(status, dict):
        kept = _kept(status, POD_STATUS_KEPT)
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                c for c in conditions if not isinstance(c, dict) or c.get("type") == POD_SCHEDULED
            ]
        obj["status"] = kept
    return obj


def trim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node's JSON as the nodes informer keeps it (see the module docstring)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    status = obj.get("status")
    if isinstance(status, dict):
        obj["status"] = _kept(status, NODE_STATUS_KEPT)
    return obj
