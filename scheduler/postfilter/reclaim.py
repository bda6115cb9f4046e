"""The PostFilter: when a pod fits nowhere, free GPUs held by measurably idle pods, then (when
that made no room) preempt pods of lower priority. `Reclaimer` is its entry point: it keeps the
cooldowns and runs one attempt through the modules that do each step.

One attempt for a pending pod (the preemptor), never two within `cooldownSeconds`:

1. Re-run the filters; only nodes rejected solely for reasons eviction can fix are candidates
   (`scheduler.postfilter.reclaim_plans`).
2. On those nodes, the pods whose PriorityClass policy makes them eligible (see
   `reclaim.policy.victim_eligibility`). None: skip.
3. One Prometheus query for all of them (`reclaim.prometheus`), then the idle verdict
   (`reclaim.usage.idle_verdict`), in `scheduler.postfilter.usage`. Prometheus down, slow,
   erroring or silent: skip, no eviction. One query per distinct idle window: a failed window
   leaves only its own pods unmeasured.
4. Per node, the fewest idle victims that let the preemptor pass every filter there, including
   NVLink (its GPUs fit in one domain when the node's domains allow it) and MIG profiles
   (`reclaim.policy.choose_victims` with a what-if of the cache); the best node by
   `reclaim.policy.best_node` (`scheduler.postfilter.reclaim_plans`). PodDisruptionBudgets
   (`scheduler.victims.pdb.PdbStore`) count as in kube-scheduler's preemption: victims whose
   eviction a budget forbids now are taken last and given back first, and nodes whose set
   violates fewer budgets come first.
5. dry-run: report "would evict" events and stop. enforce, node by node in that order
   (`scheduler.postfilter.enforcement`): re-validate the plan (the preemptor is still pending
   with the same UID and unbound, every victim is still there with the same UID, and the
   preemptor still fits once they are gone; a stale plan stops the attempt), reserve the room in
   the cache (no other pod can take it while the victims terminate), set
   `status.nominatedNodeName`, and evict through the Eviction API, budget-guarded victims first.
   A 429 (PodDisruptionBudget) fails that node's set: the reservation is dropped and the next
   node is tried; 404 means the victim is already gone.
   A pod Kueue admitted is not evicted: its Workload is deactivated (`spec.active: false`,
   `scheduler.postfilter.kueue_takeback`), so Kueue suspends its job and releases the quota;
   such a victim counts only when every pod of its Workload is idle (`scheduler.victims.kueue`),
   its Workload goes first, and one that cannot be found or patched drops the node's set with an
   Event on the victim (docs/kueue.md).
   When this step made no room (off, nothing idle enough, no fitting set, refused, dry-run),
   priority preemption follows, through the same enforcement (`scheduler.postfilter.preemption`;
   order and semantics in docs/reclaim.md).
6. The next cycle of the preemptor tries the nominated node first
   (`scheduler.postfilter.nominated_node.NominatedNode`, a Narrow plugin, as kube-scheduler
   evaluates the nominated node first): when it fits there, it goes there.

Events (`scheduler.postfilter.reclaim_events`): on the preemptor ("reclaiming 2 GPUs on node X
from 1 idle pod", with a warning when a budget may refuse), on each victim ("evicted: GPU usage
1.8 % < 10 % over 3600 s; reclaimed for a pod of priority 10000" — never the preemptor's name,
whose namespace may be private), and when an attempt is skipped, why.

Memory: cooldowns (here), nominations and the preemptors' latest views
(`scheduler.postfilter.preemptors`) are pruned when the pod is deleted
(`scheduler.postfilter.pod_watch.PodWatch`), when they expire, and are bounded
(`MAX_TRACKED_PODS`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import structlog

from scheduler.framework.runtime import Framework
from scheduler.gangs.tracker import GangTracker
from scheduler.kube.eviction import EvictionResult
from scheduler.model.objects import PodInfo
from scheduler.postfilter.enforcement import Enforcer
from scheduler.postfilter.preemption import PriorityPreemption
from scheduler.postfilter.preemptors import MAX_TRACKED_PODS, Preemptors
from scheduler.postfilter.reclaim_events import ReclaimReporter, ReclaimStats
from scheduler.postfilter.reclaim_plans import ReclaimPlanner
from scheduler.postfilter.reclaim_policies import PolicyStore
from scheduler.postfilter.usage import UsageMeter, UsageSource
from scheduler.state.context import SchedulerContext
from scheduler.victims.candidates import Victim, mate_nodes, victim_gangs
from scheduler.victims.pdb import PdbStore

log = structlog.get_logger("gpu-scheduler.reclaim")

MODES = ("off", "dry-run", "enforce")


def _key_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


class Reclaimer:
    """Runs reclaim attempts for unschedulable pods (see the module docstring)."""

    def __init__(
        self,
        context: SchedulerContext,
        framework: Framework,
        policies: PolicyStore,
        usage: UsageSource | None,
        pdbs: PdbStore | None = None,
    ) -> None:
        """`settings.reclaim` and `settings.preemption`, the cache, API client, recorder, clocks
        and `is_leader` come from `context`; `framework` runs the filters of every what-if,
        `policies` are the PriorityClasses' reclaim policies, `usage` measures GPU usage (None:
        idle reclaim skips every attempt) and `pdbs` the PodDisruptionBudgets (a new store when
        not given; the daemon's "pdbs" informer fills it)."""
        self.context = context
        self.settings = context.settings.reclaim
        self.framework = framework
        self.policies = policies
        self.usage = usage
        self.pdbs = pdbs if pdbs is not None else PdbStore()
        self.stats = ReclaimStats()
        self._last_attempt: OrderedDict[str, float] = OrderedDict()
        """Pod key -> monotonic time of its latest attempt, oldest first."""
        self.preemptors = Preemptors(context)
        """Nominations and the latest informer views of the preemptors."""
        self.lock = asyncio.Lock()
        self.planner = ReclaimPlanner(context, framework, policies, self.pdbs)
        self.preemption = PriorityPreemption(
            context, self.pdbs, self.planner.fits_without, self.nominated_node
        )
        """The second step, when idle reclaim made no room (on unless `preemption.enabled` is
        false)."""
        self.reporter = ReclaimReporter(
            self.settings, context.recorder, self.stats, self.preemption
        )
        self.meter = UsageMeter(self.settings, usage, self.reporter) if usage is not None else None
        self.enforcer = Enforcer(context, self.preemptors, self.reporter, self.planner.fits_without)

    @property
    def gangs(self) -> GangTracker | None:
        """The gangs victims may belong to (both steps weigh a victim with its gang,
        `scheduler.victims.gangs`); None: every victim stands alone."""
        return self.preemption.gangs

    @gangs.setter
    def gangs(self, tracker: GangTracker | None) -> None:
        self.preemption.gangs = tracker

    @property
    def enabled(self) -> bool:
        return self.settings.mode != "off" or self.preemption.enabled

    @property
    def last_eviction_s(self) -> float:
        """Duration of the latest Eviction API call (for the latency benchmark)."""
        return self.stats.last_eviction_s

    # -- cooldowns -----------------------------------------------------------------------------

    def cooling_down(self, pod_key: str) -> bool:
        last = self._last_attempt.get(pod_key)
        return last is not None and self.context.clock() - last < self.settings.cooldown_seconds

    def _prune(self) -> None:
        """Drop expired cooldowns and nominations; leave room for one more under
        MAX_TRACKED_PODS (the oldest go first)."""
        now = self.context.clock()
        cooldown = self.settings.cooldown_seconds
        while self._last_attempt:
            key, at = next(iter(self._last_attempt.items()))
            if now - at < cooldown and len(self._last_attempt) < MAX_TRACKED_PODS:
                break
            del self._last_attempt[key]
        self.preemptors.prune()

    def begin_attempt(self, key: str) -> bool:
        """Start an attempt for `key` (a pod, or a gang's unit key): False while its cooldown
        lasts; otherwise the attempt is recorded (the cooldown restarts) and counted."""
        self._prune()
        if self.cooling_down(key):
            return False
        self._last_attempt.pop(key, None)
        self._last_attempt[key] = self.context.clock()
        self.stats.attempts += 1
        return True

    # -- what the informers tell ---------------------------------------------------------------

    def pod_seen(self, obj: Mapping[str, Any], parsed: PodInfo | None = None) -> None:
        """A pod was added or changed (`PodWatch`; `parsed`: the `PodInfo` of `obj` when the
        event's handler already parsed it): refresh the view of a tracked preemptor; a bound
        preemptor no longer needs its nomination."""
        self.preemptors.seen(_key_of(obj), obj, parsed)

    def pod_gone(self, obj: Mapping[str, Any]) -> None:
        """A pod was deleted (`PodWatch`): forget its cooldown and nomination."""
        key = _key_of(obj)
        self._last_attempt.pop(key, None)
        self.preemptors.gone(key)

    # -- the steps, for the gang PostFilter ------------------------------------------------------

    def nominated_node(self, pod: PodInfo) -> str | None:
        """The node reclaim made room on for `pod` (same UID), while its reservation lasts."""
        return self.preemptors.nominated_node(pod)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Reserve the room made on `node` for `pod` (this UID) for `reservation_seconds`."""
        self.preemptors.nominate(pod, node)

    def candidate_nodes(self, pod: PodInfo) -> tuple[list[str], str] | None:
        """The nodes rejected only for reasons removing pods can fix, in snapshot order, and
        the failure message; None when the pod fits somewhere now."""
        return self.planner.candidate_nodes(pod)

    def eligible(self, pod: PodInfo, nodes: list[str]) -> list[Victim]:
        """The pods on `nodes` whose PriorityClass policy lets `pod` reclaim them."""
        return self.planner.eligible(pod, nodes)

    async def measure(self, pod: PodInfo, victims: list[Victim]) -> list[Victim] | None:
        """The victims with their verdicts, one Prometheus query per idle window
        (`scheduler.postfilter.usage.UsageMeter.measure`); only with a usage source."""
        assert self.meter is not None
        return await self.meter.measure(pod, victims)

    async def evict(self, victim: Victim) -> tuple[EvictionResult, str]:
        """One Eviction of `victim` (by its UID), timed (`last_eviction_s`) and counted."""
        return await self.enforcer.evict(victim)

    # -- one attempt -----------------------------------------------------------------------------

    async def attempt(self, pod: PodInfo) -> str | None:
        """One PostFilter attempt for `pod`: idle reclaim, then (when that made no room)
        priority preemption; returns the node room was made (or, for reclaim in dry-run, would
        be made) on, or None. Never raises for API or Prometheus trouble: it skips."""
        if not self.enabled:
            return None
        if not self.begin_attempt(pod.key):
            self.reporter.skip(pod, "cooldown", None)
            return None
        async with self.lock:
            with self.preemptors.watching(pod):
                try:
                    return await self._attempt(pod)
                except Exception:
                    log.exception("reclaim_attempt_failed", pod=pod.key)
                    note = "reclaim skipped: internal error (see log)"
                    self.reporter.skip(pod, "internal_error", note)
                    return None

    async def _attempt(self, pod: PodInfo) -> str | None:
        found = self.candidate_nodes(pod)
        if found is None:
            return None
        nodes, fit_message = found
        node = None
        if self.settings.mode != "off":
            node = await self._reclaim(pod, nodes)
            if node is not None and self.settings.mode == "enforce":
                return node  # idle victims made room: nobody busy is preempted
        if not self.preemption.enabled or self.preemptors.stale(pod) is not None:
            return node
        plans = await self.preemption.plans(pod, nodes, fit_message)
        if not plans:
            return node
        return await self.enforcer.enforce(pod, plans, self.gangs)

    async def _reclaim(self, pod: PodInfo, nodes: list[str]) -> str | None:
        """The first step: idle victims (see the module docstring)."""
        cache = self.context.cache
        victims = self.eligible(pod, nodes)
        gangs = victim_gangs(cache, self.gangs, (v.pod for v in victims))
        mates = mate_nodes(cache, gangs) - set(nodes)
        if mates:  # a gang evicted only whole: its members elsewhere must be eligible too
            victims = self.eligible(pod, [*nodes, *sorted(mates)])
        if not victims:
            self.reporter.skip(pod, "no_eligible_pods", None)
            return None
        if self.meter is None:
            note = "reclaim skipped: no Prometheus set"
            self.reporter.skip(pod, "prometheus_not_configured", note)
            return None
        measured = await self.meter.measure(pod, victims)
        if measured is None:
            return None
        idle = [v for v in measured if v.verdict is not None and v.verdict.idle]
        for victim in measured:
            assert victim.verdict is not None
            log.info(
                "reclaim_verdict",
                preemptor=pod.key,
                pod=victim.pod.key,
                idle=victim.verdict.idle,
                usage_pct=victim.verdict.usage_pct,
                threshold_pct=victim.threshold_pct,
                window_s=victim.window_s,
                reason=victim.verdict.reason,
            )
        idle = self.planner.whole_workloads(pod, idle)
        if not idle:
            self.reporter.skip(pod, "no_idle_pods", None)
            return None
        plans = self.planner.plans(pod, idle, self.gangs)
        if not plans:
            self.reporter.skip(pod, "no_fitting_victim_set", None)
            return None
        if self.settings.mode == "dry-run":
            plan = plans[0]
            self.reporter.report(pod, plan, dry_run=True)
            self.stats.evictions["dry-run"] += len(plan.victims)
            return plan.node
        return await self.enforcer.enforce(pod, plans, self.gangs)
