"""`PodWatch`, the pod informer's handler: the scheduler's own handler first, then what the
reclaim PostFilter must know (`scheduler.postfilter.reclaim.Reclaimer.pod_seen` and `pod_gone`):
a preemptor bound, deleted or re-created, and the cooldowns and nominations of deleted pods."""

from __future__ import annotations

from scheduler.kube.informer import InformerHandler, KubeObject
from scheduler.postfilter.reclaim import Reclaimer


class PodWatch:
    """Pod informer handler: the scheduler's own handler, then the Reclaimer's view (a
    preemptor bound, deleted or re-created; cooldowns and nominations of deleted pods)."""

    def __init__(self, inner: InformerHandler, reclaimer: Reclaimer) -> None:
        self.inner = inner
        self.reclaimer = reclaimer

    def on_add(self, obj: KubeObject) -> None:
        self.inner.on_add(obj)
        self.reclaimer.pod_seen(obj)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self.inner.on_update(old, new)
        self.reclaimer.pod_seen(new)

    def on_delete(self, obj: KubeObject) -> None:
        self.inner.on_delete(obj)
        self.reclaimer.pod_gone(obj)
