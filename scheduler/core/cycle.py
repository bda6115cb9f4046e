"""One scheduling cycle per pod, then an asynchronous binding cycle (kube-scheduler's shape).

    pop -> [leader?] -> pre-checks -> filter + score (one vectorized pass) -> choose GPUs
        -> assume in cache -> start binding task -> next pod
    binding task: [leader?] -> [node still there?] -> [PreBind: the PV claimRefs and claim
                  annotations VolumeBinding chose, `scheduler.plugins.volume_binding`]
                  -> POST binding (GPU annotations ride along) -> Scheduled event
                  failure of any kind (an API error, a lost connection, a bug, a write that
                  never left the process): forget the assumption, back the pod off (unless it
                  is gone or bound by someone else), FailedScheduling event
                  cancelled (leadership lost, shutdown), at any await or before the task's
                  first step: forgotten and backed off when the task ends
                  (`_start_binding`), so no pod stays assumed with its queue entry in flight
                  outcome unknown (the connection broke after the request may have gone out,
                  or "already assigned"): the pod stays assumed and is read back; only a pod
                  read back unbound is forgotten, so GPUs a landed Binding took are never
                  given to another pod. A read-back that fails keeps the pod assumed and is
                  tried again when its queue entry pops.

    no node fits: FailedScheduling event + PodScheduled=False (reason Unschedulable) -> the pod
                  waits in the unschedulable pool until a cluster event may have made room
                  (so does a pod with invalid fields, or one using a field the scheduler does
                  not implement: `scheduler.model.unsupported`)

    gang member (spec.schedulingGroup): the whole gang in one cycle (`_schedule_gang`, placing
                  with `scheduler.gangs.planning`): at least minCount members bound, or none
    gated pod (spec.schedulingGates): never queued (`PodHandler`); `pod_gated` patches
                  PodScheduled=False, reason SchedulingGated, once per pod

Every failure path gives back what was assumed, so the cache never holds a pod that the API
server did not bind. The cycle itself is synchronous up to the assume: no other coroutine can
change the cache between filtering and assuming.

Background work (binds, PodScheduled condition patches, reclaim attempts) runs in tasks of one
`TaskSet`: each is tracked until it ends and any exception it raises is logged as JSON, so no
task ends unseen.

The PodScheduled=False condition is patched once per pod UID and message. The patch's answer is
checked; when it fails the mark is taken back, so the pod's next unschedulable cycle (its next
retry, after a cluster event or the unschedulable flush) patches again. Marks are dropped when
the pod is bound or deleted (`pod_gone`), and at most `MAX_CONDITION_MARKS` are kept (the
oldest go first; forgetting one costs at most one redundant patch).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import structlog
from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client

from metrics.scheduling import SchedulingMetrics
from scheduler.core.queue import QueueClosed, QueuedPod, SchedulingQueue
from scheduler.framework.runtime import NO_NODE, Evaluation, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.planning import GangRequest, plan_gang
from scheduler.gangs.tracker import GangTracker, PodGroupInfo, gang_key
from scheduler.kube.apierrors import APIError, APINotSentError, APITransportError
from scheduler.kube.binding import (
    SCHEDULING_GATED_MESSAGE,
    SCHEDULING_GATED_REASON,
    UNSCHEDULABLE_REASON,
    bind_pod,
    read_binding,
    set_unschedulable,
)
from scheduler.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from scheduler.kube.podgroups import SCHEDULER_ERROR, set_pod_group_condition
from scheduler.kube.tasks import TaskSet
from scheduler.model.fields import sorted_errors
from scheduler.model.objects import NVLINK_DOMAIN_ANNOTATION, PodInfo
from scheduler.model.unsupported import NAME as UNSUPPORTED
from scheduler.model.unsupported import unsupported_message
from scheduler.plugins.nvlink import NAME as NVLINK
from scheduler.plugins.volume_binding import NAME as VOLUME_BINDING
from scheduler.plugins.volume_binding import (
    VolumePlan,
    assume_volumes,
    plan_volumes,
    pre_filter,
    prebind_volumes,
)
from scheduler.state.cache import ClusterCache
from topology.occupancy import GPUS_ANNOTATION, NO_DOMAIN, choose_gpus

log = structlog.get_logger("gpu-scheduler.core.cycle")

MAX_CONDITION_MARKS = 10_000


@dataclass(frozen=True)
class Placement:
    """A decision: the node, the GPU indices inside it, their NVLink domain, the score."""

    node: str
    gpus: tuple[int, ...]
    domain: int
    score: float

    def annotations(self) -> dict[str, str]:
        if not self.gpus:
            return {}
        return {
            GPUS_ANNOTATION: ",".join(str(g) for g in self.gpus),
            NVLINK_DOMAIN_ANNOTATION: str(self.domain),
        }

    def describe(self) -> str:
        if not self.gpus:
            return f"score {self.score:.0f}"
        gpus = ",".join(str(g) for g in self.gpus)
        where = (
            "across NVLink domains"
            if self.domain == NO_DOMAIN
            else f"in NVLink domain {self.domain}"
        )
        return f"GPUs {gpus} {where}; score {self.score:.0f}"


def place(cache: ClusterCache, pod: PodInfo, evaluation: Evaluation) -> Placement:
    """The GPUs to take on the chosen node (best NVLink domain, see `topology.occupancy`)."""
    node = cache.names[evaluation.chosen]
    score = float(evaluation.total[evaluation.chosen])
    if pod.gpus == 0:
        return Placement(node, (), NO_DOMAIN, score)
    topology = cache.nodes[node].topology
    choice = choose_gpus(topology, cache.node_gpus_used(node), pod.gpus)
    if choice is None:  # filters guarantee enough free GPUs; keep the cycle safe regardless
        raise RuntimeError(f"node {node} has fewer than {pod.gpus} free GPUs after filtering")
    return Placement(node, tuple(choice.gpus), int(choice.domain), score)


def larger_than_any_node(pod: PodInfo, snapshot: Snapshot) -> str:
    """A message when the pod asks for more GPUs than any node has at all ("" otherwise): no
    eviction or scheduling can ever help, so the message says which request is too big."""
    if pod.gpus == 0 or snapshot.node_count == 0:
        return ""
    largest = int(snapshot.gpu_total[snapshot.valid].max())
    if pod.gpus <= largest:
        return ""
    return (
        f"0/{snapshot.node_count} nodes are available: the pod requests {pod.gpus} "
        f"nvidia.com/gpu (spec.containers[*].resources.limits) and the largest node has "
        f"{largest}."
    )


class PostFilter(Protocol):
    """What runs when no node fits (reclaim): see `scheduler.postfilter.reclaim.Reclaimer`."""

    @property
    def enabled(self) -> bool: ...

    def cooling_down(self, pod_key: str) -> bool: ...

    async def attempt(self, pod: PodInfo) -> str | None: ...


class GangPostFilter(Protocol):
    """What runs when a gang does not fit: `scheduler.postfilter.gang_reclaim.GangReclaimer`."""

    @property
    def enabled(self) -> bool: ...

    def cooling_down(self, gang: str) -> bool: ...

    async def attempt(self, request: GangRequest) -> bool: ...


def outcome_unknown(error: BaseException) -> bool:
    """Whether a failed Binding may still have landed: no answer came (the connection broke or
    timed out after the request may have gone out), or the API server says the pod is already
    assigned (perhaps by this very request, retried below the client). A write the fence
    refused, or one that failed before its first byte went out, was never sent."""
    if isinstance(error, APINotSentError):
        return False
    if isinstance(error, APITransportError):
        return True
    return isinstance(error, APIError) and error.already_assigned


class Scheduler:
    """The scheduling loop and its binding tasks."""

    def __init__(
        self,
        *,
        scheduler_name: str,
        cache: ClusterCache,
        queue: SchedulingQueue[PodInfo],
        framework: Framework,
        api_client: client.ApiClient,
        recorder: EventRecorder,
        bind_concurrency: int = 16,
        bind_timeout: float = 30.0,
        bind_limiter: AsyncLimiter | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        post_filter: PostFilter | None = None,
        metrics: SchedulingMetrics | None = None,
        gangs: GangTracker | None = None,
        gang_post_filter: GangPostFilter | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.cache = cache
        self.queue = queue
        self.framework = framework
        self.core = client.CoreV1Api(api_client)
        self.recorder = recorder
        self.bind_timeout = bind_timeout
        self.is_leader = is_leader
        self.clock = clock
        self.post_filter = post_filter
        self.metrics = metrics or SchedulingMetrics.unregistered(scheduler_name)
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._bind_limiter = bind_limiter
        """Client-side rate limit of Binding calls (`bind_rate_limiter`), taken inside a slot
        and before the leadership check, so a pod that waited for a token is checked after."""
        self._tasks = TaskSet("scheduler")
        self._condition_messages: OrderedDict[str, str] = OrderedDict()
        """Pod UID -> the message of the PodScheduled=False condition patched (or being
        patched) for it; see the module docstring."""
        self._unconfirmed: dict[str, tuple[Placement, Exception]] = {}
        """Pod key -> the placement of a Binding whose outcome is unknown (answer lost) and the
        error that lost it; the pod stays assumed until it is read back."""
        self.bound = 0
        self.unschedulable = 0
        self.gangs = gangs
        self.gang_post_filter = gang_post_filter
        self.custom = client.CustomObjectsApi(api_client)
        self._gang_conditions: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """PodGroup key -> (status, message) of the condition patched (or being patched)."""

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule pods until the queue closes or the task is cancelled."""
        while True:
            try:
                queued = await self.queue.pop()
            except QueueClosed:
                return
            if not self.is_leader():
                self.queue.requeue_backoff(queued)
                continue
            try:
                self.schedule_one(queued)
            except Exception:  # a bug must not stop the loop or lose the pod
                log.exception("scheduling_cycle_failed", pod=queued.key)
                self.metrics.error()
                self.queue.requeue_backoff(queued)

    def schedule_one(self, queued: QueuedPod[PodInfo]) -> None:
        """One synchronous cycle; the binding continues in a task."""
        pod = queued.obj
        unconfirmed = self._unconfirmed.get(pod.key)
        if unconfirmed is not None and self.cache.is_assumed(pod.key):
            placement, error = unconfirmed
            self._start_binding(queued, self._confirm(queued, pod, placement, error), "confirm")
            return
        if pod.key in self.cache.pods:  # bound meanwhile (by us before a restart, or by hand)
            self.queue.done(queued)
            return
        if pod.pod_group and self.gangs is not None:
            self._schedule_gang(queued, self.gangs)
            return
        if pod.errors:
            message = f"pod has invalid fields: {sorted_errors(pod.errors)}"
            self._unschedulable(queued, message, ("PodSpec",))
            return
        snapshot = Snapshot(self.cache)
        if pod.unsupported:
            message = unsupported_message(pod.unsupported, snapshot.node_count)
            self._unschedulable(queued, message, (UNSUPPORTED,))
            return
        volume_problem = pre_filter(pod, self.cache)
        if volume_problem:
            message = f"0/{snapshot.node_count} nodes are available: {volume_problem}."
            self._unschedulable(queued, message, (VOLUME_BINDING,))
            return
        too_big = larger_than_any_node(pod, snapshot)
        if too_big:
            self._unschedulable(queued, too_big, ("NodeResourcesFit",))
            return
        with self.cache.released(pod.key):  # room reclaimed for this pod is its own
            evaluation = self.framework.evaluate(pod, snapshot)
            if evaluation.chosen == NO_NODE:
                message = evaluation.diagnosis.message(snapshot.valid)
                plugins = {r.plugin for r in evaluation.diagnosis.rejections}
                self._unschedulable(queued, message, tuple(sorted(plugins)))
                if evaluation.diagnosis.resolvable_nodes(snapshot.valid).any():
                    self._post_filter(pod)
                return
            placement = place(self.cache, pod, evaluation)
            self.cache.drop_reservation(pod.key)
        self._log_decision(pod, placement, evaluation)
        volumes = plan_volumes(evaluation.state, evaluation.chosen, placement.node, pod)
        self.cache.assume(pod, placement.node, placement.gpus)
        if volumes is not None:  # forget() takes the assumption back
            assume_volumes(self.cache.volumes, volumes)
        self._start_binding(queued, self._bind(queued, pod, placement, volumes), "bind")

    # -- gangs ---------------------------------------------------------------------------------

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
            placement = Placement(member.node, member.gpus, member.domain, member.score)
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
            binds.append(
                self._start_binding(entry, self._bind(entry, member.pod, placement), "bind")
            )
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

    # -- outcomes ------------------------------------------------------------------------------

    def _post_filter(self, pod: PodInfo) -> None:
        """Start a reclaim attempt in the background (it queries Prometheus and evicts); the pod
        is retried when the freed room shows up as pod deletions."""
        if self.post_filter is None or not self.post_filter.enabled:
            return
        if self.post_filter.cooling_down(pod.key):
            return
        self._tasks.spawn(self.post_filter.attempt(pod), name=f"post-filter:{pod.key}")

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

    def _log_decision(self, pod: PodInfo, placement: Placement, evaluation: Evaluation) -> None:
        scores = evaluation.state.data.get(NVLINK)
        components = scores.components(evaluation.chosen) if scores is not None else {}
        log.info(
            "pod_placed",
            pod=pod.key,
            node=placement.node,
            gpus=list(placement.gpus),
            nvlink_domain=placement.domain,
            score=round(placement.score, 2),
            feasible_nodes=int(np.count_nonzero(evaluation.diagnosis.feasible)),
            **components,
        )

    def _unschedulable(
        self, queued: QueuedPod[PodInfo], message: str, plugins: tuple[str, ...]
    ) -> None:
        pod = queued.obj
        self.unschedulable += 1
        self.metrics.unschedulable()
        log.info("pod_unschedulable", pod=pod.key, message=message, attempts=queued.attempts)
        self.queue.requeue_unschedulable(queued, (message,), plugins)
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, WARNING, "FailedScheduling", "Scheduling", message)
        self._mark_condition(pod, message, UNSCHEDULABLE_REASON)

    def pod_gated(self, pod: PodInfo) -> None:
        """PreEnqueue rejected `pod` (scheduling gates left): patch PodScheduled=False, reason
        SchedulingGated, as kube-scheduler does; once per pod, not per watch event. Only the
        leader writes; a pod seen while not leading is marked on its next event."""
        if self.is_leader():
            self._mark_condition(pod, SCHEDULING_GATED_MESSAGE, SCHEDULING_GATED_REASON)

    def pod_waiting(self, pod: PodInfo, message: str) -> None:
        """PreEnqueue held a gang member back (`scheduler.gangs.tracker`): PodScheduled=False,
        reason SchedulingGated, with why it waits; leader only, like `pod_gated`."""
        if self.is_leader():
            self._mark_condition(pod, message, SCHEDULING_GATED_REASON)

    def _mark_condition(self, pod: PodInfo, message: str, reason: str) -> None:
        """Start the condition patch unless this message was already patched for the pod."""
        mark = pod.uid or pod.key
        if self._condition_messages.get(mark) != message:
            self._condition_messages[mark] = message
            self._condition_messages.move_to_end(mark)
            while len(self._condition_messages) > MAX_CONDITION_MARKS:
                self._condition_messages.popitem(last=False)
            self._tasks.spawn(
                self._set_condition(pod, message, reason), name=f"condition:{pod.key}"
            )

    async def _set_condition(
        self, pod: PodInfo, message: str, reason: str = UNSCHEDULABLE_REASON
    ) -> None:
        """Patch PodScheduled=False; on failure take the mark back so the next cycle retries."""
        mark = pod.uid or pod.key
        try:
            await set_unschedulable(
                self.core,
                pod.namespace,
                pod.name,
                message,
                self.bind_timeout,
                pod.uid,
                reason=reason,
            )
        except BaseException as error:
            if self._condition_messages.get(mark) == message:
                del self._condition_messages[mark]
            if not isinstance(error, Exception):
                raise  # cancelled
            if isinstance(error, APIError) and error.not_found:
                return  # deleted meanwhile
            log.warning(
                "condition_update_failed",
                pod=pod.key,
                error=str(error) if isinstance(error, APIError) else repr(error),
                retry="on the next unschedulable cycle of the pod",
            )

    def pod_gone(self, uid: str, key: str = "") -> None:
        """The pod was bound or deleted: forget its condition mark (by UID, or by key for a pod
        without one)."""
        self._condition_messages.pop(uid or key, None)
        if key:
            self._unconfirmed.pop(key, None)

    def _start_binding(
        self, queued: QueuedPod[PodInfo], work: Coroutine[Any, Any, Exception | None], kind: str
    ) -> asyncio.Task[Exception | None]:
        """Run `work`, the binding cycle or the read-back of the assumed pod `queued` (its queue
        entry in flight), as a tracked task. Whichever way the task ends, the pod is settled:
        `work` settles it itself (bound, or forgotten and requeued, or kept assumed and backed
        off while a lost answer is read back); a task that ends with the flight still open
        (cancelled, even before its first step, or a bug) is settled by `_settle_abandoned`."""
        task = self._tasks.spawn(work, name=f"{kind}:{queued.key}")
        assert task is not None  # the scheduler's task set has no limit
        task.add_done_callback(lambda done: self._settle_abandoned(queued, done))
        return task

    def _settle_abandoned(
        self, queued: QueuedPod[PodInfo], task: asyncio.Task[Exception | None]
    ) -> None:
        """The binding task of `queued` ended; if its flight is still open, nothing settled the
        pod: forget it and back it off. A Binding that landed meanwhile is counted where it is
        by the informer, and a second one is refused as already assigned and read back."""
        if not self.queue.flying(queued):
            return
        self._unconfirmed.pop(queued.key, None)
        if self.cache.is_assumed(queued.key):
            self.cache.forget(queued.key)
        self.queue.requeue_backoff(queued)
        failed = None if task.cancelled() else task.exception()
        log.warning(
            "bind_abandoned",
            pod=queued.key,
            why="cancelled" if failed is None else f"{type(failed).__name__}: {failed}",
        )

    async def _bind(
        self,
        queued: QueuedPod[PodInfo],
        pod: PodInfo,
        placement: Placement,
        volumes: VolumePlan | None = None,
    ) -> Exception | None:
        """The binding cycle. Any failure, of any type, forgets the assumed pod and ends the
        queue entry's flight (requeued with backoff unless the pod is gone or bound by someone
        else); cancellation, at any await, leaves that to `_settle_abandoned`. A Binding whose
        outcome is unknown keeps the pod assumed until it is read back (`_confirm`).
        `volumes`: VolumeBinding's PreBind writes, made first; one failing fails the binding
        (the Binding is not sent). Returns the error of a Binding refused for good (not gone,
        not bound already), else None."""
        try:
            async with self._bind_slots:
                if self._bind_limiter is not None:
                    await self._bind_limiter.acquire()
                if not self.is_leader():
                    self.cache.forget(pod.key)
                    self.queue.requeue_backoff(queued)
                    return None
                if placement.node not in self.cache.nodes:
                    self.cache.forget(pod.key)
                    self.queue.requeue_backoff(queued)
                    log.warning("bind_skipped_node_gone", pod=pod.key, node=placement.node)
                    return None
                if volumes is not None:
                    await prebind_volumes(self.core, volumes, self.bind_timeout)
                await self.metrics.timed_bind(bind_pod)(
                    self.core,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    placement.node,
                    placement.annotations(),
                    self.bind_timeout,
                )
        except Exception as error:
            failure = error
        else:
            self._bound(queued, pod, placement)
            return None
        if outcome_unknown(failure):
            log.warning(
                "bind_outcome_unknown", pod=pod.key, node=placement.node, error=str(failure)
            )
            self._unconfirmed[pod.key] = (placement, failure)
            return await self._confirm(queued, pod, placement, failure)
        self.cache.forget(pod.key)
        refused = self._bind_failed(queued, pod, placement, failure)
        if volumes is not None:  # the PVs it had taken are free again for others
            self.queue.move_all_to_active_or_backoff("VolumeBindingReverted")
        return refused

    async def _confirm(
        self, queued: QueuedPod[PodInfo], pod: PodInfo, placement: Placement, error: Exception
    ) -> Exception | None:
        """Read back a pod whose Binding's answer was lost (`error`), and settle it: bound to
        `placement.node` -> bound (its GPUs were rightly held); unbound -> a failed bind
        (forgotten, backed off, reported); bound elsewhere or gone -> forgotten (the informer
        counts it where it is). A failed read keeps the pod assumed and its queue entry backed
        off, to be read again when it pops."""
        try:
            found = await read_binding(self.core, pod.namespace, pod.name, self.bind_timeout)
        except Exception as read_error:
            log.warning(
                "bind_readback_failed", pod=pod.key, node=placement.node, error=str(read_error)
            )
            self.queue.requeue_backoff(queued)
            return None
        self._unconfirmed.pop(pod.key, None)
        if found is not None and found[0] == pod.uid and found[1] == placement.node:
            log.info("bind_readback", pod=pod.key, node=placement.node, landed=True)
            self._bound(queued, pod, placement)
            return None
        self.cache.forget(pod.key)
        landed_elsewhere = found is not None and found[0] == pod.uid and bool(found[1])
        log.info(
            "bind_readback",
            pod=pod.key,
            node=placement.node,
            landed=False,
            gone=found is None or found[0] != pod.uid,
            bound_to=found[1] if landed_elsewhere and found else None,
        )
        if found is None or found[0] != pod.uid or landed_elsewhere:
            self.queue.done(queued)
            return None
        return self._bind_failed(queued, pod, placement, error)

    def _bound(self, queued: QueuedPod[PodInfo], pod: PodInfo, placement: Placement) -> None:
        self.cache.finish_binding(pod.key, self.clock())
        self.queue.done(queued)
        self.pod_gone(pod.uid, pod.key)
        self.bound += 1
        self.metrics.scheduled(queued.attempts, self.clock() - queued.initial_queued_at)
        note = f"Successfully assigned {pod.key} to {placement.node}; {placement.describe()}"
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, NORMAL, "Scheduled", "Binding", note)
        log.info("pod_bound", pod=pod.key, node=placement.node, gpus=list(placement.gpus))

    def _bind_failed(
        self, queued: QueuedPod[PodInfo], pod: PodInfo, placement: Placement, error: Exception
    ) -> Exception | None:
        """Decide by the error's type: gone -> drop; already bound -> drop (the informer counts
        it where it really is); anything else -> back off and retry (and return the error)."""
        api = error if isinstance(error, APIError) else None
        gone = api is not None and api.not_found
        assigned = api is not None and api.already_assigned
        log.warning(
            "bind_failed",
            pod=pod.key,
            node=placement.node,
            error=str(error) if api else f"{type(error).__name__}: {error}",
            status=api.status if api else None,
            gone=gone,
            already_assigned=assigned,
            exc_info=None if api else error,
        )
        self.metrics.error()
        if gone or assigned:
            self.queue.done(queued)
            return None
        self.queue.requeue_backoff(queued)
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        note = f"Binding rejected: {error}"
        self.recorder.emit(ref, WARNING, "FailedScheduling", "Binding", note)
        return error

    # -- stopping ------------------------------------------------------------------------------

    @property
    def binds_in_flight(self) -> int:
        """Background tasks running: binds, condition patches and reclaim attempts."""
        return len(self._tasks)

    async def finish_binds(self, timeout: float) -> None:
        """Let background tasks finish for up to `timeout` seconds, then cancel the rest
        (pods whose bind is cancelled are forgotten and requeued)."""
        await self._tasks.close(timeout)
