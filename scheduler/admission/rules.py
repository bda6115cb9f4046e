"""Admission decisions on plain dicts: no kopf, no asyncio, no Kubernetes client.

- `priority_class_denial(obj)`: why a PriorityClass must be refused (its reclaim annotations are
  partial or malformed, as `reclaim.policy.parse_policy` reads them; every such annotation
  named, in under 1 KiB), or None to admit it. The
  same parser decides, after the fact, which classes reclaim ignores: one parser, two callers.
- `scheduler_name_to_set(pod, name)`: the `spec.schedulerName` to give a pod that asks for NVIDIA
  GPUs or MIG instances (any container, init containers included) and names no scheduler or
  `default-scheduler`; None leaves the pod untouched. Which namespaces opt in is the webhook
  configuration's `namespaceSelector` (`ENABLED_LABEL`), not decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reclaim.policy import AnnotationProblem, PolicyStatus, annotation_problems, parse_policy
from scheduler.model.resources import GPU_RESOURCE
from topology.mig import MIG_RESOURCE_PREFIX
from topology.text import clip, quote

ENABLED_LABEL = "gpu-scheduler.io/enabled"
"""Namespaces labelled `gpu-scheduler.io/enabled=true` have their GPU pods given our scheduler."""
DEFAULT_SCHEDULER = "default-scheduler"
"""The name the API server fills into pods that name no scheduler."""
MAX_NAME_CHARS = 253
"""Longer object names are cut in messages (the API server refuses them anyway)."""
MAX_DENIAL_BYTES = 1000
"""A PriorityClass refusal is at most this many bytes of UTF-8 (under 1 KiB), whatever the
object: the API server shows it to the user and our log line carries it."""
NAME_ECHO = 100
"""Characters of the class's name in a refusal."""
VALUE_ECHO = 32
"""Characters of an annotation's value in a refusal (MAX_VALUE_CHARS: any value short enough to
be valid shows whole)."""
SHORT_VALUE_ECHO = 8
"""Characters of each value when VALUE_ECHO's would pass MAX_DENIAL_BYTES (values of wide
characters or escapes): every annotation stays named."""
ALL_FOUR_REQUIRED = "all four reclaim-idle-resource annotations are required"


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def priority_class_denial(obj: Mapping[str, Any]) -> str | None:
    """The reason to refuse PriorityClass `obj`, or None to admit it. Never raises.

    Refused: a class with some of the four `reclaim-idle-resource.scheduling.x-k8s.io/`
    annotations but not all, or with a malformed or out-of-range value. The reason names the
    class once, then every missing or bad annotation (missing first), each bad one with its value
    (`topology.text.quote`d, cut to VALUE_ECHO characters, or SHORT_VALUE_ECHO if the message
    would be too long) and its allowed values, e.g.
    `PriorityClass batch-low: annotation reclaim-idle-resource.scheduling.x-k8s.io/
    toleration-seconds='-5': must be an integer from 0 to 31536000 (365 days)`. It is at most
    MAX_DENIAL_BYTES bytes whatever the input. A class with no reclaim annotation, or all four
    valid, is admitted. Annotation values that are not strings (the API server never sends them)
    are read as their `str()`.
    """
    metadata = _mapping(obj.get("metadata"))
    name = str(metadata.get("name") or metadata.get("generateName") or "")[:MAX_NAME_CHARS]
    annotations = {str(k): str(v) for k, v in _mapping(metadata.get("annotations")).items()}
    if parse_policy(name, annotations).status is not PolicyStatus.INVALID:
        return None
    problems = annotation_problems(annotations)
    head = f"PriorityClass {clip(name, NAME_ECHO)}: "
    for echo in (VALUE_ECHO, SHORT_VALUE_ECHO):  # shorter values before losing an annotation
        reason = head + _problems_text(problems, echo)
        if len(reason.encode("utf-8", errors="replace")) <= MAX_DENIAL_BYTES:
            return reason
    return _bounded(reason, MAX_DENIAL_BYTES)


def _problems_text(problems: list[AnnotationProblem], echo: int) -> str:
    """`annotation K is missing; ... (all four ... required); annotation K='v': rule; ...`."""
    missing = [f"annotation {p.key} is missing" for p in problems if p.value is None]
    if missing:
        missing[-1] += f" ({ALL_FOUR_REQUIRED})"
    bad = [
        f"annotation {p.key}={quote(p.value, echo)}: {p.rule}"
        for p in problems
        if p.value is not None
    ]
    return "; ".join(missing + bad)


def _bounded(text: str, limit: int) -> str:
    """`text` if at most `limit` bytes of UTF-8, else its start (whole characters) and "..."."""
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", errors="ignore") + "..."


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
