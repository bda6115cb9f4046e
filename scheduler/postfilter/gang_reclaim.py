"""The gang PostFilter: when a gang's plan fails, one plan that makes room for the whole gang.

One attempt per gang, never two within the reclaim `cooldownSeconds`; none while a member's
template claim is not created yet (no eviction could help it, and the attempt would start the
cooldown):

1. Candidate nodes: every node some pending member was rejected on only for reasons that
   removing pods can fix (as for a single pod). None: refused.
2. Idle reclaim first: the pods on those nodes whose PriorityClass policy lets a pod of the
   gang's priority reclaim them (`reclaim.policy.victim_eligibility`), measured idle through
   Prometheus (`Reclaimer.measure`, fail-safe: unmeasured is not idle).
3. When that makes no room: priority preemption, the pods of strictly lower priority than the
   gang. The gang's priority is its PodGroup's `spec.priority` (when set from a PriorityClass
   or not 0), else its lowest member's (`scheduler.gangs.planning.GangRequest.priority`). A member
   with `preemptionPolicy: Never` keeps the gang from preempting.
4. Victims are weighed with their own gangs (`scheduler.victims.gangs.victim_units`): a victim
   gang with disruptionMode all, or one that would drop below its minCount, is one unit of all
   its members, taken only if every member is eligible for the step.
5. The plan is checked with `scheduler.gangs.planning.plan_gang` on a what-if of the cache without
   the victims: it is executed only when at least minCount members (counting those already
   bound) then fit, with the fewest victims (remove all, then give back most important first).
   Otherwise nothing is evicted: the PodGroup gets a FailedScheduling event saying why, the
   members a ReclaimSkipped event with the same words.
6. Enforce (mode enforce for idle victims; preemption always enforces): reserve every member's
   placement in the cache and set its `status.nominatedNodeName` (the next gang cycle sees the
   reservations as its own and prefers the nominated nodes), set DisruptionTarget
   (PreemptionByScheduler) on every v1beta1 PodGroup losing members, then evict every victim
   through the Eviction API, budget-guarded ones first. Before each eviction the plan is
   re-validated (every victim still there with the same UID, the gang still fits without them);
   a stale plan or a refused eviction stops the attempt and gives the reservations back.
   In dry-run, idle victims are only reported ("would reclaim").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace

import structlog
from kubernetes_asyncio import client

from scheduler.gangs.planning import GangRequest, MemberPlacement, plan_gang
from scheduler.gangs.tracker import GangTracker, PodGroupInfo, gang_key
from scheduler.kube.apierrors import APIError
from scheduler.kube.events import NORMAL, WARNING, ObjectRef
from scheduler.kube.eviction import EvictionResult, nominate
from scheduler.model.objects import PodInfo
from scheduler.model.preemption_policy import PREEMPT_NEVER
from scheduler.postfilter.reclaim import Reclaimer
from scheduler.state.context import SchedulerContext
from scheduler.state.gpu_holdings import GpuHoldings
from scheduler.victims.candidates import (
    PREEMPTION,
    RECLAIM,
    Victim,
    mark_disruption_targets,
    may_make_room,
    victim_gangs,
    victim_pod,
)
from scheduler.victims.gangs import (
    GANG_UNIT_PREFIX,
    Unit,
    choose_units,
    victim_units,
)
from scheduler.victims.preemption import NEVER_MESSAGE, Candidate, split_by_budget

log = structlog.get_logger("gpu-scheduler.gang-reclaim")

V1BETA1 = "scheduling.k8s.io/v1beta1"
MAX_MEMBER_EVENTS = 16
"""At most this many member pods get the gang's PostFilter event (the PodGroup always does)."""


@dataclass(frozen=True)
class GangVictims:
    """The victims one step chose, with the units they form."""

    step: str
    victims: tuple[Victim, ...]
    units: tuple[Unit, ...]


def group_ref(group: PodGroupInfo) -> ObjectRef:
    return ObjectRef("PodGroup", group.name, group.namespace, group.uid, api_version=group.source)


def _waits_for_claims(pod: PodInfo) -> bool:
    """Whether a claim the pod's template makes is not created yet: its verdict on every node
    would be "ResourceClaim not created yet", which no eviction fixes."""
    return pod.resource_claims is not None and bool(pod.resource_claims.waiting)


class GangReclaimer:
    """Runs gang PostFilter attempts (see the module docstring), through the single-pod
    Reclaimer's settings, policies, measurements, cooldowns and nominations."""

    def __init__(self, context: SchedulerContext, reclaimer: Reclaimer, gangs: GangTracker) -> None:
        """The cache, API client, recorder, clock and `is_leader` come from `context`; every
        single-pod step, cooldown and nomination is `reclaimer`'s; `gangs` holds the PodGroups and
        their members."""
        self.cache = context.cache
        self.gpu_drivers = context.settings.dra.gpu_drivers
        self.recorder = context.recorder
        self.clock = context.clock
        self.is_leader = context.is_leader
        self.reclaimer = reclaimer
        self.gangs = gangs
        self.custom = client.CustomObjectsApi(context.api_client)
        self.core = client.CoreV1Api(context.api_client)
        self.outcomes: dict[str, int] = {}
        """Attempts by outcome: evicted, dry_run, refused, stale, blocked, cooldown, error, and
        waiting (not attempted: a member's claim is not created yet)."""

    @property
    def enabled(self) -> bool:
        return self.reclaimer.enabled

    def cooling_down(self, gang: str) -> bool:
        return self.reclaimer.cooling_down(GANG_UNIT_PREFIX + gang)

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    async def attempt(self, request: GangRequest) -> bool:
        """One attempt; True when victims were evicted for the gang. Never raises for API or
        Prometheus trouble, nor for a bug (logged)."""
        r = self.reclaimer
        if not self.enabled or not request.members:
            return False
        waiting = [m.key for m in request.members if _waits_for_claims(m)]
        if waiting:  # not an attempt (no cooldown): the claim's creation retries the gang
            log.info("gang_reclaim_waits_for_claims", gang=request.group.key, members=waiting)
            self._count("waiting")
            return False
        key = GANG_UNIT_PREFIX + request.group.key
        if not r.begin_attempt(key):
            self._count("cooldown")
            return False
        async with r.lock:
            try:
                return await self._attempt(request)
            except Exception:
                log.exception("gang_reclaim_failed", gang=request.group.key)
                self._count("error")
                return False

    # -- planning --------------------------------------------------------------------------------

    async def _attempt(self, request: GangRequest) -> bool:
        r = self.reclaimer
        preemptor = replace(request.members[0], priority=request.priority)
        nodes = self.candidate_nodes(request)
        if not nodes:
            self._refuse(request, "no node would fit a member if pods were removed from it")
            return False
        reasons: list[str] = []
        chosen: GangVictims | None = None
        would = False
        if r.settings.mode != "off":
            chosen = await self._idle_step(request, preemptor, nodes, reasons)
            if chosen is not None and r.settings.mode == "dry-run":
                self._report(request, chosen, dry_run=True)
                self._count("dry_run")
                chosen, would = None, True
        if chosen is None and r.preemption.enabled:
            chosen = self._preemption_step(request, preemptor, nodes, reasons)
        if chosen is None:
            if not would:  # a dry-run plan was reported: it did fit
                self._refuse(request, "; ".join(reasons) or "no victims found")
            return False
        return await self._enforce(request, chosen)

    def candidate_nodes(self, request: GangRequest) -> list[str]:
        """Nodes some member was rejected on only for reasons eviction can fix, in order."""
        r = self.reclaimer
        found: dict[str, None] = {}
        with self._released(request.members):
            for member in request.members:
                located = r.candidate_nodes(member)
                if located is not None:
                    for node in located[0]:
                        found[node] = None
                else:  # this member fits now: any node may hold the others
                    for node in self.cache.nodes:
                        found[node] = None
        return list(found)

    def _released(self, members: Iterable[PodInfo]) -> ExitStack:
        """A context in which the members' own reservations do not count."""
        stack = ExitStack()
        for member in members:
            stack.enter_context(self.cache.released(member.key))
        return stack

    def _with_gang_mates(self, nodes: Sequence[str], victims: Iterable[PodInfo]) -> list[str]:
        """`nodes` and the nodes holding members of the victims' gangs."""
        found = dict.fromkeys(nodes)
        cache = self.cache
        for victim in victims:
            gang = gang_key(victim)
            if not gang:
                continue
            for key in self.gangs.members(gang):
                state = cache.pods.get(key)
                if state is not None:
                    found[state.node] = None
        return list(found)

    def _choose(
        self, request: GangRequest, step: str, eligible: list[Victim], reasons: list[str]
    ) -> GangVictims | None:
        by_key = {v.pod.key: v for v in eligible}
        pods = {v.pod.key: victim_pod(v) for v in eligible}
        gangs = victim_gangs(self.cache, self.gangs, (v.pod for v in eligible))
        units, excluded = victim_units(pods.values(), gangs)
        reasons.extend(excluded)

        def fits(removed: frozenset[str]) -> bool:
            return self._fits(request, removed)

        chosen = choose_units(units, fits, gangs, pods)
        what = "idle pods" if step == RECLAIM else "pods of lower priority"
        if chosen is None:
            reasons.append(
                f"evicting all {len(pods)} {what} on the candidate nodes does not let minCount "
                f"{request.group.min_count} members fit"
                if pods
                else f"no {what} may be evicted on the candidate nodes"
            )
            return None
        if not chosen:
            reasons.append("the gang fits without evicting anyone")
            return None
        victims = tuple(by_key[k] for unit in chosen for k in unit.pods)
        return GangVictims(step, victims, chosen)

    async def _idle_step(
        self, request: GangRequest, preemptor: PodInfo, nodes: list[str], reasons: list[str]
    ) -> GangVictims | None:
        r = self.reclaimer

        def others(victims: list[Victim]) -> list[Victim]:  # never the gang's own members
            return [v for v in victims if gang_key(v.pod) != request.group.key]

        first = others(r.eligible(preemptor, nodes))
        wider = self._with_gang_mates(nodes, (v.pod for v in first))
        eligible = others(r.eligible(preemptor, wider)) if len(wider) > len(nodes) else first
        if not eligible:
            reasons.append("idle reclaim: no pod's PriorityClass lets the gang reclaim it")
            return None
        if r.usage is None:
            reasons.append("idle reclaim: no Prometheus set")
            return None
        measured = await r.measure(preemptor, eligible)
        if measured is None:
            reasons.append("idle reclaim: GPU usage could not be measured")
            return None
        idle = [v for v in measured if v.verdict is not None and v.verdict.idle]
        for victim in measured:
            assert victim.verdict is not None
            log.info(
                "gang_reclaim_verdict",
                gang=request.group.key,
                pod=victim.pod.key,
                idle=victim.verdict.idle,
                usage_pct=victim.verdict.usage_pct,
                reason=victim.verdict.reason,
            )
        if not idle:
            reasons.append("idle reclaim: no eligible pod is idle")
            return None
        return self._choose(request, RECLAIM, idle, reasons)

    def _preemption_step(
        self, request: GangRequest, preemptor: PodInfo, nodes: list[str], reasons: list[str]
    ) -> GangVictims | None:
        if any(m.preemption_policy == PREEMPT_NEVER for m in request.members):
            reasons.append(f"preemption: {NEVER_MESSAGE}")
            return None
        cache = self.cache
        pdbs = self.reclaimer.pdbs
        holdings = GpuHoldings(cache, self.gpu_drivers)

        def lower(on: Iterable[str]) -> list[Victim]:
            found: list[Victim] = []
            for node in on:
                for state in cache.iter_pods_on(node):
                    other = state.info
                    if not may_make_room(state, preemptor) or other.priority >= preemptor.priority:
                        continue
                    if gang_key(other) == request.group.key:
                        continue
                    budgets = pdbs.budgets_of(other.namespace, other.name, other.labels)
                    count = holdings.of(other, node)
                    found.append(Victim(other, node, state.gpus, budgets=budgets, gpu_count=count))
            return found

        first = lower(nodes)
        wider = self._with_gang_mates(nodes, (v.pod for v in first))
        eligible = lower(wider) if len(wider) > len(nodes) else first
        self.reclaimer.preemption.outcomes["gang"] += 1
        return self._choose(request, PREEMPTION, eligible, reasons)

    def _fits(self, request: GangRequest, removed: frozenset[str]) -> bool:
        """Whether at least `need` members fit once `removed` pods are gone."""
        return self._placements(request, removed) is not None

    def _placements(
        self, request: GangRequest, removed: frozenset[str]
    ) -> list[MemberPlacement] | None:
        """Where the members would go once `removed` pods are gone (None: not `need` of them);
        nothing stays assumed."""
        r = self.reclaimer
        with self._released(request.members), self.cache.without(removed):
            plan = plan_gang(
                self.cache,
                r.framework,
                list(request.members),
                request.need,
                request.group.topology_key,
                set(request.pinned),
            )
            for placed in plan.placed:
                self.cache.forget(placed.pod.key)
        return plan.placed if plan.fits else None

    # -- enforcing -------------------------------------------------------------------------------

    def _stale(
        self, request: GangRequest, left: Sequence[Victim], removed: frozenset[str]
    ) -> str | None:
        """Why the plan no longer holds (None when it does): a member got counted on a node, a
        victim still to evict is gone or changed, or the gang no longer fits without `removed`."""
        cache = self.cache
        for member in request.members:
            if member.key in cache.pods:
                return f"member {member.key} is counted on a node already"
        for victim in left:
            state = cache.pods.get(victim.pod.key)
            if state is None or state.info.uid != victim.pod.uid or state.info.terminating:
                return f"victim {victim.pod.key} is gone or changed"
        if not self._fits(request, removed):
            return "the gang no longer fits without the victims"
        return None

    def _give_back(self, request: GangRequest) -> None:
        for member in request.members:
            self.cache.drop_reservation(member.key)
            self.reclaimer.preemptors.drop(member.key)

    async def _enforce(self, request: GangRequest, chosen: GangVictims) -> bool:
        r = self.reclaimer
        if not self.is_leader():
            self._count("not_leader")
            return False
        removed = frozenset(v.pod.key for v in chosen.victims)
        placements = self._placements(request, removed)
        why = self._stale(request, chosen.victims, removed) if placements is not None else None
        if placements is None or why is not None:
            log.info("gang_reclaim_stale", gang=request.group.key, reason=why or "no placement")
            self._count("stale")
            return False
        now = self.clock()
        for placed in placements:
            self.cache.reserve(placed.pod, placed.node, placed.gpus, now)
            r.nominate(placed.pod, placed.node)
        self._report(request, chosen, dry_run=False)
        for placed in placements:
            try:
                await nominate(self.core, placed.pod.namespace, placed.pod.name, placed.node)
            except (APIError, OSError, TimeoutError) as error:
                log.warning(
                    "nominate_failed", pod=placed.pod.key, node=placed.node, error=str(error)
                )
        await self._mark_victim_groups(request, chosen)
        left = self._eviction_order(chosen.victims)
        while left:
            victim = left[0]
            why = self._stale(request, left, removed) if self.is_leader() else "not the leader"
            if why is not None:
                self._give_back(request)
                log.info("gang_reclaim_stale", gang=request.group.key, reason=why)
                self._count("stale")
                return False
            result, message = await r.evict(victim)
            log.info(
                "gang_reclaim_evict",
                step=chosen.step,
                gang=request.group.key,
                pod=victim.pod.key,
                node=victim.node,
                result=result.value,
                message=message[:200],
            )
            if result is EvictionResult.EVICTED:
                self._tell_victim(request, victim)
            elif result in (EvictionResult.BLOCKED, EvictionResult.FAILED):
                self._give_back(request)
                self._count("blocked")
                note = f"gang {request.group.name}: eviction of {victim.pod.key} refused: "
                self._event_all(request, WARNING, "ReclaimSkipped", note + message[:200])
                return False
            left = left[1:]  # EVICTED, or GONE: nothing left to evict
        self._count("evicted")
        return True

    def _eviction_order(self, victims: Sequence[Victim]) -> list[Victim]:
        """Victims a PodDisruptionBudget guards now first: if the API server refuses one,
        nothing else was evicted for nothing."""
        candidates = [Candidate(v.pod.key, v.pod.priority, None, v.budgets) for v in victims]
        violating, _ = split_by_budget(candidates, self.reclaimer.pdbs.allowed())
        guarded = {c.key for c in violating}
        return sorted(victims, key=lambda v: v.pod.key not in guarded)

    async def _mark_victim_groups(self, request: GangRequest, chosen: GangVictims) -> None:
        """DisruptionTarget (PreemptionByScheduler) on each v1beta1 PodGroup losing members."""
        step = "idle reclaim" if chosen.step == RECLAIM else "preemption"
        group = request.group
        message = f"{step}: evicted to make room for PodGroup {group.namespace}/{group.name}"
        await mark_disruption_targets(self.custom, self.gangs, chosen.victims, message)

    # -- reporting -------------------------------------------------------------------------------

    def _event_all(
        self, request: GangRequest, kind: str, reason: str, note: str, member_reason: str = ""
    ) -> None:
        """The event on the PodGroup and on (at most `MAX_MEMBER_EVENTS`) pending members,
        with `member_reason` on the members when given."""
        recorder = self.recorder
        recorder.emit(group_ref(request.group), kind, reason, "Preempting", note)
        for member in request.members[:MAX_MEMBER_EVENTS]:
            ref = ObjectRef("Pod", member.name, member.namespace, member.uid)
            recorder.emit(ref, kind, member_reason or reason, "Preempting", note)

    def _report(self, request: GangRequest, chosen: GangVictims, dry_run: bool) -> None:
        group = request.group
        gpus = sum(v.held_gpus for v in chosen.victims)
        nodes = sorted({v.node for v in chosen.victims})
        whole = sum(1 for u in chosen.units if u.whole_gang)
        if chosen.step == RECLAIM:
            verb = "would reclaim" if dry_run else "reclaiming"
            what = "idle pod(s)"
            reason = "ReclaimIdleGPUs"
        else:
            verb, what, reason = "preempting", "pod(s) of lower priority", "Preempting"
        note = (
            f"gang {group.name}: {verb} {gpus} GPUs on {len(nodes)} node(s) "
            f"({', '.join(nodes)}) from {len(chosen.victims)} {what}"
        )
        if whole:
            note += f", {whole} of them whole gang(s)"
        note += f" for minCount {group.min_count} members"
        self._event_all(request, NORMAL, reason, note)
        log.info(
            "gang_reclaim_plan",
            gang=group.key,
            step=chosen.step,
            dry_run=dry_run,
            victims=[v.pod.key for v in chosen.victims],
            units=[u.key for u in chosen.units],
            gpus=gpus,
        )

    def _tell_victim(self, request: GangRequest, victim: Victim) -> None:
        if victim.verdict is not None:
            usage = victim.verdict.usage_pct
            shown = "unknown" if usage is None else f"{usage:.1f} %"
            note = (
                f"evicted: GPU usage {shown} < {victim.threshold_pct:g} % over "
                f"{victim.window_s} s ({victim.verdict.describe()}); reclaimed for a gang of "
                f"priority {request.priority}"
            )
            reason, kind = "Reclaimed", WARNING
        else:
            note = f"Preempted by PodGroup {request.group.uid or request.group.name}"
            reason, kind = "Preempted", NORMAL
        ref = ObjectRef("Pod", victim.pod.name, victim.pod.namespace, victim.pod.uid)
        self.recorder.emit(ref, kind, reason, "Preempting", note)

    def _refuse(self, request: GangRequest, why: str) -> None:
        group = request.group
        note = (
            f"gang {group.name}: preemption: no plan lets minCount {group.min_count} members "
            f"fit, nothing evicted: {why}"
        )
        if len(note) > 1024:
            note = note[:1000] + "... (truncated)"
        self._count("refused")
        log.info("gang_reclaim_refused", gang=group.key, reason=why[:500])
        # The members' FailedScheduling says why the gang does not fit; why nothing was
        # evicted for it goes beside it, as the single-pod PostFilter's skips do.
        self._event_all(request, WARNING, "FailedScheduling", note, "ReclaimSkipped")
