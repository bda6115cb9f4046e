"""Reclaim policy: PriorityClass annotations, victim eligibility, victim choice per node.

Pure: no asyncio, no Kubernetes client. The PostFilter gathers the facts (PriorityClasses, pods,
a `fits` callback that re-runs its filters) and these functions decide.

A PriorityClass opts its pods in to reclaim with all four annotations:

    reclaim-idle-resource.scheduling.x-k8s.io/minimum-preemptable-priority   integer, int32
    reclaim-idle-resource.scheduling.x-k8s.io/toleration-seconds             integer, 0..365 days
    reclaim-idle-resource.scheduling.x-k8s.io/resource-idle-seconds          integer, 1 s..30 days
    reclaim-idle-resource.scheduling.x-k8s.io/resource-idle-usage-threshold  number, 0 < t <= 100

A class with none of them protects its pods; a class with some but not all, or with a malformed
or out-of-range value, protects its pods too and is reported with one error per bad annotation.

Victim choice (kube-scheduler's default preemption, applied to eligible idle pods):

    candidates --order_candidates--> GPU count desc, priority asc, key; victims that would
                                     violate a PodDisruptionBudget last (budget_violations)
        take in that order until fits(taken)            (None if all of them are not enough)
        reprieve: for each taken victim, budget-violating ones first, then most important
                  first (priority desc, GPUs desc, key), give it back if the preemptor still
                  fits without evicting it
    per node victim sets --best_node--> fewest budget violations, fewest victims, fewest GPUs,
                                        lowest priority sum, lowest highest priority, node name
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

ANNOTATION_PREFIX = "reclaim-idle-resource.scheduling.x-k8s.io/"
MINIMUM_PREEMPTABLE_PRIORITY = ANNOTATION_PREFIX + "minimum-preemptable-priority"
TOLERATION_SECONDS = ANNOTATION_PREFIX + "toleration-seconds"
RESOURCE_IDLE_SECONDS = ANNOTATION_PREFIX + "resource-idle-seconds"
RESOURCE_IDLE_USAGE_THRESHOLD = ANNOTATION_PREFIX + "resource-idle-usage-threshold"
POLICY_ANNOTATIONS = (
    MINIMUM_PREEMPTABLE_PRIORITY,
    TOLERATION_SECONDS,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
"""Kubernetes pod priorities are int32; so is the minimum-preemptable-priority."""
MAX_TOLERATION_SECONDS = 365 * 86400
"""toleration-seconds: 0 to one year."""
MAX_IDLE_SECONDS = 30 * 86400
"""resource-idle-seconds: 1 s to 30 days (a Prometheus range no larger than its usual retention;
far larger windows make Prometheus refuse the query)."""
MAX_PERCENT = 100.0
MAX_VALUE_CHARS = 32
"""Longer annotation values are rejected before any parsing (no number in range needs more)."""
MAX_QUOTED_VALUE = 64
"""Longer annotation values are cut in error messages."""

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class ReclaimPolicy:
    """A PriorityClass's valid reclaim policy."""

    minimum_preemptable_priority: int
    """A preemptor needs at least this priority (it may be below the victim's own)."""
    toleration_seconds: int
    """The victim must have been scheduled for longer than this."""
    resource_idle_seconds: int
    """Length of the window over which the victim's GPU usage must stay under the threshold."""
    resource_idle_usage_threshold: float
    """Percent, 0 < t <= 100; usage strictly below it is idle."""


class PolicyStatus(StrEnum):
    NONE = "none"
    """No reclaim annotation: the class protects its pods."""
    VALID = "valid"
    INVALID = "invalid"
    """Some annotations present but missing or malformed: protects its pods, reported."""


@dataclass(frozen=True)
class PolicyResult:
    """What a PriorityClass says about reclaim. `policy` is set only when `status` is VALID;
    `errors` is non-empty only when it is INVALID."""

    priority_class: str
    status: PolicyStatus
    policy: ReclaimPolicy | None = None
    errors: tuple[str, ...] = ()


def quote(value: str) -> str:
    """`value` as a JSON string, cut to `MAX_QUOTED_VALUE` characters (for logs and events)."""
    cut = value if len(value) <= MAX_QUOTED_VALUE else value[:MAX_QUOTED_VALUE] + "..."
    return json.dumps(cut)


def _error(priority_class: str, key: str, value: str, rule: str) -> str:
    return f"PriorityClass {priority_class}: annotation {key}={quote(value)}: {rule}"


def _integer(value: str, low: int, high: int) -> int | None:
    """A plain decimal integer within [low, high], else None. Never raises (the length bound
    keeps `int()` far from Python's digit limit)."""
    if len(value) > MAX_VALUE_CHARS or not _INTEGER.fullmatch(value):
        return None
    number = int(value)
    return number if low <= number <= high else None


def _percent(value: str) -> float | None:
    """A plain decimal number with 0 < number <= 100, else None. Never raises."""
    if len(value) > MAX_VALUE_CHARS or not _DECIMAL.fullmatch(value):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 < number <= MAX_PERCENT else None


_RULES: dict[str, tuple[Callable[[str], int | float | None], str]] = {
    MINIMUM_PREEMPTABLE_PRIORITY: (
        lambda v: _integer(v, INT32_MIN, INT32_MAX),
        f"must be an integer (int32: {INT32_MIN} to {INT32_MAX})",
    ),
    TOLERATION_SECONDS: (
        lambda v: _integer(v, 0, MAX_TOLERATION_SECONDS),
        f"must be an integer from 0 to {MAX_TOLERATION_SECONDS} (365 days)",
    ),
    RESOURCE_IDLE_SECONDS: (
        lambda v: _integer(v, 1, MAX_IDLE_SECONDS),
        f"must be an integer from 1 to {MAX_IDLE_SECONDS} (30 days)",
    ),
    RESOURCE_IDLE_USAGE_THRESHOLD: (
        _percent,
        "must be a number greater than 0 and at most 100",
    ),
}
"""Per annotation: its parser (None for a bad value) and the rule errors quote."""


@dataclass(frozen=True)
class AnnotationProblem:
    """One missing or bad reclaim annotation, as `parse_policy` judges it."""

    key: str
    value: str | None
    """The annotation's value; None when it is missing."""
    rule: str
    """What the value must be ("" when it is missing)."""


def _read(
    annotations: Mapping[str, str],
) -> tuple[list[AnnotationProblem], dict[str, int | float]]:
    """The problems of the four reclaim annotations (the missing ones first, then the bad, each
    in `POLICY_ANNOTATIONS` order) and the values that parsed."""
    problems = [AnnotationProblem(k, None, "") for k in POLICY_ANNOTATIONS if k not in annotations]
    values: dict[str, int | float] = {}
    for key in POLICY_ANNOTATIONS:
        if key not in annotations:
            continue
        raw = annotations[key]
        parse, rule = _RULES[key]
        number = parse(raw)
        if number is None:
            problems.append(AnnotationProblem(key, raw, rule))
        else:
            values[key] = number
    return problems, values


def annotation_problems(annotations: Mapping[str, str]) -> list[AnnotationProblem]:
    """Every missing or bad reclaim annotation `parse_policy` finds, as data rather than text
    (for callers that word their own message); empty for a class with none of the four."""
    if not any(key in annotations for key in POLICY_ANNOTATIONS):
        return []
    return _read(annotations)[0]


def parse_policy(priority_class_name: str, annotations: Mapping[str, str]) -> PolicyResult:
    """Read the reclaim policy from a PriorityClass's annotations. Never raises.

    - None of the four keys present: status NONE (the class's pods are never reclaimed).
    - All four present and valid: status VALID with the policy. All four are required.
    - Otherwise INVALID, with one error per missing or bad key, each naming the class, the key
      and the value (cut to `MAX_QUOTED_VALUE` characters), e.g. `PriorityClass batch-low:
      annotation reclaim-idle-resource.scheduling.x-k8s.io/toleration-seconds="-5": must be an
      integer from 0 to 31536000 (365 days)`.
    Values must be plain decimal strings of at most `MAX_VALUE_CHARS` characters: integers for
    the first three (minimum priority within int32, toleration 0 to 365 days, idle window 1 s
    to 30 days), a number with 0 < t <= 100 for the threshold. Surrounding spaces are an error.
    """
    name = priority_class_name
    if not any(key in annotations for key in POLICY_ANNOTATIONS):
        return PolicyResult(name, PolicyStatus.NONE)
    problems, values = _read(annotations)
    errors = [
        f"PriorityClass {name}: annotation {p.key} is missing "
        "(all four reclaim-idle-resource annotations are required)"
        if p.value is None
        else _error(name, p.key, p.value, p.rule)
        for p in problems
    ]
    if errors:
        return PolicyResult(name, PolicyStatus.INVALID, errors=tuple(errors))
    policy = ReclaimPolicy(
        int(values[MINIMUM_PREEMPTABLE_PRIORITY]),
        int(values[TOLERATION_SECONDS]),
        int(values[RESOURCE_IDLE_SECONDS]),
        float(values[RESOURCE_IDLE_USAGE_THRESHOLD]),
    )
    return PolicyResult(name, PolicyStatus.VALID, policy=policy)


@dataclass(frozen=True)
class VictimFacts:
    """What eligibility needs to know about a pod that might be reclaimed."""

    key: str
    """namespace/name."""
    priority: int
    priority_class: str
    scheduled_at: float | None
    """Seconds since the epoch when the pod was scheduled: the lastTransitionTime of its
    PodScheduled condition (status True), else `status.startTime`; None when neither is known
    (then the pod is not eligible)."""
    gpus: int


class EligibilityReason(StrEnum):
    ELIGIBLE = "eligible"
    """Eligible: the caller must still check the idle window."""
    NO_POLICY = "no_policy"
    INVALID_POLICY = "invalid_policy"
    PREEMPTOR_PRIORITY_TOO_LOW = "preemptor_priority_too_low"
    UNKNOWN_SCHEDULE_TIME = "unknown_schedule_time"
    WITHIN_TOLERATION = "within_toleration"


@dataclass(frozen=True)
class Eligibility:
    """Whether a pod may be reclaimed, before its usage is measured. When eligible,
    `resource_idle_seconds` and `threshold_pct` are the window and threshold the caller checks
    with `reclaim.usage.idle_verdict`; otherwise both are None."""

    eligible: bool
    reason: EligibilityReason
    message: str
    resource_idle_seconds: int | None = None
    threshold_pct: float | None = None


def victim_eligibility(
    victim: VictimFacts, preemptor_priority: int, policy_result: PolicyResult, now: float
) -> Eligibility:
    """Decide, in this order: the victim's class has a valid policy (NONE -> no_policy, INVALID ->
    invalid_policy); preemptor_priority >= minimum-preemptable-priority (the victim's own
    priority does not matter: a priority-500 preemptor may reclaim an idle priority-1000 pod
    when the minimum is 500); the schedule time is known; `now - scheduled_at >
    toleration-seconds` (a schedule time in the future counts as within toleration).

    `policy_result` must be the victim's own class's result; a mismatch raises ValueError.
    """
    if policy_result.priority_class != victim.priority_class:
        raise ValueError(
            f"policy of PriorityClass {policy_result.priority_class!r} given for pod "
            f"{victim.key} of PriorityClass {victim.priority_class!r}"
        )
    if policy_result.status is PolicyStatus.NONE:
        return Eligibility(
            False,
            EligibilityReason.NO_POLICY,
            f"PriorityClass {victim.priority_class!r} has no reclaim policy"
            if victim.priority_class
            else "no PriorityClass, so not reclaimable",
        )
    policy = policy_result.policy
    if policy_result.status is PolicyStatus.INVALID or policy is None:
        return Eligibility(
            False,
            EligibilityReason.INVALID_POLICY,
            f"PriorityClass {victim.priority_class!r} has an invalid reclaim policy",
        )
    if preemptor_priority < policy.minimum_preemptable_priority:
        return Eligibility(
            False,
            EligibilityReason.PREEMPTOR_PRIORITY_TOO_LOW,
            f"preemptor priority {preemptor_priority} < minimum-preemptable-priority "
            f"{policy.minimum_preemptable_priority}",
        )
    if victim.scheduled_at is None or not math.isfinite(victim.scheduled_at):
        return Eligibility(
            False, EligibilityReason.UNKNOWN_SCHEDULE_TIME, "the pod's schedule time is unknown"
        )
    running = now - victim.scheduled_at
    if not running > policy.toleration_seconds:
        return Eligibility(
            False,
            EligibilityReason.WITHIN_TOLERATION,
            f"scheduled {max(running, 0.0):.0f} s ago, within toleration "
            f"{policy.toleration_seconds} s",
        )
    return Eligibility(
        True,
        EligibilityReason.ELIGIBLE,
        f"scheduled {running:.0f} s ago, past toleration {policy.toleration_seconds} s",
        resource_idle_seconds=policy.resource_idle_seconds,
        threshold_pct=policy.resource_idle_usage_threshold,
    )


@dataclass(frozen=True)
class Candidate:
    """An eligible, measured-idle pod on one node. `budgets` names the PodDisruptionBudgets
    whose selector matches it (its namespace's, see `budget_violations`)."""

    key: str
    priority: int
    gpus: int
    budgets: tuple[str, ...] = ()


def budget_violations(victims: Iterable[Candidate], allowed: Mapping[str, int]) -> frozenset[str]:
    """The victims whose eviction would exceed a PodDisruptionBudget, counting in the given
    order, as kube-scheduler's preemption does: each victim uses up one disruption of every
    budget it matches (`allowed` is each budget's `status.disruptionsAllowed`; a budget not in
    it allows none), and a victim that takes a budget below zero violates it."""
    left = dict(allowed)
    violating: set[str] = set()
    for victim in victims:
        for budget in victim.budgets:
            left[budget] = left.get(budget, 0) - 1
            if left[budget] < 0:
                violating.add(victim.key)
    return frozenset(violating)


def order_candidates(
    candidates: Iterable[Candidate], allowed: Mapping[str, int] | None = None
) -> list[Candidate]:
    """The order victims are taken in: GPU count descending (fewest victims), then priority
    ascending (least important first), then key (deterministic); with `allowed` (budgets'
    disruptions allowed), the victims whose eviction would violate a budget move last."""
    ordered = sorted(candidates, key=lambda c: (-c.gpus, c.priority, c.key))
    if allowed is None:
        return ordered
    violating = budget_violations(ordered, allowed)
    return sorted(ordered, key=lambda c: c.key in violating)  # stable: order kept within


def reprieve_order(
    victims: Iterable[Candidate], violating: frozenset[str] = frozenset()
) -> list[Candidate]:
    """The order victims are given back in: those in `violating` first (kube-scheduler reprieves
    budget-violating victims first), then most important first: priority descending; then GPU
    count descending (among equals, sparing the pod that holds more GPUs spares more work and
    evicts fewer GPUs); then key."""
    return sorted(victims, key=lambda c: (c.key not in violating, -c.priority, -c.gpus, c.key))


def choose_victims(
    candidates_in_order: Sequence[Candidate],
    fits: Callable[[frozenset[str]], bool],
    allowed: Mapping[str, int] | None = None,
) -> tuple[str, ...] | None:
    """The victims to evict on one node, in the given order, or None if removing every candidate
    still does not let the preemptor fit.

    `fits(removed_keys)` says whether the preemptor passes all filters on the node once those
    pods are gone (the scheduler supplies it). Takes candidates in order until it fits (an empty
    tuple when it already fits), then tries to give back each taken victim in `reprieve_order`
    (with `allowed`, budget-violating victims are tried first), keeping it only if the
    preemptor still fits without evicting it.
    """
    taken: list[Candidate] = []
    if not fits(frozenset()):
        for candidate in candidates_in_order:
            taken.append(candidate)
            if fits(frozenset(c.key for c in taken)):
                break
        else:
            return None
    violating = budget_violations(taken, allowed) if allowed is not None else frozenset()
    removed = {c.key for c in taken}
    for candidate in reprieve_order(taken, violating):
        kept = removed - {candidate.key}
        if fits(frozenset(kept)):
            removed = kept
    return tuple(c.key for c in taken if c.key in removed)


@dataclass(frozen=True)
class VictimSet:
    """The victims chosen on one node, and how many of them would violate a budget."""

    victims: tuple[Candidate, ...]
    violations: int = 0

    @property
    def count(self) -> int:
        return len(self.victims)

    @property
    def gpus(self) -> int:
        return sum(c.gpus for c in self.victims)

    @property
    def priority_sum(self) -> int:
        return sum(c.priority for c in self.victims)

    @property
    def highest_priority(self) -> int | None:
        return max((c.priority for c in self.victims), default=None)

    @staticmethod
    def of(
        candidates: Iterable[Candidate],
        keys: Iterable[str],
        allowed: Mapping[str, int] | None = None,
    ) -> VictimSet:
        """The candidates whose key is in `keys`, in `keys` order, with their budget violations
        counted against `allowed` (none without it). Raises KeyError on an unknown key."""
        by_key = {c.key: c for c in candidates}
        victims = tuple(by_key[key] for key in keys)
        violating = budget_violations(victims, allowed) if allowed is not None else frozenset()
        return VictimSet(victims, len(violating))


def best_node(per_node: Mapping[str, VictimSet]) -> str | None:
    """The node whose victim set disturbs least: fewest budget violations (kube-scheduler's
    first criterion), then fewest victims, then fewest GPUs, then lowest sum of priorities,
    then lowest highest priority (an empty set counts as lowest), then node name. None when
    there is no node."""
    if not per_node:
        return None

    def rank(item: tuple[str, VictimSet]) -> tuple[int, int, int, int, float, str]:
        node, victims = item
        highest = victims.highest_priority
        return (
            victims.violations,
            victims.count,
            victims.gpus,
            victims.priority_sum,
            -math.inf if highest is None else float(highest),
            node,
        )

    return min(per_node.items(), key=rank)[0]
