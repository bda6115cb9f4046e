"""scheduler.victims.preemption: victims per node with reprieve, budget ordering, the node pick's
tie-breaks, preemptionPolicy Never, equal priority never a victim. Plain data only."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.victims.preemption import (
    NEVER_MESSAGE,
    PRIORITY_OFFSET,
    Candidate,
    NodeVictims,
    candidate_limit,
    enough_candidates,
    nodes_in_order,
    pick_node,
    preemptor_not_eligible,
    select_victims,
    split_by_budget,
)


def room(sizes: dict[str, int], needed: int, free: int = 0) -> Callable[[frozenset[str]], bool]:
    """A node with `free` units; pods hold `sizes`; the preemptor needs `needed` units."""

    def fits(removed: frozenset[str]) -> bool:
        return free + sum(sizes[k] for k in removed) >= needed

    return fits


def keys(victims: NodeVictims | None) -> list[str]:
    assert victims is not None
    return [v.key for v in victims.victims]


# -- select_victims -----------------------------------------------------------------------------


def test_reprieve_keeps_the_most_important_and_takes_the_minimal_set() -> None:
    pods = [Candidate("low", 1), Candidate("mid", 5), Candidate("high", 9)]
    # Any one pod frees enough: the two most important are given back, the lowest goes.
    chosen = select_victims(10, pods, room({"low": 1, "mid": 1, "high": 1}, needed=1))
    assert keys(chosen) == ["low"]


def test_reprieve_can_keep_a_low_pod_when_a_higher_one_is_needed_anyway() -> None:
    # "high" alone frees 2 units (all that is needed); "low" holds 1: reprieved high first
    # fails (without high only 1 is free), so high goes and low is given back.
    pods = [Candidate("low", 1), Candidate("high", 9)]
    chosen = select_victims(10, pods, room({"low": 1, "high": 2}, needed=2))
    assert keys(chosen) == ["high"]


def test_equal_priority_is_never_a_victim() -> None:
    pods = [Candidate("same", 10), Candidate("higher", 11)]
    assert select_victims(10, pods, room({"same": 1, "higher": 1}, needed=1)) is None


def test_equal_priority_pods_are_not_removed_in_the_what_if() -> None:
    seen: list[frozenset[str]] = []

    def fits(removed: frozenset[str]) -> bool:
        seen.append(removed)
        return "big" in removed

    pods = [Candidate("low", 1), Candidate("big", 10)]
    assert select_victims(10, pods, fits) is None
    assert seen and all("big" not in removed for removed in seen)


def test_node_where_even_all_lower_pods_are_not_enough_is_no_candidate() -> None:
    pods = [Candidate("a", 1), Candidate("b", 2)]
    assert select_victims(10, pods, room({"a": 1, "b": 1}, needed=3)) is None


def test_budget_violating_victims_are_reprieved_first() -> None:
    # Two equal pods, one needed. "guarded" is less important (lower priority) and would be
    # taken by plain importance, but it violates a budget: it is reprieved first and kept.
    pods = [Candidate("guarded", 1, budgets=("ns/pdb",)), Candidate("free", 2)]
    chosen = select_victims(10, pods, room({"guarded": 1, "free": 1}, needed=1), {"ns/pdb": 0})
    assert keys(chosen) == ["free"]
    assert chosen is not None and chosen.violations == 0


def test_budget_violation_counted_when_the_guarded_pod_must_go() -> None:
    pods = [Candidate("guarded", 1, budgets=("ns/pdb",)), Candidate("free", 2)]
    chosen = select_victims(10, pods, room({"guarded": 1, "free": 1}, needed=2), {"ns/pdb": 0})
    assert chosen is not None and sorted(keys(chosen)) == ["free", "guarded"]
    assert chosen.violations == 1


def test_budget_with_allowance_counts_in_importance_order() -> None:
    # The budget allows one disruption: the more important pod uses it up, the other violates.
    ordered = [Candidate("b", 5, budgets=("p",)), Candidate("a", 1, budgets=("p",))]
    violating, others = split_by_budget(ordered, {"p": 1})
    assert [c.key for c in violating] == ["a"] and [c.key for c in others] == ["b"]


def test_victims_are_listed_most_important_first() -> None:
    pods = [Candidate("a", 1, 100.0), Candidate("b", 3, 100.0), Candidate("c", 3, 50.0)]
    chosen = select_victims(10, pods, room({"a": 1, "b": 1, "c": 1}, needed=3))
    assert keys(chosen) == ["c", "b", "a"]  # priority desc, then the earlier start first


def test_gang_candidate_removes_all_its_members_at_once() -> None:
    gang = Candidate("gang", 1, members=("g1", "g2"))
    seen: list[frozenset[str]] = []

    def fits(removed: frozenset[str]) -> bool:
        seen.append(removed)
        return {"g1", "g2"} <= removed

    chosen = select_victims(10, [gang], fits)
    assert keys(chosen) == ["gang"] and chosen is not None
    assert chosen.pods == {"g1", "g2"}
    assert seen[0] == {"g1", "g2"}


# -- preemptionPolicy ---------------------------------------------------------------------------


def test_never_policy_is_not_eligible_with_kube_schedulers_words() -> None:
    assert preemptor_not_eligible("Never") == NEVER_MESSAGE
    assert NEVER_MESSAGE == "not eligible due to preemptionPolicy=Never."
    assert preemptor_not_eligible("PreemptLowerPriority") is None
    assert preemptor_not_eligible("") is None


# -- pick_node ----------------------------------------------------------------------------------


def nv(*victims: Candidate, violations: int = 0) -> NodeVictims:
    return NodeVictims(tuple(victims), violations)


def test_pick_fewest_budget_violations_first() -> None:
    per_node = {
        "a": nv(Candidate("a1", 1), violations=1),
        "b": nv(Candidate("b1", 9), Candidate("b2", 9)),
    }
    assert pick_node(per_node) == "b"


def test_pick_lowest_highest_priority_then_sum() -> None:
    per_node = {
        "a": nv(Candidate("a1", 5)),
        "b": nv(Candidate("b1", 4), Candidate("b2", 4), Candidate("b3", 4)),
    }
    assert pick_node(per_node) == "b"  # highest 4 < 5, although more victims and a larger sum
    per_node = {
        "a": nv(Candidate("a1", 5), Candidate("a2", 3)),
        "b": nv(Candidate("b1", 5), Candidate("b2", 1)),
    }
    assert pick_node(per_node) == "b"  # same highest, smaller sum


def test_sum_uses_the_offset_so_negative_priorities_do_not_favour_more_victims() -> None:
    per_node = {
        "a": nv(Candidate("a1", -5), Candidate("a2", -5)),
        "b": nv(Candidate("b1", -5)),
    }
    assert pick_node(per_node) == "b"
    assert per_node["b"].priority_sum == -5 + PRIORITY_OFFSET


def test_pick_fewest_victims_when_sums_tie() -> None:
    per_node = {
        "a": nv(Candidate("a1", 2), Candidate("a2", 2)),
        "b": nv(Candidate("b1", 2), Candidate("b2", 2)),
        "c": nv(Candidate("c1", 2), Candidate("c2", 2)),
    }
    assert pick_node(per_node) == "a"  # all tie: the first
    assert nodes_in_order(per_node) == ["a", "b", "c"]


def test_pick_latest_start_among_highest_priority_victims() -> None:
    per_node = {
        "a": nv(Candidate("a1", 3, start_time=100.0), Candidate("a0", 1, start_time=999.0)),
        "b": nv(Candidate("b1", 3, start_time=200.0), Candidate("b0", 1, start_time=1.0)),
    }
    # Same violations, highest, sum, count: b's highest-priority victim started later.
    assert pick_node(per_node) == "b"


def test_unknown_start_time_ranks_last_on_that_criterion() -> None:
    per_node = {
        "a": nv(Candidate("a1", 3, start_time=None)),
        "b": nv(Candidate("b1", 3, start_time=10.0)),
    }
    assert pick_node(per_node) == "b"


def test_order_falls_back_through_every_node() -> None:
    per_node = {
        "x": nv(Candidate("x1", 7)),
        "y": nv(Candidate("y1", 1)),
        "z": nv(Candidate("z1", 3)),
    }
    assert nodes_in_order(per_node) == ["y", "z", "x"]
    assert pick_node({}) is None


# -- spec.preemptionPolicy parsing ----------------------------------------------------------------


def test_preemption_policy_is_parsed_and_a_bad_value_reported_and_never_preempts() -> None:
    from scheduler.model.objects import parse_pod

    def pod(policy: object) -> dict[str, object]:
        spec: dict[str, object] = {"containers": [{"name": "c"}]}
        if policy is not None:
            spec["preemptionPolicy"] = policy
        return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}

    assert parse_pod(pod(None)).preemption_policy == "PreemptLowerPriority"
    assert parse_pod(pod("Never")).preemption_policy == "Never"
    bad = parse_pod(pod("x" * 500))
    assert bad.preemption_policy == "Never"
    (error,) = [e for e in bad.errors if e.field == "spec.preemptionPolicy"]
    assert "PreemptLowerPriority, Never" in error.message and len(error.message) < 200


# -- how many candidate nodes are enough -----------------------------------------------------------


def test_candidate_limit_is_ten_percent_at_least_a_hundred_at_most_all() -> None:
    assert candidate_limit(5) == 5
    assert candidate_limit(500) == 100
    assert candidate_limit(5000) == 500


def test_dry_run_stops_only_with_a_candidate_violating_no_budget() -> None:
    violating = {"a": nv(Candidate("a1", 1), violations=1)}
    assert not enough_candidates(violating, 1)
    assert enough_candidates({**violating, "b": nv(Candidate("b1", 9))}, 2)
    assert not enough_candidates({"b": nv(Candidate("b1", 9))}, 2)
