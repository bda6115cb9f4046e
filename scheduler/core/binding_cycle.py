"""The binding cycle of an assumed pod, and what the pod is told of its outcome.

    binding task: [leader?] -> [node still there?] -> [PreBind: the PV claimRefs and claim
                  annotations VolumeBinding chose, `scheduler.plugins.volume_binding`; the
                  ResourceClaims' finalizer, allocation and reservation DynamicResources chose,
                  `scheduler.core.claim_binding`, undone on any later failure]
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

Background work (binds, PodScheduled condition patches, reclaim attempts) runs in tasks of one
`TaskSet`: each is tracked until it ends and any exception it raises is logged as JSON, so no
task ends unseen.

The PodScheduled=False condition is patched once per pod UID and message. The patch's answer is
checked; when it fails the mark is taken back, so the pod's next unschedulable cycle (its next
retry, after a cluster event or the unschedulable flush) patches again. Marks are dropped when
the pod is bound or deleted (`pod_gone`), and at most `MAX_CONDITION_MARKS` are kept (the
oldest go first; forgetting one costs at most one redundant patch). A pod has at most one patch
in flight: a newer message waits for it and then goes out (only the newest of those waiting), so
the patches land in the order they were decided and the pod ends with the newest message, never
an older one whose patch happened to finish last (a gang member's "waiting for PodGroup" after
its gang's verdict).

`BindingCycle` is the lowest layer of `scheduler.core.cycle.Scheduler`: the gang cycle
(`scheduler.core.gang_cycle`) and the scheduling cycle start binding tasks and report
unschedulable pods through it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

import structlog
from kubernetes_asyncio import client

from scheduler.core.claim_binding import ClaimWrites
from scheduler.core.placement import Placement
from scheduler.core.queue import QueuedPod, SchedulingQueue
from scheduler.kube.apierrors import (
    APIError,
    APINotSentError,
    APITooManyRequestsError,
    APITransportError,
)
from scheduler.kube.binding import (
    SCHEDULER_ERROR_REASON,
    SCHEDULING_GATED_MESSAGE,
    SCHEDULING_GATED_REASON,
    UNSCHEDULABLE_REASON,
    bind_pod,
    read_binding,
    set_unschedulable,
)
from scheduler.kube.events import NORMAL, WARNING, ObjectRef
from scheduler.kube.rate_limit import bind_rate_limiter
from scheduler.kube.tasks import TaskSet
from scheduler.model.allocations import Allocation
from scheduler.model.objects import PodInfo
from scheduler.plugins.dynamic_resources import ClaimPlan
from scheduler.plugins.volume_binding import VolumePlan, prebind_volumes
from scheduler.state.context import SchedulerContext

log = structlog.get_logger("gpu-scheduler.core.binding_cycle")

MAX_CONDITION_MARKS = 10_000


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


class BindingCycle:
    """Binding tasks, the pod's Events and PodScheduled condition, and the background tasks of
    the scheduler; see the module docstring."""

    def __init__(self, context: SchedulerContext, queue: SchedulingQueue[PodInfo]) -> None:
        """Binds through `context.api_client` as `context.settings.binding` says (concurrency,
        timeout, rate limit), settling each pod in `context.cache` and `queue`."""
        binding = context.settings.binding
        self.context = context
        self.cache = context.cache
        self.queue = queue
        self.core = client.CoreV1Api(context.api_client)
        self.resource = client.ResourceV1Api(context.api_client)
        self.recorder = context.recorder
        self.metrics = context.metrics
        self.clock = context.clock
        self.is_leader = context.is_leader
        self.bind_timeout = binding.timeout_seconds
        self._bind_slots = asyncio.Semaphore(binding.concurrency)
        self.bind_limiter = bind_rate_limiter(binding.qps, binding.burst)
        """Paces Binding calls (`scheduler.kube.rate_limit`): taken inside a slot and before
        the leadership check, so a pod that waited for a token is checked after; paused by a
        429's Retry-After. Tests may replace it before the first bind."""
        self._tasks = TaskSet("scheduler")
        self._condition_messages: OrderedDict[str, str] = OrderedDict()
        """Pod UID -> the message of the PodScheduled=False condition patched (or being
        patched) for it; see the module docstring."""
        self._condition_next: dict[str, tuple[PodInfo, str, str] | None] = {}
        """Pod UID (or key) with a condition patch in flight -> the newest patch decided since,
        to send when that one ends (None: none)."""
        self._unconfirmed: dict[str, tuple[Placement, Exception]] = {}
        """Pod key -> the placement of a Binding whose outcome is unknown (answer lost) and the
        error that lost it; the pod stays assumed until it is read back."""
        self.bound = 0
        self.unschedulable = 0

    # -- the pod's conditions and events -------------------------------------------------------

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

    def _attempt_failed(self, queued: QueuedPod[PodInfo], message: str) -> None:
        """The attempt ended in an error, not a verdict (a CEL selector failed): the pod backs
        off; FailedScheduling and PodScheduled=False, reason SchedulerError, as kube-scheduler
        reports a plugin's error."""
        pod = queued.obj
        self.metrics.error()
        log.warning("scheduling_attempt_failed", pod=pod.key, error=message)
        self.queue.requeue_backoff(queued)
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, WARNING, "FailedScheduling", "Scheduling", message)
        self._mark_condition(pod, message, SCHEDULER_ERROR_REASON)

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
            if mark in self._condition_next:  # one in flight: this one follows it
                self._condition_next[mark] = (pod, message, reason)
                return
            self._condition_next[mark] = None
            self._tasks.spawn(
                self._write_conditions(mark, pod, message, reason), name=f"condition:{pod.key}"
            )

    async def _write_conditions(self, mark: str, pod: PodInfo, message: str, reason: str) -> None:
        """Patch the condition, then each newer one decided meanwhile, one at a time."""
        try:
            while True:
                await self._set_condition(pod, message, reason)
                following = self._condition_next.get(mark)
                if following is None:
                    return
                self._condition_next[mark] = None
                pod, message, reason = following
        finally:
            self._condition_next.pop(mark, None)

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
        if (uid or key) in self._condition_next:  # a patch in flight: none may follow it
            self._condition_next[uid or key] = None
        if key:
            self._unconfirmed.pop(key, None)

    # -- binding -------------------------------------------------------------------------------

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
        claims: ClaimPlan | None = None,
    ) -> Exception | None:
        """The binding cycle. Any failure, of any type, forgets the assumed pod and ends the
        queue entry's flight (requeued with backoff unless the pod is gone or bound by someone
        else); cancellation, at any await, leaves that to `_settle_abandoned`. A Binding whose
        outcome is unknown keeps the pod assumed until it is read back (`_confirm`).
        `volumes`: VolumeBinding's PreBind writes, made first; one failing fails the binding
        (the Binding is not sent). `claims`: DynamicResources' PreBind writes, made next
        (`scheduler.core.claim_binding`); any failure after one was attempted undoes them
        before the pod is forgotten, so its devices are not offered to another pod while the
        claim still holds them. Returns the error of a Binding refused for good (not gone,
        not bound already), else None."""
        writes = (
            ClaimWrites(self.resource, claims, self.bind_timeout, self.core)
            if claims is not None and not claims.empty
            else None
        )
        binding_sent = False
        try:
            async with self._bind_slots:
                await self.bind_limiter.acquire()
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
                if writes is not None:
                    await writes.write()
                binding_sent = True
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
        if isinstance(failure, APIError) and failure.too_many_requests:
            self._pause_binds(pod, failure)
        if binding_sent and outcome_unknown(failure):
            log.warning(
                "bind_outcome_unknown", pod=pod.key, node=placement.node, error=str(failure)
            )
            self._unconfirmed[pod.key] = (placement, failure)
            return await self._confirm(queued, pod, placement, failure, writes)
        unsettled = await writes.undo() if writes is not None else {}
        self.cache.forget(pod.key)
        self._keep_unsettled(pod.key, unsettled)
        refused = self._bind_failed(queued, pod, placement, failure)
        if volumes is not None:  # the PVs it had taken are free again for others
            self.queue.move_all_to_active_or_backoff("VolumeBindingReverted")
        return refused

    async def _confirm(
        self,
        queued: QueuedPod[PodInfo],
        pod: PodInfo,
        placement: Placement,
        error: Exception,
        writes: ClaimWrites | None = None,
    ) -> Exception | None:
        """Read back a pod whose Binding's answer was lost (`error`), and settle it: bound to
        `placement.node` -> bound (its GPUs were rightly held); unbound -> a failed bind
        (its claim writes undone, forgotten, backed off, reported); bound elsewhere or gone ->
        forgotten (the informer counts it where it is). A failed read keeps the pod assumed and
        its queue entry backed off, to be read again when it pops."""
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
        unsettled = {}
        if writes is not None and found is not None and found[0] == pod.uid and not found[1]:
            unsettled = await writes.undo()
        self.cache.forget(pod.key)
        self._keep_unsettled(pod.key, unsettled)
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

    def _pause_binds(self, pod: PodInfo, error: APIError) -> None:
        """A write of the binding cycle was answered 429 (API Priority and Fairness, or the
        server's in-flight limit): no Binding goes out for the Retry-After it named (1 s when
        none); `pod` itself backs off as after any failed bind."""
        asked = error.retry_after if isinstance(error, APITooManyRequestsError) else None
        paused = self.bind_limiter.pause(asked)
        log.warning(
            "binds_paused",
            pod=pod.key,
            retry_after=asked,
            paused_s=round(paused, 3),
            error=str(error),
        )

    def _keep_unsettled(self, pod_key: str, unsettled: dict[str, tuple[str, Allocation]]) -> None:
        """Keep counting, in flight, the allocations an undo could not release (their write may
        have landed): until the informer shows each claim as it is (allocated: then the claim
        counts; replaced), the pod's next attempt decides anew, or the pod is deleted, their
        devices are not given to another claim."""
        if unsettled:
            self.cache.dra.assume(pod_key, unsettled)
            log.warning("claim_allocations_kept", pod=pod_key, claims=sorted(unsettled))

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
