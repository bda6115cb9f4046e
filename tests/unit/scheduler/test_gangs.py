"""The gang model (PodGroups, `scheduler.gangs.tracker`) and PreEnqueue for gang members: a member
is held back until its PodGroup exists and minCount of its pods exist, then all are queued."""

from __future__ import annotations

from typing import Any

from scheduler.core.handlers import PodGroupHandler, PodHandler
from scheduler.gangs.tracker import GangTracker, gang_key, parse_pod_group
from scheduler.model.objects import parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import Harness, harness


def pod_group(
    name: str = "pg",
    min_count: int | None = 2,
    topology: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"basic": {}}
        if min_count is None
        else {"gang": {"minCount": min_count}}
    }
    if topology is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": spec,
    }


def member(name: str, group: str = "pg", gpus: int = 1, **kwargs: Any) -> dict[str, Any]:
    pod = make_pod(name, gpus=gpus, **kwargs)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def test_pod_group_is_parsed() -> None:
    group = parse_pod_group(pod_group(min_count=3, topology="rack"))
    assert (group.key, group.gang, group.min_count, group.topology_key) == (
        "default/pg",
        True,
        3,
        "rack",
    )
    assert group.errors == ()
    basic = parse_pod_group(pod_group(min_count=None))
    assert (basic.gang, basic.min_count, basic.topology_key) == (False, 1, "")


def test_pod_names_its_gang() -> None:
    pod = parse_pod(member("a", group="train"))
    assert pod.pod_group == "train"
    assert gang_key(pod) == "default/train"
    assert parse_pod(make_pod("b")).pod_group == ""


def test_bad_gang_reference_is_a_field_error() -> None:
    raw = make_pod("a")
    raw["spec"]["schedulingGroup"] = {"podGroupName": 7}
    pod = parse_pod(raw)
    assert pod.pod_group == ""
    assert [e.field for e in pod.errors] == ["spec.schedulingGroup.podGroupName"]


def test_bad_pod_groups_name_the_field() -> None:
    def fields(raw: dict[str, Any]) -> list[str]:
        return [e.field for e in parse_pod_group(raw).errors]

    zero = pod_group(min_count=0)
    assert fields(zero) == ["spec.schedulingPolicy.gang.minCount"]
    text = pod_group()
    text["spec"]["schedulingPolicy"]["gang"]["minCount"] = "x" * 5000
    error = parse_pod_group(text).errors[0]
    assert error.field == "spec.schedulingPolicy.gang.minCount" and len(str(error)) < 300
    both = pod_group()
    both["spec"]["schedulingPolicy"]["basic"] = {}
    assert fields(both) == ["spec.schedulingPolicy"]
    keyless = pod_group()
    keyless["spec"]["schedulingConstraints"] = {"topology": [{"kee": "rack"}]}
    assert fields(keyless) == ["spec.schedulingConstraints.topology[0].key"]
    not_object = pod_group()
    not_object["spec"] = ["nope"]
    assert "spec" in fields(not_object)


def test_tracker_waits_for_group_and_min_count() -> None:
    tracker = GangTracker()
    assert "does not exist" in tracker.waiting("default/pg")
    tracker.set_group(parse_pod_group(pod_group(min_count=2)))
    tracker.pod_seen(parse_pod(member("a")), pending=True)
    assert tracker.waiting("default/pg") == "waiting for PodGroup pg: 1 of minCount 2 pods exist"
    tracker.pod_seen(parse_pod(member("b", node="n")), pending=False)  # bound members count
    assert tracker.waiting("default/pg") == ""
    assert set(tracker.pending("default/pg")) == {"default/a"}
    tracker.pod_gone("default/b")
    assert tracker.waiting("default/pg") != ""
    tracker.pod_seen(parse_pod(member("b", phase="Succeeded")), pending=False)
    assert tracker.members("default/pg") == {"default/a"}


def gang_handlers() -> tuple[Harness, PodHandler, PodGroupHandler, GangTracker]:
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
    return h, pods, PodGroupHandler(tracker, pods, h.recorder), tracker


async def test_members_are_held_until_the_gang_may_run_then_queued_together() -> None:
    h, pods, groups, tracker = gang_handlers()
    pods.on_add(member("a"))
    pods.on_add(member("b"))
    assert "default/a" not in h.queue and "default/b" not in h.queue
    assert tracker.held == {"default/a", "default/b"}
    groups.on_add(pod_group(min_count=3))
    assert h.queue.pop_nowait() is None  # 2 of minCount 3
    pods.on_add(member("c"))
    assert {h.queue.where(k) for k in ("default/a", "default/b", "default/c")} == {"active"}
    assert tracker.held == set()
    await h.settle()
    messages = [p[2]["status"]["conditions"][0] for p in h.core.patches]
    assert {(m["reason"], m["message"]) for m in messages} == {
        ("SchedulingGated", "waiting for PodGroup pg: it does not exist"),
    }
    assert len(messages) == 2  # once per held pod, not per event


async def test_invalid_pod_group_is_reported_and_its_members_wait() -> None:
    h, pods, groups, _ = gang_handlers()
    pods.on_add(member("a"))
    groups.on_add(pod_group(min_count=-1))
    groups.on_add(pod_group(min_count=-1))  # a relist: reported once
    assert "default/a" not in h.queue
    await h.settle()
    reasons = [e["reason"] for e in h.events.bodies]
    assert reasons == ["InvalidPodGroup"]
    assert "spec.schedulingPolicy.gang.minCount" in h.events.bodies[0]["note"]


async def test_deleting_the_pod_group_holds_queued_members_again() -> None:
    h, pods, groups, tracker = gang_handlers()
    groups.on_add(pod_group(min_count=1))
    pods.on_add(member("a"))
    assert h.queue.where("default/a") == "active"
    groups.on_delete(pod_group(min_count=1))
    assert "default/a" not in h.queue and tracker.held == {"default/a"}
    groups.on_add(pod_group(min_count=1))
    assert h.queue.where("default/a") == "active" and tracker.held == set()
    pods.on_delete(member("a"))
    assert tracker.held == set() and tracker.members("default/pg") == set()
