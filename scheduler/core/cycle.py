"""One scheduling cycle per pod, then an asynchronous binding cycle (kube-scheduler's shape).

    pop -> [leader?] -> pre-checks -> filter + score (one vectorized pass) -> choose GPUs
        -> assume in cache -> start binding task -> next pod
    binding task: [leader?] -> [node still there?] -> [PreBind] -> POST binding -> Scheduled
                  event; every exit, cancellation included, settles the pod: confirmed bound,
                  or forgotten and requeued (unless gone or bound by someone else), or, its
                  answer lost, kept assumed and read back (`scheduler.core.binding_cycle`)

    no node fits: FailedScheduling event + PodScheduled=False (reason Unschedulable) -> the pod
                  waits in the unschedulable pool until a cluster event may have made room
                  (so does a pod with invalid fields, or one using a field the scheduler does
                  not implement: `scheduler.model.unsupported`)

    gang member (spec.schedulingGroup): the whole gang in one cycle (`_schedule_gang` in
                  `scheduler.core.gang_cycle`, placing with `scheduler.gangs.planning`): at
                  least minCount members bound, or none
    gated pod (spec.schedulingGates): never queued (`PodHandler`); `pod_gated` patches
                  PodScheduled=False, reason SchedulingGated, once per pod

Every failure path gives back what was assumed, so the cache never holds a pod that the API
server did not bind. The cycle itself is synchronous up to the assume: no other coroutine can
change the cache between filtering and assuming.

`Scheduler` stacks three layers, one module each: `BindingCycle` (binding tasks, the pod's
Events and PodScheduled condition, the background tasks), `GangCycle` (one cycle per gang) and,
here, the loop and the cycle of one pod.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import structlog

from scheduler.core.gang_cycle import GangCycle, GangPostFilter
from scheduler.core.placement import Placement, place
from scheduler.core.queue import QueueClosed, QueuedPod, SchedulingQueue
from scheduler.framework.runtime import NO_NODE, Evaluation, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.tracker import GangTracker
from scheduler.kube.claims import ClaimWriteError
from scheduler.kube.extended_claims import discard_extended_claim
from scheduler.model.claims import ResourceClaim
from scheduler.model.fields import sorted_errors
from scheduler.model.objects import PodInfo
from scheduler.model.unsupported import NAME as UNSUPPORTED
from scheduler.model.unsupported import unsupported_message
from scheduler.plugins.dynamic_resources import NAME as DYNAMIC_RESOURCES
from scheduler.plugins.dynamic_resources import (
    STALE_EXTENDED_CLAIM,
    DynamicResourcesError,
    assume_claims,
    plan_claims,
)
from scheduler.plugins.dynamic_resources import pre_filter as claims_pre_filter
from scheduler.plugins.extended_resources import gpus_delegated
from scheduler.plugins.nvlink import NAME as NVLINK
from scheduler.plugins.volume_binding import NAME as VOLUME_BINDING
from scheduler.plugins.volume_binding import assume_volumes, plan_volumes, pre_filter
from scheduler.state.context import SchedulerContext

log = structlog.get_logger("gpu-scheduler.core.cycle")


def larger_than_any_node(pod: PodInfo, snapshot: Snapshot) -> str:
    """A message when the pod asks for more GPUs than any node has at all ("" otherwise): no
    eviction or scheduling can ever help, so the message says which request is too big."""
    if pod.gpus == 0 or snapshot.node_count == 0:
        return ""
    largest = int(snapshot.gpu_total[snapshot.valid].max())
    if pod.gpus > largest and gpus_delegated(pod, snapshot.cache.dra):
        largest = max(largest, most_dra_devices(snapshot))
    if pod.gpus <= largest:
        return ""
    return (
        f"0/{snapshot.node_count} nodes are available: the pod requests {pod.gpus} "
        f"nvidia.com/gpu (spec.containers[*].resources.limits) and the largest node has "
        f"{largest}."
    )


def most_dra_devices(snapshot: Snapshot) -> int:
    """The most devices any node without GPU allocatable sees in its DRA pools (an upper bound
    of the GPUs a DeviceClass could serve it: devices of every class count)."""
    store = snapshot.cache.dra
    found = 0
    for row in np.flatnonzero(snapshot.valid & (snapshot.gpu_total == 0)):
        node = snapshot.cache.nodes[snapshot.names[row]]
        pools = store.pools_for(node.name, node.labels)
        found = max(found, sum(len(pool.devices) for pool in pools))
    return found


class PostFilter(Protocol):
    """What runs when no node fits (reclaim): see `scheduler.postfilter.reclaim.Reclaimer`."""

    @property
    def enabled(self) -> bool: ...

    def cooling_down(self, pod_key: str) -> bool: ...

    async def attempt(self, pod: PodInfo) -> str | None: ...


@dataclass(frozen=True)
class PostFilters:
    """What runs when nothing fits: for one pod, and for a gang (None: nothing)."""

    pod: PostFilter | None = None
    gang: GangPostFilter | None = None


class Scheduler(GangCycle):
    """The scheduling loop and its binding tasks."""

    def __init__(
        self,
        context: SchedulerContext,
        queue: SchedulingQueue[PodInfo],
        framework: Framework,
        post_filters: PostFilters = PostFilters(),
        gangs: GangTracker | None = None,
    ) -> None:
        """Pods popped from `queue` are evaluated with `framework` against `context.cache` and
        bound through `context.api_client` as `context.settings.binding` says; `post_filters`
        run when nothing fits; `gangs` (None: no gang cycles) tracks the PodGroups."""
        super().__init__(context, queue, framework, gangs, post_filters.gang)
        self.scheduler_name = context.scheduler_name
        self.post_filter = post_filters.pod

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
            # `pop` does not suspend while pods are queued: let the binding tasks (their
            # writes have timeouts) and the informers run between two cycles of a burst.
            await asyncio.sleep(0)

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
        claim_problem, _ = claims_pre_filter(pod, self.cache.dra)
        if claim_problem:
            message = f"0/{snapshot.node_count} nodes are available: {claim_problem}."
            self._unschedulable(queued, message, (DYNAMIC_RESOURCES,))
            if claim_problem == STALE_EXTENDED_CLAIM:
                self._discard_stale_claim(pod)
            return
        too_big = larger_than_any_node(pod, snapshot)
        if too_big:
            self._unschedulable(queued, too_big, ("NodeResourcesFit",))
            return
        with self.cache.released(pod.key):  # room reclaimed for this pod is its own
            try:
                evaluation = self.framework.evaluate(pod, snapshot)
            except DynamicResourcesError as error:
                self._attempt_failed(
                    queued, f'running Filter plugin "{DYNAMIC_RESOURCES}": {error}'
                )
                return
            if evaluation.chosen == NO_NODE:
                message = evaluation.diagnosis.message(snapshot.valid)
                plugins = {r.plugin for r in evaluation.diagnosis.rejections}
                self._unschedulable(queued, message, tuple(sorted(plugins)))
                if evaluation.diagnosis.resolvable_nodes(snapshot.valid).any():
                    self._post_filter(pod)
                return
            policy = self.context.settings.sharing.time_sliced_placement
            placement = place(self.cache, pod, evaluation, policy)
            self.cache.drop_reservation(pod.key)
        self._log_decision(pod, placement, evaluation)
        volumes = plan_volumes(evaluation.state, evaluation.chosen, placement.node, pod)
        try:
            claims = plan_claims(evaluation.state, evaluation.chosen, pod)
        except DynamicResourcesError as error:
            self._attempt_failed(queued, f'running Reserve plugin "{DYNAMIC_RESOURCES}": {error}')
            return
        if claims is not None and claims.allocate:
            placement = replace(placement, devices=claims.described())
        self.cache.assume(pod, placement.node, placement.gpus)
        if volumes is not None:  # forget() takes the assumption back
            assume_volumes(self.cache.volumes, volumes)
        if claims is not None:  # so does it for the allocations
            assume_claims(self.cache.dra, claims)
        work = self._bind(queued, pod, placement, volumes, claims)
        self._start_binding(queued, work, "bind")

    # -- outcomes ------------------------------------------------------------------------------

    def _discard_stale_claim(self, pod: PodInfo) -> None:
        """Delete the extended-resource claim an earlier attempt of `pod` left (as upstream's
        PostFilter does); its deletion event brings the pod back."""
        stale = self.cache.dra.extended_claim_of(pod.uid)
        if stale is None or stale.deleting:
            return
        self._tasks.spawn(self._discard(stale, pod), name=f"discard-claim:{pod.key}")

    async def _discard(self, claim: ResourceClaim, pod: PodInfo) -> None:
        try:
            await discard_extended_claim(self.resource, claim, pod.uid, self.bind_timeout)
        except ClaimWriteError as error:  # the pod's next attempt tries again
            log.warning("stale_claim_delete_failed", pod=pod.key, claim=claim.key, error=str(error))
            return
        log.info("stale_claim_deleted", pod=pod.key, claim=claim.key)

    def _post_filter(self, pod: PodInfo) -> None:
        """Start a reclaim attempt in the background (it queries Prometheus and evicts); the pod
        is retried when the freed room shows up as pod deletions."""
        if self.post_filter is None or not self.post_filter.enabled:
            return
        if self.post_filter.cooling_down(pod.key):
            return
        self._tasks.spawn(self.post_filter.attempt(pod), name=f"post-filter:{pod.key}")

    def _log_decision(self, pod: PodInfo, placement: Placement, evaluation: Evaluation) -> None:
        scores = evaluation.state.data.get(NVLINK)
        components = (  # (DRA devices: `placement.devices`)
            scores.components(evaluation.chosen) if scores is not None and placement.gpus else {}
        )
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
