"""What reclaim's policy code says, word for word: these messages reach Events and log lines,
and the length limits of the annotation values hold exactly at their bounds."""

from __future__ import annotations

import pytest

from reclaim.policy import (
    MAX_QUOTED_VALUE,
    MAX_VALUE_CHARS,
    MINIMUM_PREEMPTABLE_PRIORITY,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
    TOLERATION_SECONDS,
    EligibilityReason,
    PolicyStatus,
    VictimFacts,
    parse_policy,
    victim_eligibility,
)

VALID = {
    MINIMUM_PREEMPTABLE_PRIORITY: "500",
    TOLERATION_SECONDS: "600",
    RESOURCE_IDLE_SECONDS: "3600",
    RESOURCE_IDLE_USAGE_THRESHOLD: "10",
}
NOW = 10_000.0


def victim(scheduled_at: float | None, klass: str = "notebooks") -> VictimFacts:
    return VictimFacts("ns/nb", 1000, klass, scheduled_at, 1)


@pytest.mark.parametrize(
    ("annotations", "preemptor", "scheduled_at", "reason", "message"),
    [
        (
            {},
            1000,
            0.0,
            EligibilityReason.NO_POLICY,
            "PriorityClass 'notebooks' has no reclaim policy",
        ),
        (
            {**VALID, TOLERATION_SECONDS: "soon"},
            1000,
            0.0,
            EligibilityReason.INVALID_POLICY,
            "PriorityClass 'notebooks' has an invalid reclaim policy",
        ),
        (
            VALID,
            499,
            0.0,
            EligibilityReason.PREEMPTOR_PRIORITY_TOO_LOW,
            "preemptor priority 499 < minimum-preemptable-priority 500",
        ),
        (
            VALID,
            500,
            None,
            EligibilityReason.UNKNOWN_SCHEDULE_TIME,
            "the pod's schedule time is unknown",
        ),
        (
            VALID,
            500,
            NOW - 0.4,
            EligibilityReason.WITHIN_TOLERATION,
            "scheduled 0 s ago, within toleration 600 s",
        ),
        (
            VALID,
            500,
            NOW + 30.0,
            EligibilityReason.WITHIN_TOLERATION,
            "scheduled 0 s ago, within toleration 600 s",
        ),
        (
            VALID,
            500,
            NOW - 900.0,
            EligibilityReason.ELIGIBLE,
            "scheduled 900 s ago, past toleration 600 s",
        ),
    ],
)
def test_each_verdict_says_why(
    annotations: dict[str, str],
    preemptor: int,
    scheduled_at: float | None,
    reason: EligibilityReason,
    message: str,
) -> None:
    result = victim_eligibility(
        victim(scheduled_at), preemptor, parse_policy("notebooks", annotations), NOW
    )
    assert (result.reason, result.message) == (reason, message)


def test_a_policy_of_another_class_is_refused_naming_both() -> None:
    with pytest.raises(ValueError) as raised:
        victim_eligibility(victim(0.0), 1000, parse_policy("batch", VALID), NOW)
    assert str(raised.value) == (
        "policy of PriorityClass 'batch' given for pod ns/nb of PriorityClass 'notebooks'"
    )


@pytest.mark.parametrize("key", [MINIMUM_PREEMPTABLE_PRIORITY, RESOURCE_IDLE_USAGE_THRESHOLD])
def test_values_of_exactly_the_longest_length_are_read(key: str) -> None:
    padded = "0" * (MAX_VALUE_CHARS - 2) + "10"  # 32 characters, value 10
    assert len(padded) == MAX_VALUE_CHARS
    assert parse_policy("c", {**VALID, key: padded}).status is PolicyStatus.VALID
    assert parse_policy("c", {**VALID, key: "0" + padded}).status is PolicyStatus.INVALID


def test_echoed_values_are_cut_just_past_the_limit() -> None:
    exact = "x" * MAX_QUOTED_VALUE
    (error,) = parse_policy("c", {**VALID, TOLERATION_SECONDS: exact}).errors
    assert exact in error and "..." not in error
    (error,) = parse_policy("c", {**VALID, TOLERATION_SECONDS: exact + "y"}).errors
    assert exact + "..." in error and exact + "y" not in error


def test_a_pod_without_a_priority_class_is_named_so_not_as_an_empty_class() -> None:
    facts = VictimFacts("ns/plain", 0, "", 0.0, 1)
    result = victim_eligibility(facts, 1000, parse_policy("", {}), NOW)
    assert (result.reason, result.message) == (
        EligibilityReason.NO_POLICY,
        "no PriorityClass, so not reclaimable",
    )
