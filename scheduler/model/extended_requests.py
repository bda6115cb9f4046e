"""The extended resources each container of a pod requests, as a DeviceClass may serve them
through Dynamic Resource Allocation (`DeviceClass.spec.extendedResourceName`, or the implicit
name `deviceclass.resource.kubernetes.io/<class>`).

    container_extended_requests(spec) -> tuple[ContainerRequests, ...]

kube-scheduler names the device requests of the claim it makes for such a pod after the
container's position and the resource's position among the container's request names
(`createRequestsAndMappings`, k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/
dynamicresources/extendeddynamicresources.go), so a container's record keeps both. Values are
read leniently: `scheduler.model.resources.pod_requests` reports bad ones for the pod already.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.model.fields import list_of, text_of
from scheduler.model.quantity import QuantityError, parse_quantity

DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass serves the extended resource of this prefix and its own name."""


def is_dra_extended_resource_name(name: str) -> bool:
    """`IsDRAExtendedResourceName` (k8s.io/kubernetes@v1.37.2 pkg/scheduler/util/utils.go): an
    extended resource name (a domain outside kubernetes.io, not `requests.*`) or the implicit
    name of a DeviceClass."""
    if name.startswith(DEVICE_CLASS_RESOURCE_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    return not (name.startswith("kubernetes.io/") or ".kubernetes.io/" in name)


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container (init containers first, then the containers) that requests at least one
    DRA-servable extended resource."""

    index: int
    """Position in spec.initContainers + spec.containers."""
    name: str
    short_lived: bool
    """An init container that is not a sidecar (it has exited before the containers start)."""
    request_names: tuple[str, ...]
    """Every resource name the container requests, sorted."""
    amounts: Mapping[str, int]
    """Extended resource -> the whole number requested (only amounts above zero)."""


def container_extended_requests(spec: Mapping[str, Any]) -> tuple[ContainerRequests, ...]:
    """The containers of a pod spec that request extended resources; () for most pods."""
    init = list_of(spec.get("initContainers"))
    found: list[ContainerRequests] = []
    for index, container in enumerate([*init, *list_of(spec.get("containers"))]):
        if not isinstance(container, Mapping):
            continue
        requests = _requests(container)
        amounts = {
            name: amount
            for name, value in requests.items()
            if is_dra_extended_resource_name(name) and (amount := _whole(value)) > 0
        }
        if amounts:
            sidecar = container.get("restartPolicy") == "Always"
            found.append(
                ContainerRequests(
                    index=index,
                    name=text_of(container.get("name") or ""),
                    short_lived=index < len(init) and not sidecar,
                    request_names=tuple(sorted(requests)),
                    amounts=amounts,
                )
            )
    return tuple(found)


def _requests(container: Mapping[str, Any]) -> dict[str, object]:
    """resources.requests, with limits standing in for requests left out (the API's default)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests")
    limits = resources.get("limits")
    merged: dict[str, object] = {}
    if isinstance(limits, Mapping):
        merged.update((text_of(k), v) for k, v in limits.items())
    if isinstance(requests, Mapping):
        merged.update((text_of(k), v) for k, v in requests.items())
    return merged


def _whole(value: object) -> int:
    """The quantity as a whole number; 0 when it is not one."""
    try:
        amount = parse_quantity(text_of(value))
    except QuantityError:
        return 0
    return int(amount) if amount == int(amount) else 0
