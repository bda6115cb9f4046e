"""scheduler-plugins coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1) and labelled pods feed
the same gang model as the v1beta1 PodGroups, under keys that never collide with theirs."""

from __future__ import annotations

from typing import Any

from scheduler.core.coscheduling import CoschedulingGroupHandler
from scheduler.core.handlers import PodHandler
from scheduler.gangs.tracker import (
    COSCHEDULING_SOURCE,
    GangTracker,
    gang_key,
    parse_coscheduling_group,
    parse_pod_group,
)
from scheduler.model.objects import COSCHEDULING_LABEL, parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import harness
from tests.unit.scheduler.test_gangs import member, pod_group


def cosched_group(name: str = "pg", min_member: Any = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": COSCHEDULING_SOURCE,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"minMember": min_member, **spec},
    }


def labelled(name: str, group: str = "pg", **kwargs: Any) -> dict[str, Any]:
    pod = make_pod(name, **kwargs)
    pod["metadata"].setdefault("labels", {})[COSCHEDULING_LABEL] = group
    return pod


def test_min_member_is_the_min_count_and_the_timeout_is_kept() -> None:
    group = parse_coscheduling_group(cosched_group(min_member=3, scheduleTimeoutSeconds=60))
    assert (group.key, group.name, group.gang, group.min_count) == (
        "default/scheduling.x-k8s.io/pg",
        "pg",
        True,
        3,
    )
    assert (group.source, group.schedule_timeout_seconds, group.errors) == (
        COSCHEDULING_SOURCE,
        60,
        (),
    )
    assert parse_pod_group(pod_group()).source == "scheduling.k8s.io/v1beta1"


def test_bad_coscheduling_groups_name_the_field() -> None:
    def fields(raw: dict[str, Any]) -> list[str]:
        return [e.field for e in parse_coscheduling_group(raw).errors]

    assert fields(cosched_group(min_member=0)) == ["spec.minMember"]
    assert fields(cosched_group(min_member=None)) == ["spec.minMember"]
    assert fields(cosched_group(scheduleTimeoutSeconds="soon")) == ["spec.scheduleTimeoutSeconds"]
    long = parse_coscheduling_group(cosched_group(min_member="x" * 5000)).errors[0]
    assert len(str(long)) < 300


def test_labelled_pod_joins_a_source_qualified_gang() -> None:
    pod = parse_pod(labelled("a", group="train"))
    assert gang_key(pod) == "default/scheduling.x-k8s.io/train"
    v1beta1 = parse_pod(member("b", group="train"))
    assert gang_key(v1beta1) == "default/train"  # same name, another gang


def test_pod_group_api_wins_over_the_label() -> None:
    both = member("a", group="api")
    both["metadata"].setdefault("labels", {})[COSCHEDULING_LABEL] = "label"
    assert parse_pod(both).pod_group == "api"


def test_same_named_groups_of_both_sources_are_separate_gangs() -> None:
    tracker = GangTracker()
    tracker.set_group(parse_pod_group(pod_group(min_count=1)))
    tracker.set_group(parse_coscheduling_group(cosched_group(min_member=2)))
    tracker.pod_seen(parse_pod(labelled("a")), pending=True)
    assert tracker.waiting("default/pg") == "waiting for PodGroup pg: 0 of minCount 1 pods exist"
    assert tracker.waiting("default/scheduling.x-k8s.io/pg") == (
        "waiting for PodGroup scheduling.x-k8s.io/pg: 1 of minCount 2 pods exist"
    )
    tracker.pod_seen(parse_pod(labelled("b")), pending=True)
    assert tracker.waiting("default/scheduling.x-k8s.io/pg") == ""
    assert tracker.members("default/pg") == set()


async def test_labelled_members_are_held_then_queued_by_their_pod_group() -> None:
    h = harness(cluster(make_node("n")))
    tracker = GangTracker()
    pods = PodHandler(
        h.context,
        h.queue,
        h.scheduler.pod_gone,
        h.scheduler.pod_gated,
        gangs=tracker,
        gang_waiting=h.scheduler.pod_waiting,
    )
    groups = CoschedulingGroupHandler(tracker, pods, h.recorder)
    pods.on_add(labelled("a"))
    pods.on_add(labelled("b"))
    assert tracker.held == {"default/a", "default/b"}
    groups.on_add(cosched_group(min_member=2))
    assert {h.queue.where(k) for k in ("default/a", "default/b")} == {"active"}
    groups.on_delete(cosched_group(min_member=2))
    assert "does not exist" in tracker.waiting("default/scheduling.x-k8s.io/pg")
