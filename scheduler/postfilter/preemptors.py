"""What the PostFilter remembers of the preemptors (`Preemptors`): the node room is being made
on for each (its nomination, `status.nominatedNodeName`) and the informer's latest view of those
being worked on, from which a plan is found stale.

Memory is bounded: nominations lapse with the reservation (`reclaim.reservationSeconds`), go
when the pod is bound or deleted (`scheduler.postfilter.pod_watch.PodWatch`), and at most
`MAX_TRACKED_PODS` are kept, the oldest going first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scheduler.model.objects import PodInfo, parse_pod
from scheduler.state.context import SchedulerContext

MAX_TRACKED_PODS = 10_000
"""At most this many cooldowns and nominations are kept; the oldest go first."""


@dataclass(frozen=True)
class Nomination:
    """Where room is being made for a preemptor (its `status.nominatedNodeName`)."""

    node: str
    uid: str
    at: float
    """Monotonic time of the nomination; it lapses with the reservation."""


class Preemptors:
    """The nominations (pod key -> `Nomination`, oldest first) and the latest informer views
    (pod key -> `PodInfo`, None once deleted) of the preemptors being worked on or nominated."""

    def __init__(self, context: SchedulerContext) -> None:
        self.settings = context.settings.reclaim
        self.cache = context.cache
        self.clock = context.clock
        self.nominations: OrderedDict[str, Nomination] = OrderedDict()
        """Pod key -> the node room was made on, oldest first."""
        self.views: dict[str, PodInfo | None] = {}
        """Latest informer view of the preemptors being worked on or nominated (None: deleted);
        kept current by `seen` and `gone`."""

    # -- nominations ---------------------------------------------------------------------------

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Remember `node` for `pod` (this UID) as of now (the newest nomination)."""
        self.nominations.pop(pod.key, None)
        self.nominations[pod.key] = Nomination(node, pod.uid, self.clock())

    def nominated_node(self, pod: PodInfo) -> str | None:
        """The node room was made on for `pod` (same UID), while its reservation lasts."""
        nomination = self.nominations.get(pod.key)
        if nomination is None or nomination.uid != pod.uid:
            return None
        if self.clock() - nomination.at > self.settings.reservation_seconds:
            return None
        return nomination.node

    def drop(self, key: str) -> None:
        """Forget the nomination of pod `key` (if any)."""
        self.nominations.pop(key, None)

    def prune(self) -> None:
        """Drop lapsed nominations; leave room for one more under MAX_TRACKED_PODS (the oldest
        go first)."""
        now = self.clock()
        ttl = self.settings.reservation_seconds
        while self.nominations:
            key, nomination = next(iter(self.nominations.items()))
            if now - nomination.at <= ttl and len(self.nominations) < MAX_TRACKED_PODS:
                break
            del self.nominations[key]

    # -- the informer's view -------------------------------------------------------------------

    def seen(self, key: str, obj: Mapping[str, Any], parsed: PodInfo | None = None) -> None:
        """Pod `key` was added or changed (its object `obj`, already parsed when `parsed` is
        given): refresh the view of a tracked preemptor; a bound or terminating one no longer
        needs its nomination. Only a tracked pod is parsed."""
        if key not in self.views and key not in self.nominations:
            return
        pod = parsed if parsed is not None else parse_pod(obj)
        if key in self.views:
            self.views[key] = pod
        if pod.bound or pod.terminating:
            self.nominations.pop(key, None)

    def gone(self, key: str) -> None:
        """Pod `key` was deleted: forget its nomination; a tracked view becomes None."""
        self.nominations.pop(key, None)
        if key in self.views:
            self.views[key] = None

    @contextmanager
    def watching(self, pod: PodInfo) -> Iterator[None]:
        """Track the informer's view of `pod` for the duration of the block (an attempt)."""
        self.views[pod.key] = pod
        try:
            yield
        finally:
            del self.views[pod.key]

    def stale(self, pod: PodInfo) -> str | None:
        """Why `pod` no longer needs room (None while it is still pending, unbound, the same
        pod): from the informer's latest view and the cache."""
        view = self.views.get(pod.key, pod)
        if view is None:
            return "the pod was deleted"
        if view.uid != pod.uid:
            return "the pod was re-created"
        if view.bound:
            return f"the pod was bound to node {view.node_name}"
        if view.terminating:
            return "the pod is being deleted"
        state = self.cache.pods.get(pod.key)
        if state is not None:
            return f"the pod is counted on node {state.node}"
        return None
