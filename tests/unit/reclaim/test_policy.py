"""Reclaim policy: annotation parsing, eligibility, victim choice per node, best node."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reclaim.policy import (
    MINIMUM_PREEMPTABLE_PRIORITY,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
    TOLERATION_SECONDS,
    Candidate,
    EligibilityReason,
    PolicyResult,
    PolicyStatus,
    ReclaimPolicy,
    VictimFacts,
    VictimSet,
    best_node,
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


def test_no_annotation_is_no_policy() -> None:
    result = parse_policy("batch", {"other": "x"})
    assert result == PolicyResult("batch", PolicyStatus.NONE)


def test_valid_policy() -> None:
    result = parse_policy("batch", VALID)
    assert result.status is PolicyStatus.VALID
    assert result.policy == ReclaimPolicy(500, 3600, 1800, 10.0)
    assert result.errors == ()


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        (TOLERATION_SECONDS, "-5", "must be an integer from 0 to 31536000 (365 days)"),
        (TOLERATION_SECONDS, "1.5", "must be an integer from 0 to 31536000 (365 days)"),
        (TOLERATION_SECONDS, " 5", "must be an integer from 0 to 31536000 (365 days)"),
        (RESOURCE_IDLE_SECONDS, "0", "must be an integer from 1 to 2592000 (30 days)"),
        (RESOURCE_IDLE_SECONDS, "abc", "must be an integer from 1 to 2592000 (30 days)"),
        (
            MINIMUM_PREEMPTABLE_PRIORITY,
            "1e3",
            "must be an integer (int32: -2147483648 to 2147483647)",
        ),
        (
            MINIMUM_PREEMPTABLE_PRIORITY,
            "2147483648",
            "must be an integer (int32: -2147483648 to 2147483647)",
        ),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "100.5", "must be a number greater than 0 and at most 100"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "-1", "must be a number greater than 0 and at most 100"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "nan", "must be a number greater than 0 and at most 100"),
        (RESOURCE_IDLE_USAGE_THRESHOLD, "", "must be a number greater than 0 and at most 100"),
    ],
)
def test_bad_value_is_invalid_and_named(key: str, value: str, rule: str) -> None:
    result = parse_policy("batch-low", {**VALID, key: value})
    assert result.status is PolicyStatus.INVALID
    assert result.policy is None
    assert result.errors == (f'PriorityClass batch-low: annotation {key}="{value}": {rule}',)


def test_error_message_of_the_issue() -> None:
    result = parse_policy("batch-low", {**VALID, TOLERATION_SECONDS: "-5"})
    assert result.errors == (
        "PriorityClass batch-low: annotation "
        'reclaim-idle-resource.scheduling.x-k8s.io/toleration-seconds="-5": '
        "must be an integer from 0 to 31536000 (365 days)",
    )


def test_missing_keys_are_each_reported() -> None:
    result = parse_policy("batch-low", {TOLERATION_SECONDS: "60", RESOURCE_IDLE_SECONDS: "-1"})
    assert result.status is PolicyStatus.INVALID
    assert len(result.errors) == 3
    assert any(MINIMUM_PREEMPTABLE_PRIORITY in e and "missing" in e for e in result.errors)
    assert any(RESOURCE_IDLE_USAGE_THRESHOLD in e and "missing" in e for e in result.errors)
    assert any(f'{RESOURCE_IDLE_SECONDS}="-1"' in e for e in result.errors)


def test_value_with_quotes_is_escaped_and_long_value_cut() -> None:
    result = parse_policy("c", {**VALID, TOLERATION_SECONDS: 'x"' + "y" * 200})
    (error,) = result.errors
    assert '="x\\"yyy' in error and error.count("y") < 100 and "..." in error


def test_edge_values_are_valid() -> None:
    edges = {
        MINIMUM_PREEMPTABLE_PRIORITY: "-2147483648",
        TOLERATION_SECONDS: "0",
        RESOURCE_IDLE_SECONDS: "1",
        RESOURCE_IDLE_USAGE_THRESHOLD: "100",
    }
    assert parse_policy("c", edges).policy == ReclaimPolicy(-(2**31), 0, 1, 100.0)


NOW = 10_000.0


def victim(priority: int = 1000, scheduled_at: float | None = NOW - 7200) -> VictimFacts:
    return VictimFacts("ns/idle", priority, "batch", scheduled_at, 2)


def test_inversion_example_reclaims() -> None:
    # The seed's example: victim priority 1000, preemptor 500, minimum 500.
    result = victim_eligibility(victim(priority=1000), 500, parse_policy("batch", VALID), NOW)
    assert result.eligible
    assert result.reason is EligibilityReason.ELIGIBLE
    assert (result.resource_idle_seconds, result.threshold_pct) == (1800, 10.0)


@pytest.mark.parametrize(
    ("facts", "preemptor", "annotations", "reason"),
    [
        (victim(), 10_000, {}, EligibilityReason.NO_POLICY),
        (victim(), 10_000, {**VALID, TOLERATION_SECONDS: "x"}, EligibilityReason.INVALID_POLICY),
        (victim(), 499, VALID, EligibilityReason.PREEMPTOR_PRIORITY_TOO_LOW),
        (victim(scheduled_at=None), 500, VALID, EligibilityReason.UNKNOWN_SCHEDULE_TIME),
        (victim(scheduled_at=NOW - 3600), 500, VALID, EligibilityReason.WITHIN_TOLERATION),
        (victim(scheduled_at=NOW + 60), 500, VALID, EligibilityReason.WITHIN_TOLERATION),
    ],
)
def test_not_eligible(
    facts: VictimFacts, preemptor: int, annotations: dict[str, str], reason: EligibilityReason
) -> None:
    result = victim_eligibility(facts, preemptor, parse_policy("batch", annotations), NOW)
    assert not result.eligible
    assert result.reason is reason
    assert result.resource_idle_seconds is None and result.threshold_pct is None


def test_toleration_is_strict() -> None:
    policy = parse_policy("batch", VALID)
    assert not victim_eligibility(victim(scheduled_at=NOW - 3600), 500, policy, NOW).eligible
    assert victim_eligibility(victim(scheduled_at=NOW - 3600.5), 500, policy, NOW).eligible


def test_policy_of_another_class_is_a_bug() -> None:
    with pytest.raises(ValueError):
        victim_eligibility(victim(), 500, parse_policy("other", VALID), NOW)


def c(key: str, priority: int, gpus: int) -> Candidate:
    return Candidate(key, priority, gpus)


def test_order_candidates() -> None:
    ordered = order_candidates([c("b", 5, 2), c("a", 5, 2), c("x", 1, 2), c("big", 9, 4)])
    assert [x.key for x in ordered] == ["big", "x", "a", "b"]


def needs_gpus(count: int, candidates: list[Candidate]) -> Callable[[frozenset[str]], bool]:
    by_key = {x.key: x for x in candidates}
    return lambda removed: sum(by_key[k].gpus for k in removed) >= count


def test_choose_takes_until_fit_then_reprieves() -> None:
    candidates = order_candidates([c("big", 10, 4), c("p5", 5, 2), c("p1", 1, 2), c("one", 0, 1)])
    assert choose_victims(candidates, needs_gpus(2, candidates)) == ("big",)
    assert choose_victims(candidates, needs_gpus(5, candidates)) == ("big", "p1")
    assert choose_victims(candidates, needs_gpus(10, candidates)) is None
    assert choose_victims(candidates, needs_gpus(0, candidates)) == ()


def test_reprieve_gives_back_victims_not_needed_most_important_first() -> None:
    candidates = order_candidates([c("a", 100, 4), c("b", 50, 2), c("d", 10, 1)])
    calls: list[frozenset[str]] = []

    def fits(removed: frozenset[str]) -> bool:  # only "d" blocks the preemptor (e.g. its domain)
        calls.append(removed)
        return "d" in removed

    assert choose_victims(candidates, fits) == ("d",)
    # Taken a, b, d; then "a" is tried first (highest priority), then "b", then "d".
    assert calls[-3:] == [frozenset({"b", "d"}), frozenset({"d"}), frozenset()]


def test_reprieve_order_most_important_then_more_gpus() -> None:
    victims = [c("small", 5, 1), c("low", 1, 8), c("large", 5, 2), c("large2", 5, 2)]
    assert [v.key for v in reprieve_order(victims)] == ["large", "large2", "small", "low"]


def test_best_node() -> None:
    one_big = VictimSet((c("a", 1, 4),))
    two_small = VictimSet((c("b", 1, 1), c("c", 1, 1)))
    one_small_high = VictimSet((c("d", 100, 1),))
    one_small_low = VictimSet((c("e", 1, 1),))
    assert best_node({"n1": two_small, "n2": one_big}) == "n2"
    assert best_node({"n1": one_big, "n2": one_small_high}) == "n2"
    assert best_node({"n1": one_small_high, "n2": one_small_low}) == "n2"
    assert best_node({"n2": one_small_low, "n1": VictimSet((c("f", 1, 1),))}) == "n1"
    assert best_node({"n1": one_big, "n0": VictimSet(())}) == "n0"
    assert best_node({}) is None


def test_best_node_highest_priority_breaks_equal_sums() -> None:
    spread = VictimSet((c("a", 0, 1), c("b", 10, 1)))
    even = VictimSet((c("c", 5, 1), c("d", 5, 1)))
    assert best_node({"a-node": spread, "b-node": even}) == "b-node"


def test_victim_set_of() -> None:
    candidates = [c("a", 1, 2), c("b", 3, 1)]
    chosen = VictimSet.of(candidates, ("b", "a"))
    assert [v.key for v in chosen.victims] == ["b", "a"]
    assert (chosen.count, chosen.gpus, chosen.priority_sum, chosen.highest_priority) == (2, 3, 4, 3)
