"""`PodWatch`, the pod informer's handler: the scheduler's own handler first, then what the
reclaim PostFilter must know (`scheduler.postfilter.reclaim.Reclaimer.pod_seen` and `pod_gone`):
a preemptor bound, deleted or re-created, and the cooldowns and nominations of deleted pods.

A pod is parsed at most once per event: the scheduler's handler returns the `PodInfo` it parsed,
and the Reclaimer reads that one instead of parsing the object again."""

from __future__ import annotations

from typing import Protocol

from scheduler.kube.informer import KubeObject
from scheduler.model.objects import PodInfo
from scheduler.postfilter.reclaim import Reclaimer


class PodEventHandler(Protocol):
    """An informer handler for Pods that returns the pod it parsed for an event (None when it
    did not parse it: a delete, or an update it had no use for)."""

    def on_add(self, obj: KubeObject) -> PodInfo | None: ...

    def on_update(self, old: KubeObject, new: KubeObject) -> PodInfo | None: ...

    def on_delete(self, obj: KubeObject) -> None: ...


class PodWatch:
    """Pod informer handler: the scheduler's own handler, then the Reclaimer's view (a
    preemptor bound, deleted or re-created; cooldowns and nominations of deleted pods)."""

    def __init__(self, inner: PodEventHandler, reclaimer: Reclaimer) -> None:
        self.inner = inner
        self.reclaimer = reclaimer

    def on_add(self, obj: KubeObject) -> None:
        self.reclaimer.pod_seen(obj, self.inner.on_add(obj))

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self.reclaimer.pod_seen(new, self.inner.on_update(old, new))

    def on_delete(self, obj: KubeObject) -> None:
        self.inner.on_delete(obj)
        self.reclaimer.pod_gone(obj)
