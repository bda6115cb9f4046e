"""The claim a scheduler makes for a pod's extended resources that a DeviceClass serves
(`DeviceClass.spec.extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>`), on a
node that does not offer them as allocatable: kube-scheduler 1.37's "extended resources backed by
DRA" (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go).

    extended_claim(namespace, pod, uid, containers, classes) -> ExtendedClaim | None

The claim has one ExactCount request per container and resource, named
`container-<i>-request-<j>` (i: the container's position in initContainers + containers; j: the
resource's position among the container's sorted request names), asking for the container's
amount from the resource's class. An init container that is not a sidecar runs before the others
and may use the devices of the sidecars and containers after it: it asks only for what those
lack, and all such init containers share the largest of their requests. The requests are sorted
by name; `mappings` tell the kubelet which request serves which container
(`pod.status.extendedResourceClaimStatus.requestMappings`).

Until it is created the claim exists in memory only, named `<pod>-extended-resources-` (the
`generateName` it is created with; a name ending in "-" is no valid object name, so it never
collides with a stored claim).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.claims import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    ResourceClaim,
    parse_resource_claim,
)
from scheduler.model.extended_requests import ContainerRequests

GENERATE_NAME_SUFFIX = "-extended-resources-"

Json = dict[str, Any]


@dataclass(frozen=True)
class ExtendedClaim:
    """A pod's extended-resource claim for one node variant (which resources it must allocate)."""

    claim: ResourceClaim
    """The claim as the allocator sees it (in memory: no uid, no resourceVersion)."""
    manifest: Mapping[str, Any] = field(compare=False)
    """The object PreBind creates (metadata.generateName, the pod as controller owner, the
    annotation marking it)."""
    mappings: tuple[Mapping[str, str], ...] = ()
    """`requestMappings` entries: containerName, resourceName, requestName."""


def extended_claim(
    namespace: str,
    pod: str,
    uid: str,
    containers: Sequence[ContainerRequests],
    classes: Mapping[str, str],
) -> ExtendedClaim | None:
    """The claim for the extended resources in `classes` (resource -> DeviceClass name) that
    `containers` request; None when they request none of them."""
    requests, mappings = requests_and_mappings(containers, classes)
    if not requests:
        return None
    manifest: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": pod + GENERATE_NAME_SUFFIX,
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}
            ],
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": requests}},
    }
    in_memory = {
        **manifest,
        "metadata": {**manifest["metadata"], "name": pod + GENERATE_NAME_SUFFIX},
    }
    return ExtendedClaim(parse_resource_claim(in_memory), manifest, tuple(mappings))


def requests_and_mappings(
    containers: Sequence[ContainerRequests], classes: Mapping[str, str]
) -> tuple[list[Json], list[dict[str, str]]]:
    """The device requests (sorted by name) and the request mappings for `classes` (see the
    module docstring)."""
    requests: list[Json] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(classes):
        class_name = classes[resource]
        long_lived: dict[int, Json] = {}  # container index -> its own request
        long_mappings: list[dict[str, str]] = []
        for container in containers:
            if container.short_lived:
                continue
            request, found = _container_request(container, resource, class_name, [])
            if request is not None:
                long_lived[container.index] = request
            long_mappings.extend(found)
        largest: Json | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for container in containers:
            if not container.short_lived:
                continue
            later = [r for i, r in sorted(long_lived.items()) if i >= container.index]
            request, found = _container_request(container, resource, class_name, later)
            if request is not None:
                short_names.add(request["name"])
                if largest is None or _count(largest) < _count(request):
                    largest = request
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            for mapping in short_mappings:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = largest["name"]
        if largest is not None:
            requests.append(largest)
        requests.extend(r for _, r in sorted(long_lived.items()))
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


def _container_request(
    container: ContainerRequests, resource: str, class_name: str, reusable: Sequence[Json]
) -> tuple[Json | None, list[dict[str, str]]]:
    """The container's own request for `resource` (None when the `reusable` requests of later
    containers cover it, or it asks for none) and its mappings."""
    wanted = container.amounts.get(resource, 0)
    if wanted <= 0:
        return None, []
    mappings: list[dict[str, str]] = []
    covered = 0
    for later in reusable:
        covered += _count(later)
        mappings.append(_mapping(container.name, resource, str(later["name"])))
        if covered >= wanted:
            return None, mappings
    position = container.request_names.index(resource) if resource in container.request_names else 0
    name = f"container-{container.index}-request-{position}"
    request: Json = {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": wanted - covered,
        },
    }
    mappings.append(_mapping(container.name, resource, name))
    return request, mappings


def _count(request: Mapping[str, Any]) -> int:
    return int(request["exactly"]["count"])


def _mapping(container: str, resource: str, request: str) -> dict[str, str]:
    return {"containerName": container, "resourceName": resource, "requestName": request}
