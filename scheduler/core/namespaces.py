"""Namespace labels for pod affinity's namespaceSelector, kept by an informer handler.

`NamespaceLabels` receives the Namespace informer's events and keeps
`ClusterCache.namespace_labels` (namespace name -> labels) current. A namespace whose labels
change (or that appears or goes away) may change which pods a namespaceSelector selects, so the
unschedulable pods get another try, as after any cluster change that can make room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from scheduler.state.cache import ClusterCache

NAMESPACE_EVENT = "NamespaceChange"


class _Requeue(Protocol):
    def move_all_to_active_or_backoff(self, event: str) -> int: ...


def _name_and_labels(obj: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return "", {}
    labels = metadata.get("labels")
    found = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    return str(metadata.get("name") or ""), found


class NamespaceLabels:
    """Informer handler for Namespaces (see the module docstring)."""

    def __init__(self, cache: ClusterCache, queue: _Requeue | None = None) -> None:
        self.cache = cache
        self.queue = queue

    def _changed(self) -> None:
        if self.queue is not None:
            self.queue.move_all_to_active_or_backoff(NAMESPACE_EVENT)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        name, labels = _name_and_labels(obj)
        if not name or self.cache.namespace_labels.get(name) == labels:
            return
        self.cache.namespace_labels[name] = labels
        self._changed()

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        name, _ = _name_and_labels(obj)
        if self.cache.namespace_labels.pop(name, None) is not None:
            self._changed()
