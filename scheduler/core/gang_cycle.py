"""The gang cycle: the pending members of a PodGroup placed and bound together, or none.

    gang member popped -> [its PodGroup seen and ready? else held back again (PreEnqueue)]
        -> its pending members still in the queue taken along -> placed together
        (`scheduler.gangs.planning.plan_gang`) -> at least minCount members (counting those
        bound or assumed already) fit -> a binding task per member (`BindingCycle`)
        -> PodGroup condition PodGroupInitiallyScheduled=True once minCount are bound
    fewer fit: every member unschedulable with the gang's reason, the PodGroup's condition
        False (Unschedulable), and the gang PostFilter (idle reclaim, then preemption) for the
        whole gang, unless its valid members could not start it anyway

The PodGroup's condition is patched (v1beta1 PodGroups only) once per status and message, and
never set back to False once True; at most `MAX_CONDITION_MARKS` marks are kept.

`GangCycle` is the middle layer of `scheduler.core.cycle.Scheduler`, on top of the binding
cycle.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from contextlib import ExitStack
from typing import Protocol

import structlog
from kubernetes_asyncio import client

from scheduler.core.binding_cycle import MAX_CONDITION_MARKS, BindingCycle
from scheduler.core.placement import Placement
from scheduler.core.queue import QueuedPod, SchedulingQueue
from scheduler.framework.runtime import Framework
from scheduler.gangs.planning import GangRequest, plan_gang
from scheduler.gangs.tracker import GangTracker, PodGroupInfo, gang_key
from scheduler.kube.apierrors import APIError
from scheduler.kube.podgroups import SCHEDULER_ERROR, set_pod_group_condition
from scheduler.model.objects import PodInfo
from scheduler.state.context import SchedulerContext

log = structlog.get_logger("gpu-scheduler.core.gang_cycle")


class GangPostFilter(Protocol):
    """What runs when a gang does not fit: `scheduler.postfilter.gang_reclaim.GangReclaimer`."""

    @property
    def enabled(self) -> bool: ...

    def cooling_down(self, gang: str) -> bool: ...

    async def attempt(self, request: GangRequest) -> bool: ...


class GangCycle(BindingCycle):
    """One cycle per gang, on top of the binding cycle; see the module docstring."""

    def __init__(
        self,
        context: SchedulerContext,
        queue: SchedulingQueue[PodInfo],
        framework: Framework,
        gangs: GangTracker | None = None,
        gang_post_filter: GangPostFilter | None = None,
    ) -> None:
        """Gangs `gangs` tracks are placed with `framework`; `gang_post_filter` (None: none)
        runs for a gang that does not fit. Without `gangs` there are no gang cycles."""
        super().__init__(context, queue)
        self.framework = framework
        self.gangs = gangs
        self.gang_post_filter = gang_post_filter
        self.custom = client.CustomObjectsApi(context.api_client)
        self._gang_conditions: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """PodGroup key -> (status, message) of the condition patched (or being patched)."""

    def _schedule_gang(self, queued: QueuedPod[PodInfo], gangs: GangTracker) -> None:
        """One cycle for the gang of `queued`: its pending members still waiting in the queue
        are taken along and placed together (`scheduler.gangs.planning.plan_gang`). At least
        minCount members (counting those already bound or assumed) are placed and bound, or
        none: each member then goes to the unschedulable pool with the gang's reason and is
        retried on cluster events like any unschedulable pod.

        Limit: the binds are separate API calls. A member whose bind fails after others were
        bound is forgotten, logged and backed off as usual (retried alone, in a gang cycle that
        counts the bound members); the members already bound stay bound."""
        pod = queued.obj
        gang = gang_key(pod)
        group = gangs.groups.get(gang)
        waiting = gangs.waiting(gang)
        if group is None or waiting:  # the PodGroup went away: held back again (PreEnqueue)
            self.queue.done(queued)
            gangs.held.add(pod.key)
            self.pod_waiting(pod, waiting)
            return
        members = gangs.members(gang)
        others = [k for k in gangs.pending(gang) if k != pod.key and k not in self.cache.pods]
        batch = [queued, *self.queue.take(others)]
        placed_before = [k for k in members if k in self.cache.pods]
        need = max(group.min_count - len(placed_before), 0)
        pinned: set[str] = set()
        if group.topology_key and placed_before:
            for key in placed_before:
                node = self.cache.nodes.get(self.cache.pods[key].node)
                value = node.labels.get(group.topology_key) if node is not None else None
                if value is not None:
                    pinned.add(value)
        with ExitStack() as released:  # room reclaimed for the members is their own
            for entry in batch:
                released.enter_context(self.cache.released(entry.key))
            plan = plan_gang(
                self.cache,
                self.framework,
                [q.obj for q in batch],
                need,
                group.topology_key,
                pinned,
            )
            for entry in batch:  # placed or not, the gang plans afresh next time
                if plan.fits:
                    self.cache.drop_reservation(entry.key)
        plugins = tuple(sorted(plan.plugins)) or ("PodGroup",)
        if not plan.fits:
            reasons = "; ".join(sorted(set(plan.unplaced.values())))
            message = (
                f"gang {group.name}: only {len(placed_before) + plan.best} of minCount "
                f"{group.min_count} members fit: {reasons}"
            )
            if len(message) > 1024:
                message = message[:1000] + "... (truncated)"
            for entry in batch:
                self._unschedulable(entry, message, plugins)
            self._gang_condition(group, "False", "Unschedulable", message)
            valid = tuple(q.obj for q in batch if not q.obj.errors and not q.obj.unsupported)
            if len(valid) >= need:  # never evict for a gang that cannot fully start
                self._gang_post_filter(GangRequest(group, valid, need, frozenset(pinned)))
            return
        by_key = {q.key: q for q in batch}
        binds: list[asyncio.Task[Exception | None]] = []
        for member in plan.placed:
            devices = member.claims.described() if member.claims is not None else ()
            placement = Placement(member.node, member.gpus, member.domain, member.score, devices)
            log.info(
                "pod_placed",
                pod=member.pod.key,
                node=placement.node,
                gpus=list(placement.gpus),
                nvlink_domain=placement.domain,
                score=round(placement.score, 2),
                gang=gang,
            )
            entry = by_key[member.pod.key]
            work = self._bind(entry, member.pod, placement, claims=member.claims)
            binds.append(self._start_binding(entry, work, "bind"))
        for key, reason in plan.unplaced.items():
            self._unschedulable(by_key[key], f"gang {group.name}: {reason}", plugins)
        self._tasks.spawn(self._bind_gang(group, binds), name=f"bind-gang:{gang}")

    async def _bind_gang(
        self, group: PodGroupInfo, binds: list[asyncio.Task[Exception | None]]
    ) -> None:
        """Wait for the members' binding tasks; then, when minCount members are bound, the
        PodGroup's condition is set to Scheduled. When fewer are bound because the API server
        refused a Binding with an error (not because the pod went away or was bound already),
        the condition is False with reason SchedulerError and the error, as kube-scheduler
        reports a scheduling error. Each member's task settles its own pod, so cancelling this
        one leaves nothing assumed."""
        if binds:
            await asyncio.wait(binds)
        errors = [task.result() for task in binds if not task.cancelled()]
        if self.gangs is None:
            return
        # Members that ran to completion already (a fast Job) were bound too.
        members = self.gangs.members(group.key)
        bound = {k for k in members if k in self.cache.pods} | self.gangs.bound_once(group.key)
        if len(bound) >= group.min_count:
            message = f"{len(bound)} of minCount {group.min_count} members bound"
            self._gang_condition(group, "True", "Scheduled", message)
            return
        failed = [e for e in errors if e is not None]
        if failed:
            first = failed[0]
            text = str(first) if isinstance(first, APIError) else f"{type(first).__name__}: {first}"
            message = (
                f"gang {group.name}: binding {len(failed)} member(s) failed, "
                f"{len(bound)} of minCount {group.min_count} bound: {text}"
            )
            if len(message) > 1024:
                message = message[:1000] + "... (truncated)"
            self._gang_condition(group, "False", SCHEDULER_ERROR, message)

    def _gang_condition(self, group: PodGroupInfo, status: str, reason: str, message: str) -> None:
        """Patch the PodGroup's PodGroupInitiallyScheduled condition unless it already says
        this; once True it is not set back to False (the gang was scheduled once). Only
        v1beta1 PodGroups get it (scheduler-plugins PodGroups' status is left alone)."""
        if group.source != "scheduling.k8s.io/v1beta1":
            return
        current = group.condition
        if current is not None and current[0] == "True":
            return
        if current is not None and (current[0], current[2]) == (status, message):
            return
        if self._gang_conditions.get(group.key) in ((status, message), ("True", "")):
            return
        if not self.is_leader():
            return
        self._gang_conditions[group.key] = ("True", "") if status == "True" else (status, message)
        self._gang_conditions.move_to_end(group.key)
        while len(self._gang_conditions) > MAX_CONDITION_MARKS:
            self._gang_conditions.popitem(last=False)
        self._tasks.spawn(
            self._set_gang_condition(group, status, reason, message),
            name=f"podgroup-condition:{group.key}",
        )

    async def _set_gang_condition(
        self, group: PodGroupInfo, status: str, reason: str, message: str
    ) -> None:
        try:
            await set_pod_group_condition(
                self.custom,
                group.namespace,
                group.name,
                status,
                reason,
                message,
                self.bind_timeout,
                group.uid,
            )
        except Exception as error:
            self._gang_conditions.pop(group.key, None)
            if isinstance(error, APIError) and error.not_found:
                return
            log.warning(
                "podgroup_condition_failed",
                podgroup=group.key,
                error=str(error) if isinstance(error, APIError) else repr(error),
            )

    def _gang_post_filter(self, request: GangRequest) -> None:
        """Start a gang PostFilter attempt in the background (idle reclaim, then preemption,
        for the whole gang); the members are retried when the freed room shows up."""
        post_filter = self.gang_post_filter
        if post_filter is None or not post_filter.enabled:
            return
        if post_filter.cooling_down(request.group.key):
            return
        self._tasks.spawn(
            post_filter.attempt(request), name=f"gang-post-filter:{request.group.key}"
        )
