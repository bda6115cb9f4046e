"""Priority preemption, the PostFilter's second step (kube-scheduler's DefaultPreemption).

Runs only when idle reclaim (the first step, `scheduler.postfilter.reclaim`) made no room: it is
off, found no idle victims that let the pod fit, or its evictions were refused. Then:

1. A preemptor with `preemptionPolicy: Never` never preempts: it stays unschedulable, with
   kube-scheduler's words in a FailedScheduling event ("... preemption: not eligible due to
   preemptionPolicy=Never."). One whose nominated node still holds a terminating pod of lower
   priority waits for it ("not eligible due to a terminating pod on the nominated node."), so
   pods are not evicted twice for it.
2. Candidate nodes: those the filters rejected only for reasons removing pods can fix (the
   reclaim step's list: `Diagnosis.resolvable_nodes`). On each, the pods of strictly lower
   priority (not assumed, not terminating, not a reservation) are the candidates, each weighed
   with its gang (`scheduler.victims.gangs`: a gang with disruptionMode all, or one that would
   drop below minCount, is one candidate of all its members, on whatever node they run, only
   when every member has lower priority; its cost counts every member);
   `scheduler.victims.preemption.select_victims` picks the fewest, re-running every filter on a
   what-if of the cache (`fits_without`: the same filters, NVLink domains and GPU indices included).
3. Nodes in `scheduler.victims.preemption.pick_node` order; the shared enforcement
   (`scheduler.postfilter.enforcement.Enforcer`) re-validates the plan, reserves the room,
   nominates the node and evicts through the Eviction API; a 429 from a PodDisruptionBudget
   fails that node's set and the next node is tried.

kube-scheduler deletes its victims, so a PodDisruptionBudget only makes it prefer other victims
and can be violated. Here victims are evicted: the API server refuses an eviction a budget
forbids, so preemption never breaks a budget; the price is that a node whose set needs a guarded
victim is given up for the next one.

The victims' `DisruptionTarget` condition: kube-scheduler patches it (reason
`PreemptionByScheduler`) before deleting. Here the Eviction API adds it itself (reason
`EvictionByEvictionAPI`) together with the deletion; patching it first would leave a pod whose
eviction a budget then refuses marked as disrupted (Job pod-failure policies read that
condition), so it is not patched.

Events: on each victim, Normal `Preempted`: "Preempted by pod <preemptor UID> on node <node>"
(the UID only: the preemptor's namespace may be private); on the preemptor, Normal `Preempting`:
how many pods of which priorities on which node.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import datetime

import structlog

from scheduler.gangs.tracker import GangTracker, gang_key
from scheduler.kube.events import NORMAL, WARNING, ObjectRef
from scheduler.model.objects import PodInfo
from scheduler.state.context import SchedulerContext
from scheduler.state.gpu_holdings import GpuHoldings
from scheduler.victims.candidates import (
    PREEMPTION,
    Plan,
    Victim,
    mate_nodes,
    may_make_room,
    victim_gangs,
    victim_pod,
)
from scheduler.victims.gangs import Unit, broken_gangs, victim_units
from scheduler.victims.pdb import PdbStore
from scheduler.victims.preemption import (
    TERMINATING_MESSAGE,
    Candidate,
    NodeVictims,
    candidate_limit,
    enough_candidates,
    nodes_in_order,
    preemptor_not_eligible,
    select_victims,
    split_by_budget,
)

log = structlog.get_logger("gpu-scheduler.victims.preemption")

FitsWithout = Callable[[PodInfo, str, frozenset[str]], bool]
"""(preemptor, node, removed pod keys) -> whether it passes every filter there without them."""


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _candidate(unit: Unit, victims: dict[str, Victim]) -> Candidate:
    """The DefaultPreemption candidate of a unit: one pod, or a whole gang (`members`), with
    the earliest known start time among its pods."""
    starts = [s for k in unit.pods if (s := _epoch(victims[k].pod.scheduled_at)) is not None]
    members = unit.pods if unit.whole_gang else ()
    return Candidate(unit.key, unit.priority, min(starts, default=None), unit.budgets, members)


def _by_priority(victims: tuple[Victim, ...]) -> str:
    """ "2 of priority 10, 1 of priority 5": highest priority first."""
    counts = Counter(v.pod.priority for v in victims)
    return ", ".join(f"{n} of priority {p}" for p, n in sorted(counts.items(), reverse=True))


class PriorityPreemption:
    """Chooses preemption plans and writes its events; the shared enforcement carries them out
    (`scheduler.postfilter.enforcement.Enforcer`)."""

    def __init__(
        self,
        context: SchedulerContext,
        pdbs: PdbStore,
        fits_without: FitsWithout,
        nominated_node: Callable[[PodInfo], str | None],
    ) -> None:
        """`settings.preemption`, the cache and the recorder come from `context`; `fits_without`
        is the what-if every candidate set is checked with, `nominated_node` where room is being
        made for a pod already."""
        self.settings = context.settings.preemption
        self.gpu_drivers = context.settings.dra.gpu_drivers
        self.cache = context.cache
        self.pdbs = pdbs
        self.recorder = context.recorder
        self.fits_without = fits_without
        self.nominated_node = nominated_node
        self.outcomes: Counter[str] = Counter()
        """Preemption steps by outcome: planned, or why not (never, wait, no_victims)."""
        self.gangs: GangTracker | None = None
        """The gangs victims may belong to (a victim is weighed with its gang)."""
        self.on_attempt: Callable[[int], None] = lambda victims: None
        """Told of every attempt that searched for victims: the best plan's victim count (0
        when none), as kube-scheduler's `scheduler_preemption_attempts_total` and
        `scheduler_preemption_victims` count them."""

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    async def plans(self, pod: PodInfo, nodes: list[str], fit_message: str) -> list[Plan]:
        """Preemption plans for `pod` over the candidate `nodes` (in the snapshot's order), best
        first; empty when it may not preempt or nothing helps (the reason is reported). Stops
        after `candidate_limit` candidate nodes, as kube-scheduler does, and yields to the event
        loop between nodes (every what-if runs all filters; the plans are re-validated before
        anything is evicted, so a cache that moved on meanwhile is caught there)."""
        why = preemptor_not_eligible(pod.preemption_policy)
        if why is None:
            why = self._terminating_on_nominated(pod)
        if why is not None:
            reason = "never" if pod.preemption_policy == "Never" else "wait"
            self._outcome(pod, reason)
            note = f"{fit_message} preemption: {why}".lstrip()
            ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
            self.recorder.emit(ref, WARNING, "FailedScheduling", "Scheduling", note)
            return []
        allowed = self.pdbs.allowed()
        per_node: dict[str, NodeVictims] = {}
        found: dict[str, dict[str, Victim]] = {}
        limit = candidate_limit(len(nodes))
        holdings = GpuHoldings(self.cache, self.gpu_drivers)  # claims read once per attempt
        for node in nodes:
            if enough_candidates(per_node, limit):
                break
            await asyncio.sleep(0)
            if node not in self.cache.row_of:
                continue
            victims = self._lower_priority(pod, node, holdings)
            if not victims:
                continue
            gangs = victim_gangs(self.cache, self.gangs, (v.pod for v in victims.values()))
            for other in sorted(mate_nodes(self.cache, gangs) - {node}):
                for key, mate in self._lower_priority(pod, other, holdings).items():
                    if gang_key(mate.pod) in gangs:
                        victims[key] = mate
            units, _ = victim_units((victim_pod(v) for v in victims.values()), gangs)
            unit_of = {u.key: u for u in units}
            candidates = [_candidate(u, victims) for u in units]

            def fits(removed: frozenset[str], node: str = node) -> bool:
                return self.fits_without(pod, node, removed)

            chosen = select_victims(pod.priority, candidates, fits, allowed)
            if chosen is None:
                continue
            broken = broken_gangs([unit_of[c.key] for c in chosen.victims], gangs)
            if broken:
                log.info("preemption_set_breaks_gang", preemptor=pod.key, node=node, gangs=broken)
                continue
            per_node[node] = chosen
            found[node] = victims
        plans: list[Plan] = []
        for node in nodes_in_order(per_node):
            chosen = per_node[node]
            violating, _ = split_by_budget(list(chosen.victims), allowed)
            plans.append(
                Plan(
                    node,
                    tuple(found[node][k] for c in chosen.victims for k in c.pods),
                    frozenset(k for c in violating for k in c.pods),
                    step=PREEMPTION,
                )
            )
        self._outcome(pod, "planned" if plans else "no_victims", nodes=len(nodes))
        self.on_attempt(len(plans[0].victims) if plans else 0)
        return plans

    def _outcome(self, pod: PodInfo, outcome: str, **fields: int) -> None:
        self.outcomes[outcome] += 1
        log.info("preemption_outcome", preemptor=pod.key, outcome=outcome, **fields)

    def _lower_priority(self, pod: PodInfo, node: str, holdings: GpuHoldings) -> dict[str, Victim]:
        """The pods on `node` it may preempt, by key: strictly lower priority, counted (not a
        reservation, not assumed by a binding in flight) and not already terminating; each with
        the GPUs it holds by `holdings`."""
        found: dict[str, Victim] = {}
        for state in self.cache.iter_pods_on(node):
            other = state.info
            if not may_make_room(state, pod) or other.priority >= pod.priority:
                continue
            budgets = self.pdbs.budgets_of(other.namespace, other.name, other.labels)
            count = holdings.of(other, node)
            found[other.key] = Victim(other, node, state.gpus, budgets=budgets, gpu_count=count)
        return found

    def _terminating_on_nominated(self, pod: PodInfo) -> str | None:
        """kube-scheduler's second eligibility rule: while a pod of lower priority is still
        terminating on the node the preemptor was nominated to, it does not preempt again."""
        node = self.nominated_node(pod)
        if node is None:
            return None
        for state in self.cache.iter_pods_on(node):
            if state.info.terminating and state.info.priority < pod.priority:
                return TERMINATING_MESSAGE
        return None

    # -- events ----------------------------------------------------------------------------------

    def report(self, pod: PodInfo, plan: Plan) -> None:
        """The preemptor's event: how many pods of which priority on which node."""
        note = (
            f"preempting {len(plan.victims)} pod(s) on node {plan.node} "
            f"({_by_priority(plan.victims)}) for this pod of priority {pod.priority}"
        )
        note += plan.guarded_warning()
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, NORMAL, "Preempting", "Preempting", note)
        log.info(
            "preemption_plan",
            preemptor=pod.key,
            node=plan.node,
            victims=[v.pod.key for v in plan.victims],
            priorities=[v.pod.priority for v in plan.victims],
            budget_guarded=sorted(plan.guarded),
        )

    def tell_victim(self, pod: PodInfo, victim: Victim) -> None:
        """The victim's event, kube-scheduler's words: the preemptor's UID only."""
        note = f"Preempted by pod {pod.uid} on node {victim.node}"
        ref = ObjectRef("Pod", victim.pod.name, victim.pod.namespace, victim.pod.uid)
        self.recorder.emit(ref, NORMAL, "Preempted", "Preempting", note)
