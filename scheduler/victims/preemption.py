"""Priority preemption, the pure half: kube-scheduler's DefaultPreemption victim choice.

Plain data in, a decision out: no asyncio, no cache, no Kubernetes client. The PostFilter
(`scheduler.postfilter.preemption`) gathers the facts (the pods on each candidate node, a `fits`
callback that re-runs every filter on a what-if of the cache, the budgets' allowed disruptions)
and these functions decide, with kube-scheduler's rules:

    preemptor_not_eligible   preemptionPolicy Never: never preempts ("not eligible due to
                             preemptionPolicy=Never.")
    select_victims (per node)
        candidates: pods of strictly lower priority than the preemptor (equal never)
        remove them all; the preemptor must fit, else the node is no candidate
        most important first (priority desc, then earlier start), split into those whose
        eviction would violate a PodDisruptionBudget and the others; reprieve the violating
        ones first, then the others: give each back if the preemptor still fits without it
        -> the victims (most important first) and how many of them violate a budget
    pick_node (across nodes)
        fewest budget violations, then lowest highest-victim priority, then lowest sum of
        priorities, then fewest victims, then the latest start time among the highest-priority
        victims, then the first node in the given order

The unit of eviction is a `Candidate`: one pod, or a gang evicted as one whose `members` lists
all its pods (`scheduler.victims.gangs.victim_units` decides which): `fits` receives pod keys, so
the what-if removes the whole gang; its priority is its highest member's, and the node ranking
counts every member (sum of priorities and number of victims, `NodeVictims.pod_count`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.model.preemption_policy import PREEMPT_NEVER

"""The values of `spec.preemptionPolicy` (absent means PreemptLowerPriority)."""
NEVER_MESSAGE = "not eligible due to preemptionPolicy=Never."
TERMINATING_MESSAGE = "not eligible due to a terminating pod on the nominated node."
"""kube-scheduler's words for a preemptor that may not preempt now."""
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
"""kube-scheduler's defaults (DefaultPreemptionArgs): the dry run stops once this many candidate
nodes are found (`candidate_limit`), one of them without a budget violation."""
PRIORITY_OFFSET = 2**31
"""Added to every priority before summing, as kube-scheduler does: with negative priorities a
node with more victims must not sum lower than one with fewer of the same priority."""


@dataclass(frozen=True)
class Candidate:
    """A pod, or a gang evicted as one (see the module docstring), that might be preempted."""

    key: str
    """namespace/name."""
    priority: int
    start_time: float | None = None
    """Seconds since the epoch (`status.startTime`); None when unknown, which counts as "now"
    (the least important among equal priorities), as kube-scheduler counts it."""
    budgets: tuple[str, ...] = ()
    """Keys of the PodDisruptionBudgets guarding it."""
    members: tuple[str, ...] = ()
    """The pod keys removed with it; empty means the candidate is the one pod `key`."""

    @property
    def pods(self) -> tuple[str, ...]:
        return self.members or (self.key,)


@dataclass(frozen=True)
class NodeVictims:
    """The victims chosen on one node, most important first, and how many of them would
    violate a PodDisruptionBudget."""

    victims: tuple[Candidate, ...]
    violations: int = 0

    @property
    def pods(self) -> frozenset[str]:
        return frozenset(key for victim in self.victims for key in victim.pods)

    @property
    def highest_priority(self) -> int:
        return max(v.priority for v in self.victims)

    @property
    def priority_sum(self) -> int:
        """Every pod counts: a gang candidate adds its priority once per member."""
        return sum((v.priority + PRIORITY_OFFSET) * len(v.pods) for v in self.victims)

    @property
    def pod_count(self) -> int:
        """How many pods are evicted (a gang candidate counts all its members)."""
        return sum(len(v.pods) for v in self.victims)

    @property
    def earliest_start_of_highest(self) -> float:
        """The earliest known start time among the highest-priority victims; -inf when none is
        known (such a node is picked last on this criterion, as in kube-scheduler)."""
        top = self.highest_priority
        known = [
            v.start_time
            for v in self.victims
            if v.priority == top and v.start_time is not None and math.isfinite(v.start_time)
        ]
        return min(known) if known else -math.inf


def candidate_limit(potential_nodes: int) -> int:
    """How many candidate nodes are enough: 10 % of the potential ones, at least 100, at most
    all of them (kube-scheduler's GetOffsetAndNumCandidates with the default arguments)."""
    wanted = potential_nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    return min(max(wanted, MIN_CANDIDATE_NODES_ABSOLUTE), potential_nodes)


def enough_candidates(per_node: Mapping[str, NodeVictims], limit: int) -> bool:
    """Whether the dry run may stop: `limit` candidates found, one of them violating no budget."""
    return len(per_node) >= limit and any(v.violations == 0 for v in per_node.values())


def preemptor_not_eligible(preemption_policy: str) -> str | None:
    """Why a pod with this `spec.preemptionPolicy` may not preempt (None when it may)."""
    return NEVER_MESSAGE if preemption_policy == PREEMPT_NEVER else None


def importance(candidate: Candidate) -> tuple[int, float, str]:
    """Sort key, most important first: priority descending, then earlier start time (unknown
    last), then key (deterministic)."""
    start = candidate.start_time
    known = start is not None and math.isfinite(start)
    return (-candidate.priority, start if known and start is not None else math.inf, candidate.key)


def split_by_budget(
    ordered: Sequence[Candidate], allowed: Mapping[str, int]
) -> tuple[list[Candidate], list[Candidate]]:
    """(violating, non-violating), each in the given order: every candidate uses up one
    disruption of each budget guarding it, counted in that order (`allowed` is each budget's
    `status.disruptionsAllowed`; a budget missing from it allows none); one that takes a budget
    below zero violates it."""
    left = dict(allowed)
    violating: list[Candidate] = []
    others: list[Candidate] = []
    for candidate in ordered:
        broke = False
        for budget in candidate.budgets:
            left[budget] = left.get(budget, 0) - 1
            broke = broke or left[budget] < 0
        (violating if broke else others).append(candidate)
    return violating, others


def select_victims(
    preemptor_priority: int,
    pods_on_node: Iterable[Candidate],
    fits: Callable[[frozenset[str]], bool],
    allowed: Mapping[str, int] | None = None,
) -> NodeVictims | None:
    """The fewest victims on one node, as kube-scheduler's SelectVictimsOnNode chooses them, or
    None when the node is no candidate (no pod of lower priority, or the preemptor does not fit
    even with all of them gone, or it fits without any).

    `fits(removed)` says whether the preemptor passes every filter on the node once the pods
    whose keys are in `removed` are gone. Only candidates of strictly lower priority than
    `preemptor_priority` are considered. Reprieve order: budget-violating candidates first
    (so they are kept whenever possible), each group most important first (`importance`)."""
    potential = sorted((c for c in pods_on_node if c.priority < preemptor_priority), key=importance)
    if not potential:
        return None
    removed = {key for c in potential for key in c.pods}
    if not fits(frozenset(removed)):
        return None
    violating, others = split_by_budget(potential, allowed or {})
    victims: list[Candidate] = []
    violations = 0
    for candidate, breaks in [(c, True) for c in violating] + [(c, False) for c in others]:
        kept = removed - set(candidate.pods)
        if fits(frozenset(kept)):
            removed = kept  # reprieved
            continue
        victims.append(candidate)
        violations += breaks
    if not victims:
        return None
    return NodeVictims(tuple(sorted(victims, key=importance)), violations)


def _rank(victims: NodeVictims) -> tuple[int, int, int, int, float]:
    return (
        victims.violations,
        victims.highest_priority,
        victims.priority_sum,
        victims.pod_count,
        -victims.earliest_start_of_highest,
    )


def pick_node(per_node: Mapping[str, NodeVictims]) -> str | None:
    """kube-scheduler's pickOneNodeForPreemption: fewest budget violations, then lowest
    highest-victim priority, then lowest sum of priorities, then fewest victims, then the
    latest start time among the highest-priority victims, then the first node in `per_node`'s
    order. None when there is none."""
    best: str | None = None
    best_rank: tuple[int, int, int, int, float] | None = None
    for node, victims in per_node.items():
        rank = _rank(victims)
        if best_rank is None or rank < best_rank:  # strict: ties keep the earlier node
            best, best_rank = node, rank
    return best


def nodes_in_order(per_node: Mapping[str, NodeVictims]) -> list[str]:
    """Every node, best first by `pick_node` (the order to fall back in when evictions on the
    best node are refused)."""
    left = dict(per_node)
    ordered: list[str] = []
    while left:
        node = pick_node(left)
        assert node is not None
        ordered.append(node)
        del left[node]
    return ordered
