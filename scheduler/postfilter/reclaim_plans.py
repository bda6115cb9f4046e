"""The policy steps of idle reclaim that choose victims (`ReclaimPlanner`), on the cache alone:

- candidate nodes: those the filters rejected only for reasons removing pods can fix;
- eligible pods on them: those whose PriorityClass policy lets the preemptor reclaim them
  (`reclaim.policy.victim_eligibility`), with the PodDisruptionBudgets guarding each and the
  GPUs each holds, DRA devices included (`scheduler.state.gpu_holdings`);
- whole Kueue Workloads: a Kueue victim counts only when every pod of its Workload is idle
  (`scheduler.victims.kueue.partial_workloads`);
- per node, the fewest idle victims that let the preemptor pass every filter there, including
  NVLink (its GPUs fit in one domain when the node's domains allow it) and MIG profiles
  (`reclaim.policy.choose_victims` with `fits_without`, a what-if of the cache), weighed with
  their gangs; nodes best first (`reclaim.policy.best_node`), budget-violating sets last.

`fits_without` is also priority preemption's what-if (`scheduler.postfilter.preemption`).
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import structlog

from reclaim.policy import (
    Candidate,
    VictimFacts,
    VictimSet,
    best_node,
    budget_violations,
    choose_victims,
    order_candidates,
    victim_eligibility,
)
from scheduler.framework.interface import CycleState
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.tracker import GangTracker
from scheduler.model.objects import PodInfo
from scheduler.plugins.nvlink import one_domain_feasible
from scheduler.postfilter.reclaim_policies import PolicyStore
from scheduler.state.context import SchedulerContext
from scheduler.state.gpu_holdings import GpuHoldings
from scheduler.victims.candidates import Plan, Victim, may_make_room, victim_gangs, victim_pod
from scheduler.victims.gangs import Unit, broken_gangs, victim_units
from scheduler.victims.kueue import KueueOwner, kueue_owner, partial_workloads
from scheduler.victims.pdb import PdbStore

log = structlog.get_logger("gpu-scheduler.reclaim")


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


class ReclaimPlanner:
    """Chooses idle-reclaim victims and checks that the preemptor fits without them (see the
    module docstring); reads the cache, never writes it beyond what-ifs."""

    def __init__(
        self,
        context: SchedulerContext,
        framework: Framework,
        policies: PolicyStore,
        pdbs: PdbStore,
    ) -> None:
        self.cache = context.cache
        self.wall_clock = context.wall_clock
        self.gpu_drivers = context.settings.dra.gpu_drivers
        self.framework = framework
        self.policies = policies
        self.pdbs = pdbs

    def candidate_nodes(self, pod: PodInfo) -> tuple[list[str], str] | None:
        """The nodes rejected only for reasons removing pods can fix, in snapshot order, and
        the failure message; None when the pod fits somewhere now."""
        snapshot = Snapshot(self.cache)
        with self.cache.released(pod.key):
            diagnosis = self.framework.run_filters(pod, snapshot, CycleState())
            if diagnosis.feasible.any():
                log.info("reclaim_not_needed", pod=pod.key)
                return None
            nodes = [
                snapshot.names[row]
                for row in np.flatnonzero(diagnosis.resolvable_nodes(snapshot.valid))
            ]
        return nodes, diagnosis.message(snapshot.valid)

    def eligible(self, pod: PodInfo, nodes: list[str]) -> list[Victim]:
        """The pods on `nodes` whose PriorityClass policy lets `pod` reclaim them."""
        now = self.wall_clock()
        victims: list[Victim] = []
        holdings = GpuHoldings(self.cache, self.gpu_drivers)
        for node in nodes:
            for state in self.cache.iter_pods_on(node):
                other = state.info
                if not may_make_room(state, pod):
                    continue
                gpus = holdings.of(other, node)
                facts = VictimFacts(
                    other.key,
                    other.priority,
                    other.priority_class,
                    _epoch(other.scheduled_at),
                    gpus,
                )
                result = victim_eligibility(
                    facts, pod.priority, self.policies.policy(other.priority_class), now
                )
                if not result.eligible:
                    log.debug("reclaim_not_eligible", pod=other.key, reason=result.reason)
                    continue
                assert result.resource_idle_seconds is not None
                assert result.threshold_pct is not None
                budgets = self.pdbs.budgets_of(other.namespace, other.name, other.labels)
                victims.append(
                    Victim(
                        other,
                        node,
                        state.gpus,
                        result.resource_idle_seconds,
                        result.threshold_pct,
                        budgets=budgets,
                        gpu_count=gpus,
                    )
                )
        return victims

    def whole_workloads(self, pod: PodInfo, idle: list[Victim]) -> list[Victim]:
        """`idle` without the Kueue victims whose Workload also runs a pod that is not idle
        (`scheduler.victims.kueue.partial_workloads`): Kueue takes a Workload back whole."""
        owners: dict[str, KueueOwner] = {}
        for key, state in self.cache.pods.items():
            if state.reserved_at is not None or state.info.terminating:
                continue
            owner = kueue_owner(state.info)
            if owner is not None:
                owners[key] = owner
        excluded = partial_workloads((v.pod.key for v in idle), owners)
        for key, why in excluded.items():
            log.info("reclaim_kueue_workload_busy", preemptor=pod.key, pod=key, reason=why)
        return [v for v in idle if v.pod.key not in excluded]

    def fits_without(self, pod: PodInfo, node: str, removed: frozenset[str]) -> bool:
        """Whether `pod` passes every filter on `node` once `removed` pods are gone, with its
        GPUs inside one NVLink domain wherever the node's domains allow that."""
        with self.cache.released(pod.key), self.cache.without(removed):
            snapshot = Snapshot(self.cache)
            row = self.cache.row_of.get(node)
            if row is None:
                return False
            diagnosis = self.framework.run_filters(pod, snapshot, CycleState())
            if not diagnosis.feasible[row]:
                return False
            if pod.gpus >= 2:
                largest = int(snapshot.domain_size[row].max(initial=0))
                if pod.gpus <= largest and not one_domain_feasible(snapshot, pod.gpus)[row]:
                    return False
            return True

    def plans(self, pod: PodInfo, idle: list[Victim], tracker: GangTracker | None) -> list[Plan]:
        """Victim sets per node, best node first (budget-violating sets last). A victim is
        weighed with its gang of `tracker` (`scheduler.victims.gangs.victim_units`): a gang
        evicted only as a whole is one candidate of all its members (on any node, all idle), and
        a set that would take a gang below minCount otherwise is not used."""
        by_key = {v.pod.key: v for v in idle}
        gangs = victim_gangs(self.cache, tracker, (v.pod for v in idle))
        units, excluded = victim_units((victim_pod(v) for v in idle), gangs)
        for line in excluded:
            log.info("reclaim_gang_not_eligible", preemptor=pod.key, reason=line)
        by_node: dict[str, list[Unit]] = {}
        for unit in units:
            for node in sorted({by_key[k].node for k in unit.pods}):
                by_node.setdefault(node, []).append(unit)
        allowed = self.pdbs.allowed()
        sets: dict[str, VictimSet] = {}
        chosen: dict[str, Plan] = {}
        for node, node_units in by_node.items():
            if node not in self.cache.row_of:
                continue
            unit_of = {u.key: u for u in node_units}
            candidates = [Candidate(u.key, u.priority, u.gpus, u.budgets) for u in node_units]

            def fits(
                removed: frozenset[str], node: str = node, unit_of: dict[str, Unit] = unit_of
            ) -> bool:
                pods = frozenset(k for key in removed for k in unit_of[key].pods)
                return self.fits_without(pod, node, pods)

            keys = choose_victims(order_candidates(candidates, allowed), fits, allowed)
            if keys is None or not keys:
                continue
            broken = broken_gangs([unit_of[k] for k in keys], gangs)
            if broken:
                log.info("reclaim_set_breaks_gang", preemptor=pod.key, node=node, gangs=broken)
                continue
            victim_set = VictimSet.of(candidates, keys, allowed)
            sets[node] = victim_set
            guarded_units = budget_violations(victim_set.victims, allowed)
            guarded = frozenset(p for k in guarded_units for p in unit_of[k].pods)
            victims = tuple(by_key[p] for k in keys for p in unit_of[k].pods)
            chosen[node] = Plan(node, victims, guarded)
        ordered: list[Plan] = []
        while sets:
            best = best_node(sets)
            assert best is not None
            ordered.append(chosen[best])
            del sets[best]
        return ordered
