"""Reclaim policy, table-driven: annotation bounds and partial classes (never an exception),
eligibility in order, victim choice with reprieve and PodDisruptionBudgets, the best node."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from reclaim.policy import (
    MAX_IDLE_SECONDS,
    MAX_TOLERATION_SECONDS,
    MINIMUM_PREEMPTABLE_PRIORITY,
    POLICY_ANNOTATIONS,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
    TOLERATION_SECONDS,
    Candidate,
    EligibilityReason,
    PolicyStatus,
    ReclaimPolicy,
    VictimFacts,
    VictimSet,
    best_node,
    budget_violations,
    choose_victims,
    order_candidates,
    parse_policy,
    reprieve_order,
    victim_eligibility,
)

VALID = {
    MINIMUM_PREEMPTABLE_PRIORITY: "500",
    TOLERATION_SECONDS: "3600",
    RESOURCE_IDLE_SECONDS: "1800",
    RESOURCE_IDLE_USAGE_THRESHOLD: "10.0",
}

# -- parse_policy: every partial combination is invalid, never an exception ------------------

PARTIAL = [
    subset
    for size in range(1, len(POLICY_ANNOTATIONS))
    for subset in itertools.combinations(POLICY_ANNOTATIONS, size)
]


@pytest.mark.parametrize("present", PARTIAL, ids=lambda keys: "+".join(k[30:] for k in keys))
def test_every_partial_class_is_invalid_naming_each_missing_key(present: tuple[str, ...]) -> None:
    result = parse_policy("partial", {key: VALID[key] for key in present})
    assert result.status is PolicyStatus.INVALID
    assert result.policy is None
    missing = [key for key in POLICY_ANNOTATIONS if key not in present]
    assert result.errors == tuple(
        f"PriorityClass partial: annotation {key} is missing "
        "(all four reclaim-idle-resource annotations are required)"
        for key in missing
    )


@pytest.mark.parametrize("missing", [TOLERATION_SECONDS, RESOURCE_IDLE_SECONDS])
def test_missing_only_one_seconds_annotation_is_invalid(missing: str) -> None:
    annotations = {k: v for k, v in VALID.items() if k != missing}
    result = parse_policy("one-short", annotations)
    assert result.status is PolicyStatus.INVALID
    assert len(result.errors) == 1 and missing in result.errors[0]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (MINIMUM_PREEMPTABLE_PRIORITY, "2147483647", 2**31 - 1),
        (MINIMUM_PREEMPTABLE_PRIORITY, "-2147483648", -(2**31)),
        (MINIMUM_PREEMPTABLE_PRIORITY, "+7", 7),
        (MINIMUM_PREEMPTABLE_PRIORITY, "0", 0),
        (TOLERATION_SECONDS, "0", 0),
        (TOLERATION_SECONDS, str(MAX_TOLERATION_SECONDS), MAX_TOLERATION_SECONDS),
        (RESOURCE_IDLE_SECONDS, "1", 1),
        (RESOURCE_IDLE_SECONDS, str(MAX_IDLE_SECONDS), MAX_IDLE_SECONDS),
        (RESOURCE_IDLE_SECONDS, "007", 7),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "0.5", 0.5),
        (RESOURCE_IDLE_USAGE_THRESHOLD, ".5", 0.5),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "0.001", 0.001),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "100", 100.0),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "1e2", 100.0),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "5", 5.0),
    ],
)
def test_values_in_range_are_valid(key: str, value: str, expected: float) -> None:
    result = parse_policy("ok", {**VALID, key: value})
    assert result.status is PolicyStatus.VALID, result.errors
    assert result.policy is not None
    field = {
        MINIMUM_PREEMPTABLE_PRIORITY: "minimum_preemptable_priority",
        TOLERATION_SECONDS: "toleration_seconds",
        RESOURCE_IDLE_SECONDS: "resource_idle_seconds",
        RESOURCE_IDLE_USAGE_THRESHOLD: "resource_idle_usage_threshold",
    }[key]
    assert getattr(result.policy, field) == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (MINIMUM_PREEMPTABLE_PRIORITY, "2147483648"),
        (MINIMUM_PREEMPTABLE_PRIORITY, "-2147483649"),
        (MINIMUM_PREEMPTABLE_PRIORITY, "9" * 5000),  # beyond Python's int() digit limit
        (MINIMUM_PREEMPTABLE_PRIORITY, "1" * 40),
        (MINIMUM_PREEMPTABLE_PRIORITY, "1.0"),
        (TOLERATION_SECONDS, "-1"),
        (TOLERATION_SECONDS, str(MAX_TOLERATION_SECONDS + 1)),
        (TOLERATION_SECONDS, "9" * 5000),
        (TOLERATION_SECONDS, ""),
        (RESOURCE_IDLE_SECONDS, "0"),
        (RESOURCE_IDLE_SECONDS, str(MAX_IDLE_SECONDS + 1)),
        (RESOURCE_IDLE_SECONDS, "1" + "0" * 30),  # 10^30: Prometheus would refuse the range
        (RESOURCE_IDLE_SECONDS, "3600s"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "0"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "0.0"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "-0.5"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "100.01"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "1e400"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "inf"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "10%"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "0." + "0" * 40 + "1"),  # too long to read
        (RESOURCE_IDLE_USAGE_THRESHOLD, "9" * 5000),
    ],
)
def test_values_out_of_range_are_invalid_and_quoted_short(key: str, value: str) -> None:
    result = parse_policy("bad", {**VALID, key: value})
    assert result.status is PolicyStatus.INVALID
    (error,) = result.errors
    assert error.startswith(f"PriorityClass bad: annotation {key}=")
    assert len(error) < 250, "the echoed value is cut"


def test_quoted_value_is_cut_to_64_characters() -> None:
    (error,) = parse_policy("c", {**VALID, TOLERATION_SECONDS: "7" * 5000}).errors
    assert '="' + "7" * 64 + '..."' in error
    assert "7" * 65 not in error


def test_every_bad_annotation_is_reported_at_once() -> None:
    bad = {key: "x" for key in POLICY_ANNOTATIONS}
    result = parse_policy("all-bad", bad)
    assert [e.split("=")[0].split()[-1] for e in result.errors] == list(POLICY_ANNOTATIONS)


def test_only_unrelated_annotations_is_no_policy() -> None:
    result = parse_policy("plain", {"reclaim-idle-resource.scheduling.x-k8s.io/other": "1"})
    assert result.status is PolicyStatus.NONE and result.errors == ()


# -- victim_eligibility: each check, in order ----------------------------------------------------

NOW = 1_000_000.0


def facts(scheduled_at: float | None = NOW - 7200, klass: str = "batch") -> VictimFacts:
    return VictimFacts("ns/v", 100, klass, scheduled_at, 1)


@pytest.mark.parametrize(
    ("annotations", "preemptor", "scheduled_at", "reason"),
    [
        ({}, 10**6, NOW - 7200, EligibilityReason.NO_POLICY),
        ({**VALID, TOLERATION_SECONDS: "-1"}, 10**6, NOW - 7200, EligibilityReason.INVALID_POLICY),
        # invalid beats a too-low preemptor: the order of the checks
        ({**VALID, TOLERATION_SECONDS: "-1"}, 0, NOW - 7200, EligibilityReason.INVALID_POLICY),
        (VALID, 499, None, EligibilityReason.PREEMPTOR_PRIORITY_TOO_LOW),
        (VALID, 500, None, EligibilityReason.UNKNOWN_SCHEDULE_TIME),
        (VALID, 500, float("nan"), EligibilityReason.UNKNOWN_SCHEDULE_TIME),
        (VALID, 500, NOW - 3600, EligibilityReason.WITHIN_TOLERATION),
        (VALID, 500, NOW + 10, EligibilityReason.WITHIN_TOLERATION),
        (VALID, 500, NOW - 3601, EligibilityReason.ELIGIBLE),
        ({**VALID, TOLERATION_SECONDS: "0"}, 500, NOW - 0.5, EligibilityReason.ELIGIBLE),
        ({**VALID, TOLERATION_SECONDS: "0"}, 500, NOW, EligibilityReason.WITHIN_TOLERATION),
    ],
)
def test_eligibility_table(
    annotations: dict[str, str],
    preemptor: int,
    scheduled_at: float | None,
    reason: EligibilityReason,
) -> None:
    result = victim_eligibility(
        facts(scheduled_at), preemptor, parse_policy("batch", annotations), NOW
    )
    assert result.reason is reason
    assert result.eligible is (reason is EligibilityReason.ELIGIBLE)
    if result.eligible:
        assert (result.resource_idle_seconds, result.threshold_pct) == (1800, 10.0)
    else:
        assert result.resource_idle_seconds is None and result.threshold_pct is None


# -- choose_victims, reprieve and budgets ------------------------------------------------------


def c(key: str, priority: int, gpus: int, *budgets: str) -> Candidate:
    return Candidate(key, priority, gpus, budgets)


def need(count: int, candidates: list[Candidate]) -> Callable[[frozenset[str]], bool]:
    by_key = {x.key: x for x in candidates}
    return lambda removed: sum(by_key[k].gpus for k in removed) >= count


@pytest.mark.parametrize(
    ("candidates", "gpus", "expected"),
    [
        ([c("a", 1, 1), c("b", 1, 1)], 0, ()),
        ([c("a", 1, 1), c("b", 1, 1)], 1, ("a",)),
        ([c("a", 1, 1), c("b", 1, 1)], 2, ("a", "b")),
        ([c("a", 1, 1), c("b", 1, 1)], 3, None),
        # taken: big (4) fits alone; nothing to give back
        ([c("big", 9, 4), c("s1", 1, 1), c("s2", 1, 1)], 3, ("big",)),
        # 2-GPU pods first, lowest priority first: p1 then p9; neither can be given back
        ([c("p9", 9, 2), c("p1", 1, 2), c("one", 0, 1)], 3, ("p1", "p9")),
        ([c("p9", 9, 2), c("p1", 1, 2)], 2, ("p1",)),
        # the GPU count comes before priority when taking: one 2-GPU pod, not a 1-GPU one
        ([c("x2", 5, 2), c("y1", 1, 1), c("z1", 1, 1)], 1, ("x2",)),
        # one 2-GPU pod rather than two 1-GPU pods of lower priority
        ([c("x2", 5, 2), c("y1", 1, 1), c("z1", 0, 1)], 2, ("x2",)),
        # taken x2 then z1 (lowest priority of the 1-GPU pods); neither can be given back
        ([c("x2", 5, 2), c("y1", 1, 1), c("z1", 0, 1)], 3, ("x2", "z1")),
    ],
)
def test_choose_victims_table(
    candidates: list[Candidate], gpus: int, expected: tuple[str, ...] | None
) -> None:
    ordered = order_candidates(candidates)
    assert choose_victims(ordered, need(gpus, ordered)) == expected


def test_budget_violations_count_victims_of_one_budget_together() -> None:
    victims = [c("a", 1, 1, "ns/pdb"), c("b", 1, 1, "ns/pdb"), c("c", 1, 1, "ns/pdb")]
    assert budget_violations(victims, {"ns/pdb": 2}) == {"c"}
    assert budget_violations(victims, {"ns/pdb": 0}) == {"a", "b", "c"}
    assert budget_violations(victims, {}) == {"a", "b", "c"}  # unknown budget allows none
    assert budget_violations([c("free", 1, 1)], {}) == frozenset()
    two = [c("d", 1, 1, "ns/one", "ns/two")]
    assert budget_violations(two, {"ns/one": 1, "ns/two": 0}) == {"d"}


def test_violating_candidates_are_taken_last_and_reprieved_first() -> None:
    candidates = [c("guarded", 0, 2, "ns/pdb"), c("free", 5, 2)]
    assert [x.key for x in order_candidates(candidates)] == ["guarded", "free"]
    ordered = order_candidates(candidates, {"ns/pdb": 0})
    assert [x.key for x in ordered] == ["free", "guarded"]
    assert choose_victims(ordered, need(2, ordered), {"ns/pdb": 0}) == ("free",)
    # When both are needed the violating one stays: there is no other way.
    assert choose_victims(ordered, need(4, ordered), {"ns/pdb": 0}) == ("free", "guarded")
    # With a budget that allows one disruption the guarded pod is not violating.
    assert [x.key for x in order_candidates(candidates, {"ns/pdb": 1})] == ["guarded", "free"]


def test_reprieve_tries_violating_victims_first() -> None:
    taken = [c("hi", 9, 1), c("lo", 1, 1, "ns/pdb")]
    assert [x.key for x in reprieve_order(taken)] == ["hi", "lo"]
    assert [x.key for x in reprieve_order(taken, frozenset({"lo"}))] == ["lo", "hi"]
    ordered = [c("lo", 1, 1, "ns/pdb"), c("hi", 9, 1)]
    calls: list[frozenset[str]] = []

    def two_taken(removed: frozenset[str]) -> bool:  # fits once both go, or without "lo"
        calls.append(removed)
        return removed in (frozenset({"lo", "hi"}), frozenset({"hi"}))

    assert choose_victims(ordered, two_taken, {"ns/pdb": 0}) == ("hi",)
    # "lo" (violating, lower priority) was given back first, then "hi" was tried.
    assert calls[-2:] == [frozenset({"hi"}), frozenset()]


# -- best_node ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            {
                "a": VictimSet((c("x", 1, 1),), violations=1),
                "b": VictimSet((c("y", 1, 1), c("z", 1, 1))),
            },
            "b",
        ),
        ({"a": VictimSet((c("x", 1, 1),)), "b": VictimSet((c("y", 1, 1),), violations=1)}, "a"),
        ({"a": VictimSet((c("x", 1, 2),)), "b": VictimSet((c("y", 1, 1),))}, "b"),
        ({"a": VictimSet((c("x", 3, 1),)), "b": VictimSet((c("y", 2, 1),))}, "b"),
        (
            {
                "a": VictimSet((c("x", 0, 1), c("w", 10, 1))),
                "b": VictimSet((c("y", 5, 1), c("v", 5, 1))),
            },
            "b",
        ),
        ({"b": VictimSet((c("x", 1, 1),)), "a": VictimSet((c("y", 1, 1),))}, "a"),
        ({"a": VictimSet(()), "b": VictimSet((c("y", 1, 1),))}, "a"),
    ],
)
def test_best_node_table(sets: dict[str, VictimSet], expected: str) -> None:
    assert best_node(sets) == expected


def test_victim_set_of_counts_violations() -> None:
    candidates = [c("a", 1, 1, "ns/p"), c("b", 1, 1, "ns/p"), c("d", 1, 1)]
    assert VictimSet.of(candidates, ("a", "b", "d"), {"ns/p": 1}).violations == 1
    assert VictimSet.of(candidates, ("a", "b", "d")).violations == 0
    assert VictimSet.of(candidates, ("d",), {}).violations == 0


def test_reclaim_policy_fields() -> None:
    policy = parse_policy("x", VALID).policy
    assert policy == ReclaimPolicy(500, 3600, 1800, 10.0)
