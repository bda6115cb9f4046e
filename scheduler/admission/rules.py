"""Admission decisions on plain dicts: no kopf, no asyncio, no Kubernetes client.

- `priority_class_denial(obj)`: why a PriorityClass must be refused (its reclaim annotations are
  partial or malformed, as `reclaim.policy.parse_policy` reads them), or None to admit it. The
  same parser decides, after the fact, which classes reclaim ignores: one parser, two callers.
- `scheduler_name_to_set(pod, name)`: the `spec.schedulerName` to give a pod that asks for NVIDIA
  GPUs or MIG instances (any container, init containers included) and names no scheduler or
  `default-scheduler`; None leaves the pod untouched. Which namespaces opt in is the webhook
  configuration's `namespaceSelector` (`ENABLED_LABEL`), not decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reclaim.policy import PolicyStatus, parse_policy
from scheduler.model.resources import GPU_RESOURCE
from topology.mig import MIG_RESOURCE_PREFIX

ENABLED_LABEL = "gpu-scheduler.io/enabled"
"""Namespaces labelled `gpu-scheduler.io/enabled=true` have their GPU pods given our scheduler."""
DEFAULT_SCHEDULER = "default-scheduler"
"""The name the API server fills into pods that name no scheduler."""
MAX_NAME_CHARS = 253
"""Longer object names are cut in messages (the API server refuses them anyway)."""


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def priority_class_denial(obj: Mapping[str, Any]) -> str | None:
    """The reason to refuse PriorityClass `obj`, or None to admit it. Never raises.

    Refused: a class with some of the four `reclaim-idle-resource.scheduling.x-k8s.io/`
    annotations but not all, or with a malformed or out-of-range value. The reason lists one
    error per bad annotation, each naming the annotation and its allowed values, e.g.
    `PriorityClass batch-low: annotation reclaim-idle-resource.scheduling.x-k8s.io/
    toleration-seconds="-5": must be an integer from 0 to 31536000 (365 days)`. A class with no
    reclaim annotation, or all four valid, is admitted. Annotation values that are not strings
    (the API server never sends them) are read as their `str()`.
    """
    metadata = _mapping(obj.get("metadata"))
    name = str(metadata.get("name") or metadata.get("generateName") or "")[:MAX_NAME_CHARS]
    annotations = {str(k): str(v) for k, v in _mapping(metadata.get("annotations")).items()}
    result = parse_policy(name, annotations)
    if result.status is not PolicyStatus.INVALID:
        return None
    return "; ".join(result.errors)


def _asks_for_gpus(resources: Mapping[str, Any]) -> bool:
    """True if a container's requests or limits name nvidia.com/gpu or a nvidia.com/mig-*
    resource with an amount other than zero."""
    for part in ("requests", "limits"):
        for name, amount in _mapping(resources.get(part)).items():
            key = str(name)
            if (key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX)) and str(amount) != "0":
                return True
    return False


def requests_gpus(spec: Mapping[str, Any]) -> bool:
    """True if any container or init container of pod `spec` asks for NVIDIA GPUs or MIG
    instances (requests or limits; a zero amount does not count)."""
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for container in containers:
            if _asks_for_gpus(_mapping(_mapping(container).get("resources"))):
                return True
    return False


def scheduler_name_to_set(pod: Mapping[str, Any], scheduler_name: str) -> str | None:
    """`scheduler_name` when `pod` asks for GPUs (`requests_gpus`) and its `spec.schedulerName`
    is absent, empty or `default-scheduler`; None otherwise (the pod is left as it is: another
    scheduler named on purpose is respected). Never raises."""
    spec = _mapping(pod.get("spec"))
    current = spec.get("schedulerName")
    if current not in (None, "", DEFAULT_SCHEDULER):
        return None
    return scheduler_name if requests_gpus(spec) else None
