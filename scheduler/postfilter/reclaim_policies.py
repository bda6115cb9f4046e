"""PriorityClass reclaim policies as the reclaim PostFilter reads them (`PolicyStore`): parsed
once per resourceVersion with `reclaim.policy.parse_policy`; invalid ones reported once per
version (log line and a Warning event on the PriorityClass naming the annotation and value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from reclaim.policy import PolicyResult, PolicyStatus, parse_policy, quote
from scheduler.kube.events import WARNING, EventRecorder, ObjectRef

log = structlog.get_logger("gpu-scheduler.reclaim")


class PolicyStore:
    """PriorityClass reclaim policies, parsed once per version; also the informer handler that
    reports invalid policies (log line and Warning event naming the annotation and value)."""

    def __init__(self, recorder: EventRecorder | None = None) -> None:
        self.recorder = recorder
        self._raw: dict[str, Mapping[str, Any]] = {}
        self._parsed: dict[str, tuple[str, PolicyResult]] = {}

    def policy(self, priority_class: str) -> PolicyResult:
        obj = self._raw.get(priority_class)
        if obj is None:
            return PolicyResult(priority_class, PolicyStatus.NONE)
        metadata = obj.get("metadata") or {}
        version = str(metadata.get("resourceVersion") or "")
        cached = self._parsed.get(priority_class)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            annotations = metadata.get("annotations") or {}
            result = parse_policy(priority_class, {str(k): str(v) for k, v in annotations.items()})
        except Exception as error:  # one unreadable class never blocks reclaim for the others
            log.exception("reclaim_policy_unreadable", priority_class=priority_class)
            result = PolicyResult(
                priority_class,
                PolicyStatus.INVALID,
                errors=(
                    f"PriorityClass {priority_class}: unreadable annotations: {quote(str(error))}",
                ),
            )
        self._parsed[priority_class] = (version, result)
        if result.status is PolicyStatus.INVALID:
            for error_text in result.errors:
                log.warning(
                    "reclaim_policy_invalid", priority_class=priority_class, error=error_text
                )
            if self.recorder is not None:
                ref = ObjectRef(
                    "PriorityClass",
                    priority_class,
                    uid=str(metadata.get("uid") or ""),
                    api_version="scheduling.k8s.io/v1",
                )
                note = "; ".join(result.errors) + " (its pods are not reclaimed)"
                self.recorder.emit(ref, WARNING, "InvalidReclaimPolicy", "Reclaim", note)
        return result

    # informer handler
    def on_add(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._raw[name] = obj
        self.policy(name)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._raw.pop(name, None)
        self._parsed.pop(name, None)
