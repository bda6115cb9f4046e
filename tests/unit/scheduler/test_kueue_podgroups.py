"""Kueue pod groups (`kueue.x-k8s.io/pod-group-name` + `pod-group-total-count`) as the third
source of the gang model: the record made from the members, the wait for Kueue to ungate them
all, a group that does not fully fit binding nothing, and bad counts reported on the pod."""

from __future__ import annotations

from typing import Any, cast

import pytest

from scheduler.core.handlers import PodHandler
from scheduler.gangs.kueue import (
    KUEUE_SOURCE,
    MAX_PROBLEMS,
    TOTAL_COUNT_ANNOTATION,
    TOTAL_COUNT_FIELD,
    InvalidGroupReporter,
    group_problems,
    member_count,
)
from scheduler.gangs.tracker import GangTracker, gang_key
from scheduler.model.fields import FieldError
from scheduler.model.objects import COSCHEDULING_LABEL, KUEUE_GROUP_LABEL, parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import Harness, harness
from tests.unit.scheduler.test_gang_cycle import FakeCustomObjects
from tests.unit.scheduler.test_gangs import member

ADMISSION_GATE = "kueue.x-k8s.io/admission"
GANG = "default/kueue.x-k8s.io/train"


def kueue_member(
    name: str,
    count: str | None = "2",
    group: str = "train",
    gates: tuple[str, ...] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """A pod of Kueue pod group `group` declaring total count `count` (None: no annotation),
    with scheduling gates `gates`."""
    annotations = {} if count is None else {TOTAL_COUNT_ANNOTATION: count}
    pod = make_pod(name, annotations=annotations, **kwargs)
    pod["metadata"]["labels"] = {KUEUE_GROUP_LABEL: group}
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    return pod


# -- parsing --------------------------------------------------------------------------------------


def test_the_group_label_names_a_gang_of_its_own_source() -> None:
    pod = parse_pod(kueue_member("a"))
    assert gang_key(pod) == GANG
    assert gang_key(parse_pod(member("b", group="train"))) == "default/train"
    both = kueue_member("c")
    both["metadata"]["labels"][COSCHEDULING_LABEL] = "cosched"
    assert parse_pod(both).pod_group == "scheduling.x-k8s.io/cosched"  # the other sources win
    plain = make_pod("d")
    assert parse_pod(plain).pod_group == ""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("2", 2), ("1", 1), (" 7 ", 7), ("100000", 100000)],
)
def test_a_total_count_is_read(raw: str, expected: int) -> None:
    assert member_count(parse_pod(kueue_member("a", count=raw))) == expected


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (None, "is missing"),
        ("", "must be an integer, got ''"),
        ("two", "must be an integer, got 'two'"),
        ("-1", "must be an integer, got '-1'"),
        ("2.5", "must be an integer"),
        ("\u00b2", "must be an integer"),  # a digit to str.isdigit, not to int()
        ("0", "must be between 1 and 100000, got '0'"),
        ("100001", "must be between 1 and 100000, got '100001'"),
        ("9" * 5000, "must be an integer, got '9999"),
    ],
)
def test_a_bad_total_count_names_the_annotation_bounded(raw: str | None, says: str) -> None:
    error = member_count(parse_pod(kueue_member("a", count=raw)))
    assert isinstance(error, FieldError)
    assert error.field == TOTAL_COUNT_FIELD
    assert says in error.message
    assert len(str(error)) < 250


def test_group_problems_name_the_pods_and_are_bounded() -> None:
    assert group_problems({"default/a": 3, "default/b": 3}) == (3, ())
    bad = FieldError(TOTAL_COUNT_FIELD, "must be an integer, got 'x'")
    count, problems = group_problems({"default/b": 3, "default/a": bad})
    assert count == 1
    assert [str(p) for p in problems] == [f"pod a {TOTAL_COUNT_FIELD}: must be an integer, got 'x'"]
    count, problems = group_problems({"default/a": 2, "default/b": 3})
    assert (count, [p.message for p in problems]) == (
        1,
        ["the group's pods disagree: pod a says 2, pod b says 3"],
    )
    many = {f"default/{'p' * 500}{i:03}": bad for i in range(200)}
    count, problems = group_problems(many)
    assert len(problems) == MAX_PROBLEMS
    assert all(len(str(p)) < 300 for p in problems)


# -- the tracker ----------------------------------------------------------------------------------


def test_the_record_comes_from_the_members_and_goes_with_the_last() -> None:
    tracker = GangTracker()
    tracker.pod_seen(parse_pod(kueue_member("a", count="3")), pending=True)
    group = tracker.groups[GANG]
    assert (group.name, group.gang, group.min_count, group.source, group.errors) == (
        "train",
        True,
        3,
        KUEUE_SOURCE,
        (),
    )
    assert tracker.waiting(GANG) == (
        "waiting for Kueue pod group train: 1 of its total count 3 pods exist without "
        "scheduling gates (admitted)"
    )
    tracker.pod_seen(parse_pod(kueue_member("b", count="3")), pending=True)
    tracker.pod_seen(parse_pod(kueue_member("c", count="3")), pending=True)
    assert tracker.waiting(GANG) == ""
    for key in ("default/a", "default/b", "default/c"):
        tracker.pod_gone(key, GANG)
    assert GANG not in tracker.groups


def test_a_pod_relabelled_out_of_a_group_no_longer_declares_its_count() -> None:
    tracker = GangTracker()
    tracker.pod_seen(parse_pod(kueue_member("a", count="2")), pending=True)
    tracker.pod_seen(parse_pod(kueue_member("b", count="bad")), pending=True)
    assert tracker.groups[GANG].errors
    tracker.pod_seen(parse_pod(kueue_member("b", count="bad", group="other")), pending=True)
    assert tracker.groups[GANG].errors == ()
    assert tracker.groups["default/kueue.x-k8s.io/other"].errors
    tracker.pod_seen(parse_pod(make_pod("b")), pending=True)  # label removed
    assert "default/kueue.x-k8s.io/other" not in tracker.groups
    tracker.pod_gone("default/a")
    assert tracker.groups == {}


def test_gated_members_do_not_count_until_kueue_ungates_them() -> None:
    tracker = GangTracker()
    for name in ("a", "b"):
        tracker.pod_seen(parse_pod(kueue_member(name, gates=(ADMISSION_GATE,))), pending=False)
    assert "0 of its total count 2" in tracker.waiting(GANG)
    tracker.pod_seen(parse_pod(kueue_member("a")), pending=True)  # ungated
    assert "1 of its total count 2" in tracker.waiting(GANG)
    tracker.pod_seen(parse_pod(kueue_member("b")), pending=True)
    assert tracker.waiting(GANG) == ""


def test_a_bad_or_disagreeing_count_makes_the_group_wait() -> None:
    tracker = GangTracker()
    tracker.pod_seen(parse_pod(kueue_member("a", count="2")), pending=True)
    tracker.pod_seen(parse_pod(kueue_member("b", count="many")), pending=True)
    assert tracker.waiting(GANG) == (
        "waiting for Kueue pod group train: it is invalid: pod b "
        f"{TOTAL_COUNT_FIELD}: must be an integer, got 'many'"
    )
    tracker.pod_seen(parse_pod(kueue_member("b", count="3")), pending=True)
    assert "the group's pods disagree: pod a says 2, pod b says 3" in tracker.waiting(GANG)
    tracker.pod_seen(parse_pod(kueue_member("b", count="2")), pending=True)
    assert tracker.waiting(GANG) == ""


# -- handlers and the gang cycle ------------------------------------------------------------------


def setup(*nodes: dict[str, Any]) -> tuple[Harness, PodHandler, GangTracker]:
    h = harness(cluster(*nodes))
    tracker = GangTracker()
    h.scheduler.gangs = tracker
    h.scheduler.custom = cast(Any, FakeCustomObjects())
    pods = PodHandler(
        h.context,
        h.queue,
        h.scheduler.pod_gone,
        h.scheduler.pod_gated,
        gangs=tracker,
        gang_waiting=InvalidGroupReporter(h.recorder, h.scheduler.pod_waiting),
    )
    return h, pods, tracker


async def test_an_admitted_group_is_queued_and_bound_together() -> None:
    h, pods, tracker = setup(make_node("a", gpus=8))
    for name in ("w0", "w1"):
        pods.on_add(kueue_member(name, gpus=4, gates=(ADMISSION_GATE,)))
    assert len(h.queue) == 0 and tracker.held == set()
    pods.on_add(kueue_member("w0", gpus=4))  # Kueue ungates one pod at a time
    assert "default/w0" not in h.queue and tracker.held == {"default/w0"}
    pods.on_add(kueue_member("w1", gpus=4))
    assert {h.queue.where(k) for k in ("default/w0", "default/w1")} == {"active"}
    await h.cycle()
    assert h.scheduler.bound == 2
    assert {h.cache.pods[f"default/{n}"].node for n in ("w0", "w1")} == {"a"}
    assert not [e for e in h.events.bodies if e["reason"] == "FailedScheduling"]
    # No PodGroup object: nothing is patched for the group.
    custom = h.scheduler.custom
    assert isinstance(custom, FakeCustomObjects) and custom.patches == []


async def test_an_admitted_group_that_does_not_fully_fit_binds_nothing() -> None:
    h, pods, _ = setup(make_node("a", gpus=8))
    for name in ("w0", "w1", "w2"):
        pods.on_add(kueue_member(name, count="3", gpus=4))
    await h.cycle()
    assert h.scheduler.bound == 0
    assert not any(h.cache.is_assumed(f"default/w{i}") for i in range(3))
    assert h.cache.node_gpus_used("a").sum() == 0
    assert {h.queue.where(f"default/w{i}") for i in range(3)} == {"unschedulable"}
    notes = {e["note"] for e in h.events.bodies if e["reason"] == "FailedScheduling"}
    (note,) = notes
    assert note.startswith("gang train: only 2 of minCount 3 members fit: ")


async def test_a_bad_count_is_an_event_on_the_pod_naming_the_annotation_once() -> None:
    h, pods, tracker = setup(make_node("a", gpus=8))
    pods.on_add(kueue_member("good", count="2"))
    pods.on_add(kueue_member("bad", count="x" * 5000))
    pods.on_add(kueue_member("bad", count="x" * 5000))  # a relist: reported once
    assert tracker.held == {"default/good", "default/bad"}
    assert len(h.queue) == 0
    await h.settle()
    events = [e for e in h.events.bodies if e["reason"] == "InvalidPodGroup"]
    assert [e["regarding"]["name"] for e in events] == ["bad"]
    (event,) = events
    assert event["type"] == "Warning"
    assert event["note"].startswith(f"pod bad: {TOTAL_COUNT_FIELD}: must be an integer, got 'xxx")
    assert len(event["note"]) < 250
    # The bad pod shows why it waits, naming itself and the annotation, bounded.
    (message,) = [
        p[2]["status"]["conditions"][0]["message"] for p in h.core.patches if p[1] == "bad"
    ]
    assert message.startswith(
        f"waiting for Kueue pod group train: it is invalid: pod bad {TOTAL_COUNT_FIELD}: "
        "must be an integer, got 'xxx"
    )
    assert message.endswith("(5000 characters)") and len(message) < 300
    # Fixed (a re-created pod): the group runs.
    pods.on_delete(kueue_member("bad", count="x"))
    pods.on_add(kueue_member("bad2", count="2"))
    assert {h.queue.where(k) for k in ("default/good", "default/bad2")} == {"active"}
