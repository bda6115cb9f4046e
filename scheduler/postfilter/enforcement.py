"""The PostFilter's enforcement (`Enforcer`), shared by both steps (idle reclaim and priority
preemption): plans are tried node by node, best first.

For each node: only the leader acts; the plan is re-validated (the preemptor is still pending
with the same UID and unbound, every victim is still there with the same UID, and the preemptor
still fits once they are gone; a stale plan stops the attempt); the room is reserved in the
cache (no other pod can take it while the victims terminate); `status.nominatedNodeName` is set;
the victims' v1beta1 PodGroups get DisruptionTarget; then the victims go, Kueue victims first
(through their Workloads, `scheduler.postfilter.kueue_takeback`), then budget-guarded ones,
through the Eviction API. Before every eviction the preemptor and the room are checked again:
once the preemptor is placed on the node the other victims are spared. A 429
(PodDisruptionBudget) or a refused Workload fails that node's set: the reservation is dropped
and the next node is tried; 404 means the victim is already gone.
"""

from __future__ import annotations

import structlog
from kubernetes_asyncio import client

from scheduler.gangs.tracker import GangTracker
from scheduler.kube.apierrors import APIError
from scheduler.kube.eviction import EvictionResult, evict_pod, nominate
from scheduler.model.objects import PodInfo
from scheduler.postfilter.kueue_takeback import KueueTakeBack
from scheduler.postfilter.preemption import FitsWithout
from scheduler.postfilter.preemptors import Preemptors
from scheduler.postfilter.reclaim_events import ReclaimReporter, cut
from scheduler.state.context import SchedulerContext
from scheduler.victims.candidates import Plan, Victim, mark_disruption_targets
from topology.occupancy import choose_gpus

log = structlog.get_logger("gpu-scheduler.reclaim")


class Enforcer:
    """Carries out PostFilter plans (see the module docstring): reservations and nominations in
    `preemptors` and the cache, evictions counted in the reporter's stats."""

    def __init__(
        self,
        context: SchedulerContext,
        preemptors: Preemptors,
        reporter: ReclaimReporter,
        fits_without: FitsWithout,
    ) -> None:
        self.cache = context.cache
        self.clock = context.clock
        self.is_leader = context.is_leader
        self.core = client.CoreV1Api(context.api_client)
        self.custom = client.CustomObjectsApi(context.api_client)
        self.preemptors = preemptors
        self.reporter = reporter
        self.stats = reporter.stats
        self.fits_without = fits_without
        self.kueue = KueueTakeBack(context, reporter)

    async def evict(self, victim: Victim) -> tuple[EvictionResult, str]:
        """One Eviction of `victim` (by its UID), timed (`stats.last_eviction_s`) and counted."""
        started = self.clock()
        result, message = await evict_pod(
            self.core, victim.pod.namespace, victim.pod.name, victim.pod.uid
        )
        self.stats.last_eviction_s = self.clock() - started
        self.stats.evictions[result.value] += 1
        return result, message

    async def enforce(
        self, pod: PodInfo, plans: list[Plan], gangs: GangTracker | None
    ) -> str | None:
        """Carry out `plans` for `pod`, best first, until one made room (its node is returned)
        or one is stale (None); the victims' PodGroups are looked up in `gangs`."""
        message = ""
        for plan in plans:
            node = plan.node
            if not self.is_leader():
                self.reporter.skip(pod, "not_leader", None)
                return None
            why = self._plan_stale(pod, plan)
            if why is not None:
                self._stop_stale(pod, plan, why)
                return None
            workloads = await self.kueue.workloads(pod, plan)
            if workloads is None:
                continue  # a Kueue victim's Workload is unknown: none of this set is touched
            keys = frozenset(v.pod.key for v in plan.victims)
            with self.cache.released(pod.key), self.cache.without(keys):
                topology = self.cache.nodes[node].topology
                used = self.cache.node_gpus_used(node)
                choice = choose_gpus(topology, used, pod.gpus) if pod.gpus else None
            gpus = tuple(choice.gpus) if choice is not None else ()
            self.cache.reserve(pod, node, gpus, self.clock())
            self.preemptors.nominate(pod, node)
            try:
                await nominate(self.core, pod.namespace, pod.name, node)
            except (APIError, OSError, TimeoutError) as error:
                log.warning("nominate_failed", pod=pod.key, node=node, error=cut(str(error)))
            self.reporter.report(pod, plan, dry_run=False)
            await mark_disruption_targets(
                self.custom,
                gangs,
                plan.victims,
                f"{plan.step}: evicted to make room for pod {pod.key}",
            )
            blocked = False
            taken: set[str] = set()
            # Kueue victims first: a Workload refused leaves nothing else evicted.
            order = sorted(plan.eviction_order(), key=lambda v: v.pod.key not in workloads)
            for victim in order:
                placed = self.cache.pods.get(pod.key)
                if placed is not None and placed.node == node:
                    log.info("reclaim_preemptor_placed", preemptor=pod.key, node=node)
                    return node  # it fits already: the other victims are spared
                # Checked again before every eviction: the awaits before it (nomination, the
                # previous eviction) let the cache move on.
                why = self.preemptors.stale(pod) or self._room_gone(pod, plan)
                if why is not None:
                    self._stop_stale(pod, plan, why)
                    return None
                ref = workloads.get(victim.pod.key)
                if ref is not None:
                    result, message = await self.kueue.take_back(pod, plan, victim, ref, taken)
                    if result is EvictionResult.FAILED:
                        blocked = True
                        break
                    continue
                result, message = await self.evict(victim)
                log.info(
                    "reclaim_evict",
                    step=plan.step,
                    preemptor=pod.key,
                    pod=victim.pod.key,
                    node=node,
                    result=result.value,
                    message=cut(message),
                )
                if result is EvictionResult.EVICTED:
                    self.reporter.tell_victim(pod, victim, dry_run=False)
                elif result in (EvictionResult.BLOCKED, EvictionResult.FAILED):
                    blocked = True
                    break
            if not blocked:
                return node
            self.cache.drop_reservation(pod.key)
            self.preemptors.drop(pod.key)
            self.reporter.skip(
                pod,
                "eviction_blocked",
                f"{plan.step} on node {node} stopped: eviction refused ({cut(message)}); "
                "trying elsewhere",
            )
        return None

    def _plan_stale(self, pod: PodInfo, plan: Plan) -> str | None:
        """Why `plan` no longer holds (None when it does): the preemptor changed, a victim is
        gone or changed, or the preemptor would not fit on the node even without the victims."""
        why = self.preemptors.stale(pod)
        if why is not None:
            return why
        for victim in plan.victims:
            state = self.cache.pods.get(victim.pod.key)
            if (
                state is None
                or state.info.uid != victim.pod.uid
                or state.node != victim.node
                or state.info.terminating
            ):
                return f"victim {victim.pod.key} is gone or changed"
        return self._room_gone(pod, plan)

    def _room_gone(self, pod: PodInfo, plan: Plan) -> str | None:
        """Why the preemptor would no longer fit on the plan's node once all its victims are
        gone (None when it would): e.g. another scheduler's pod took the room meanwhile."""
        if not self.fits_without(pod, plan.node, frozenset(v.pod.key for v in plan.victims)):
            return f"the pod no longer fits on node {plan.node} without the victims"
        return None

    def _stop_stale(self, pod: PodInfo, plan: Plan, why: str) -> None:
        self.cache.drop_reservation(pod.key)
        self.preemptors.drop(pod.key)
        log.info("reclaim_plan_stale", preemptor=pod.key, node=plan.node, reason=why)
        self.reporter.skip(pod, "stale_plan", None)
