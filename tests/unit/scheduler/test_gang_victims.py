"""Victims weighed with their gangs, on plain data: which units the eligible pods form, which
units a preemptor (a whole gang, across nodes) takes, and how a gang candidate is costed."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.gangs.planning import gang_priority
from scheduler.victims.gangs import (
    GANG_UNIT_PREFIX,
    VictimGang,
    VictimPod,
    broken_gangs,
    choose_units,
    victim_units,
)
from scheduler.victims.preemption import Candidate, NodeVictims, pick_node, select_victims


def pod(key: str, gpus: int = 2, priority: int = 0, gang: str = "") -> VictimPod:
    return VictimPod(key, priority, gpus, gang)


def gpus_freed(pods: dict[str, VictimPod], needed: int) -> Callable[[frozenset[str]], bool]:
    """A what-if: the preemptor fits once at least `needed` GPUs are freed."""

    def fits(removed: frozenset[str]) -> bool:
        return sum(pods[k].gpus for k in removed) >= needed

    return fits


def test_a_gang_with_disruption_mode_all_is_one_unit_of_every_member() -> None:
    gang = VictimGang("ns/g", min_count=1, disrupt_all=True, members=("ns/a", "ns/b", "ns/c"))
    eligible = [pod("ns/a", 1, 5, "ns/g"), pod("ns/b", 2, 7, "ns/g"), pod("ns/c", 1, 5, "ns/g")]
    units, excluded = victim_units([*eligible, pod("ns/solo")], {"ns/g": gang})
    assert excluded == []
    by_key = {u.key: u for u in units}
    whole = by_key[GANG_UNIT_PREFIX + "ns/g"]
    assert whole.pods == ("ns/a", "ns/b", "ns/c")
    assert (whole.gpus, whole.priority, whole.whole_gang) == (4, 7, True)
    assert set(by_key) == {GANG_UNIT_PREFIX + "ns/g", "ns/solo"}


def test_a_gang_with_one_ineligible_member_is_no_victim_at_all() -> None:
    gang = VictimGang("ns/g", min_count=2, disrupt_all=False, members=("ns/a", "ns/b"))
    units, excluded = victim_units([pod("ns/a", gang="ns/g")], {"ns/g": gang})
    assert units == []
    assert excluded == [
        "gang ns/g is evicted only as a whole and 1 of its 2 members are not eligible (e.g. ns/b)"
    ]


def test_a_gang_with_members_to_spare_gives_single_units() -> None:
    gang = VictimGang("ns/g", min_count=1, disrupt_all=False, members=("ns/a", "ns/b"))
    units, _ = victim_units([pod("ns/a", gang="ns/g"), pod("ns/b", gang="ns/g")], {"ns/g": gang})
    assert [(u.key, u.whole_gang, u.gang) for u in units] == [
        ("ns/a", False, "ns/g"),
        ("ns/b", False, "ns/g"),
    ]
    assert gang.spare == 1
    assert broken_gangs(units[:1], {"ns/g": gang}) == []
    assert broken_gangs(units, {"ns/g": gang}) == ["ns/g"]


def test_choice_removes_all_then_gives_back_most_important_first() -> None:
    pods = {k: pod(k, 2, p) for k, p in [("ns/low", 1), ("ns/mid", 5), ("ns/high", 9)]}
    units, _ = victim_units(pods.values(), {})
    chosen = choose_units(units, gpus_freed(pods, 4))
    assert chosen is not None
    assert [u.key for u in chosen] == ["ns/low", "ns/mid"]  # high given back first


def test_choice_refuses_a_plan_that_leaves_the_preemptor_short() -> None:
    pods = {"ns/a": pod("ns/a", 2), "ns/b": pod("ns/b", 2)}
    units, _ = victim_units(pods.values(), {})
    assert choose_units(units, gpus_freed(pods, 6)) is None
    assert choose_units(units, gpus_freed(pods, 0)) == ()


def test_a_whole_gang_is_taken_with_all_members_or_given_back_whole() -> None:
    gang = VictimGang("ns/g", 2, True, ("ns/g0", "ns/g1"))
    pods = {
        "ns/g0": pod("ns/g0", 1, 1, "ns/g"),
        "ns/g1": pod("ns/g1", 1, 1, "ns/g"),
        "ns/x": pod("ns/x", 2, 3),
    }
    units, _ = victim_units(pods.values(), {"ns/g": gang})
    chosen = choose_units(units, gpus_freed(pods, 3), {"ns/g": gang}, pods)
    assert chosen is not None
    assert sorted(k for u in chosen for k in u.pods) == ["ns/g0", "ns/g1", "ns/x"]
    chosen = choose_units(units, gpus_freed(pods, 2), {"ns/g": gang}, pods)
    assert chosen is not None  # 2 GPUs: the gang alone (least important) is enough
    assert [u.key for u in chosen] == [GANG_UNIT_PREFIX + "ns/g"]


def test_taking_more_members_than_spare_takes_the_whole_gang_or_nothing() -> None:
    gang = VictimGang("ns/g", 1, False, ("ns/a", "ns/b"))
    pods = {"ns/a": pod("ns/a", 2, 1, "ns/g"), "ns/b": pod("ns/b", 2, 1, "ns/g")}
    units, _ = victim_units(pods.values(), {"ns/g": gang})
    chosen = choose_units(units, gpus_freed(pods, 4), {"ns/g": gang}, pods)
    assert chosen is not None
    assert [u.key for u in chosen] == [GANG_UNIT_PREFIX + "ns/g"]
    # a gang with 2 to spare gives single units; with 1 to spare, and its third member not
    # eligible, taking both eligible ones would break it and it cannot go whole: no plan
    gang3 = VictimGang("ns/g", 1, False, ("ns/a", "ns/b", "ns/c"))
    units, _ = victim_units(pods.values(), {"ns/g": gang3})
    assert len(units) == 2  # spare 2: single units
    assert choose_units(units, gpus_freed(pods, 4), {"ns/g": gang3}, pods) is not None
    gang_tight = VictimGang("ns/g", 2, False, ("ns/a", "ns/b", "ns/c"))
    assert choose_units(units, gpus_freed(pods, 4), {"ns/g": gang_tight}, pods) is None


def test_gang_priority_is_the_pod_group_s_else_its_lowest_member_s() -> None:
    assert gang_priority(100, [5, 7]) == 100
    assert gang_priority(None, [5, 7]) == 5
    assert gang_priority(None, []) == 0


def test_a_gang_candidate_costs_every_member() -> None:
    """Two victims of priority 1 on node a cost less than a 3-member gang of priority 1."""
    gang = Candidate("gang:ns/g", 1, members=("ns/g0", "ns/g1", "ns/g2"))
    singles = NodeVictims((Candidate("ns/a", 1), Candidate("ns/b", 1)))
    whole = NodeVictims((gang,))
    assert whole.pod_count == 3
    assert whole.priority_sum > singles.priority_sum
    assert pick_node({"gang-node": whole, "single-node": singles}) == "single-node"


def test_select_victims_removes_a_gang_candidate_with_all_its_members() -> None:
    gang = Candidate("gang:ns/g", 1, members=("ns/g0", "ns/g1"))
    seen: list[frozenset[str]] = []

    def fits(removed: frozenset[str]) -> bool:
        seen.append(removed)
        return {"ns/g0", "ns/g1"} <= removed

    chosen = select_victims(10, [gang, Candidate("ns/x", 2)], fits)
    assert chosen is not None
    assert [c.key for c in chosen.victims] == ["gang:ns/g"]
    assert chosen.pods == {"ns/g0", "ns/g1"}
    assert seen[0] == {"ns/g0", "ns/g1", "ns/x"}


def test_a_pod_group_without_a_class_preempts_with_its_members_priority() -> None:
    from scheduler.gangs.planning import GangRequest
    from scheduler.gangs.tracker import parse_pod_group
    from scheduler.model.objects import parse_pod
    from tests.unit.scheduler.test_gangs import member, pod_group

    members = tuple(parse_pod(member(f"w{i}", priority=p)) for i, p in enumerate((500, 700)))
    defaulted = pod_group()
    defaulted["spec"]["priority"] = 0  # what admission writes without a priorityClassName
    assert GangRequest(parse_pod_group(defaulted), members, 2).priority == 500
    classed = pod_group()
    classed["spec"].update(priorityClassName="high", priority=9000)
    assert GangRequest(parse_pod_group(classed), members, 2).priority == 9000
