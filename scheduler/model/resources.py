"""Resource requests of a pod and the resource vector of the cache, parsed from resource lists.

Resource vectors are int64 arrays in the order of `RESOURCES`: CPU in millicores, the others in
base units (bytes, pods, GPUs). `pod_requests` applies Kubernetes' rules: extended resources
default their requests to their limits and must not differ from them, init containers count by
their maximum, pod-level requests override cpu and memory, and overhead is added.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from scheduler.model.fields import FieldError, list_of, object_at
from scheduler.model.quantity import QuantityError, base_units, cpu_millis
from topology.mig import is_mig_resource, parse_mig_profile
from topology.text import clip, quote

if TYPE_CHECKING:
    pass


GPU_RESOURCE = "nvidia.com/gpu"


RESOURCES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage", "pods", GPU_RESOURCE)


CPU, MEMORY, EPHEMERAL, PODS, GPU = range(len(RESOURCES))


ResourceVector = npt.NDArray[np.int64]


def resource_list(raw: object, where: str, errors: list[FieldError]) -> dict[str, Any]:
    """A resource list (`requests`, `limits`, `allocatable`, `overhead`): `object_at`, keeping only
    string keys (others are reported)."""
    found: dict[str, Any] = {}
    for name, value in object_at(raw, where, errors).items():
        if isinstance(name, str):
            found[name] = value
        else:
            errors.append(FieldError(where, f"resource name {quote(name)} is not a string"))
    return found


POD_LEVEL_RESOURCES = ("cpu", "memory")


"""Resources a pod-level `spec.resources.requests` overrides (kube's supported pod-level ones)."""


MAX_AMOUNT = 2**62


"""Largest amount of a resource accepted (the arrays are int64 and sums must not overflow)."""


@functools.lru_cache(maxsize=4096)
def quantity_of(cpu: bool, value: str) -> int:
    """A quantity string in millicores (`cpu`) or base units, memoised: pods repeat the same few
    spellings ("100m", "128Mi", "1"), and the Decimal parse is most of a pod's parsing time.
    Raises `QuantityError` (not cached) like `cpu_millis` / `base_units`."""
    return cpu_millis(value) if cpu else base_units(value)


def resource_amount(name: str, value: object, where: str, errors: list[FieldError]) -> int:
    field = f"{where}.{clip(name)}"
    try:
        if type(value) is str:
            amount = quantity_of(name == "cpu", value)
        else:
            amount = cpu_millis(value) if name == "cpu" else base_units(value)  # type: ignore[arg-type]
    except QuantityError as error:
        errors.append(FieldError(field, str(error)))
        return 0
    if amount < 0:
        errors.append(FieldError(field, f"must not be negative, got {quote(value)}"))
        return 0
    if amount > MAX_AMOUNT:
        errors.append(FieldError(field, f"is too large: {quote(value)}"))
        return 0
    if is_mig_resource(name):
        try:
            parse_mig_profile(name)
        except ValueError as error:
            errors.append(FieldError(field, str(error)))
            return 0
    return amount


def _overcommit_allowed(name: str) -> bool:
    """Whether requests of `name` may be below its limit: Kubernetes allows it for its native
    resources (no domain, or kubernetes.io/) except huge pages; extended resources such as
    nvidia.com/gpu must have requests equal to limits."""
    if name.startswith("hugepages-"):
        return False
    return "/" not in name or name.startswith("kubernetes.io/")


def _container_requests(
    container: Mapping[str, Any], where: str, errors: list[FieldError]
) -> dict[str, int]:
    """Requests of one container; extended resources default to their limits, as the API does."""
    if not isinstance(container, Mapping):
        errors.append(FieldError(where, f"must be an object, got {type(container).__name__}"))
        return {}
    resources = object_at(container.get("resources"), f"{where}.resources", errors)
    requests = resource_list(resources.get("requests"), f"{where}.resources.requests", errors)
    limits = resource_list(resources.get("limits"), f"{where}.resources.limits", errors)
    amounts: dict[str, int] = {}
    for name, value in limits.items():
        if name not in ("cpu", "memory", "ephemeral-storage") and name not in requests:
            amounts[name] = resource_amount(name, value, f"{where}.resources.limits", errors)
    for name, value in requests.items():
        amounts[name] = resource_amount(name, value, f"{where}.resources.requests", errors)
        if name in limits and not _overcommit_allowed(name):
            before = len(errors)
            limit = resource_amount(name, limits[name], f"{where}.resources.limits", errors)
            if len(errors) == before and limit != amounts[name]:
                errors.append(
                    FieldError(
                        f"{where}.resources.requests.{clip(name)}",
                        f"must equal its limit for an extended resource (request "
                        f"{quote(value)}, limit {quote(limits[name])})",
                    )
                )
    return amounts


def pod_requests(spec: Mapping[str, Any], errors: list[FieldError]) -> dict[str, int]:
    """kube-scheduler's effective request (resourcehelper.PodRequests): the sum over containers
    and sidecar init containers, at least each init container's request plus the sidecars
    started before it, replaced by the pod-level request (`spec.resources.requests`) for cpu and
    memory when set, plus pod overhead."""
    total: dict[str, int] = {}
    for index, container in enumerate(list_of(spec.get("containers"))):
        for name, amount in _container_requests(
            container, f"spec.containers[{index}]", errors
        ).items():
            total[name] = total.get(name, 0) + amount
    # Init containers run one after another, each beside the sidecars started before it;
    # sidecars (restartPolicy Always) keep running, so they also add to the containers' sum.
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(list_of(spec.get("initContainers"))):
        amounts = _container_requests(container, f"spec.initContainers[{index}]", errors)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            for name, amount in amounts.items():
                sidecars[name] = sidecars.get(name, 0) + amount
                total[name] = total.get(name, 0) + amount
            running = dict(sidecars)
        else:
            running = {n: amounts.get(n, 0) + sidecars.get(n, 0) for n in {*amounts, *sidecars}}
        for name, amount in running.items():
            init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    pod_level = object_at(
        object_at(spec.get("resources"), "spec.resources", errors).get("requests"),
        "spec.resources.requests",
        errors,
    )
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            total[name] = resource_amount(name, pod_level[name], "spec.resources.requests", errors)
    for name, value in resource_list(spec.get("overhead"), "spec.overhead", errors).items():
        total[name] = total.get(name, 0) + resource_amount(name, value, "spec.overhead", errors)
    for name, amount in total.items():
        if amount > MAX_AMOUNT:
            errors.append(
                FieldError(f"spec.containers[*].resources.{clip(name)}", "total is too large")
            )
            total[name] = 0
    return total


def vector_resource(name: str) -> bool:
    """Held in the resource vector or a MIG column (else an extended, scalar resource)."""
    return name in RESOURCES or is_mig_resource(name)
