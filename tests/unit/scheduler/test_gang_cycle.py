"""Gang cycles on plain data (in-memory doubles): all members of a gang placed at once, or none;
the gang packed on few nodes; a topology key keeps it on one label value."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from scheduler.config import SchedulerConfig
from scheduler.config.scoring import ScoringConfig
from scheduler.core.handlers import PodGroupHandler, PodHandler
from scheduler.core.profile import default_framework
from scheduler.gangs import planning as gang_cycle
from scheduler.gangs.planning import GangRequest, plan_gang
from scheduler.gangs.tracker import GangTracker
from scheduler.model.objects import parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import FakeResponse, Harness, harness
from tests.unit.scheduler.test_gangs import member, pod_group


class FakeCustomObjects:
    """PodGroup status patches: (namespace, name, body) each."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    async def patch_namespaced_custom_object_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any, **_: Any
    ) -> FakeResponse:
        assert (group, version, plural) == ("scheduling.k8s.io", "v1beta1", "podgroups")
        self.patches.append((namespace, name, body))
        return FakeResponse(200)


def conditions(h: Harness) -> list[tuple[str, str, str]]:
    custom = h.scheduler.custom
    assert isinstance(custom, FakeCustomObjects)
    found = []
    for _, _, body in custom.patches:
        (condition,) = body["status"]["conditions"]
        assert condition["type"] == "PodGroupInitiallyScheduled"
        found.append((condition["status"], condition["reason"], condition["message"]))
    return found


def setup(
    *nodes: dict[str, Any], blockers: tuple[dict[str, Any], ...] = ()
) -> tuple[Harness, PodHandler, PodGroupHandler]:
    h = harness(cluster(*nodes, pods=blockers))
    tracker = GangTracker()
    h.scheduler.gangs = tracker
    h.scheduler.custom = cast(Any, FakeCustomObjects())
    pods = PodHandler(
        h.context,
        h.queue,
        h.scheduler.pod_gone,
        h.scheduler.pod_gated,
        gangs=tracker,
        gang_waiting=h.scheduler.pod_waiting,
    )
    return h, pods, PodGroupHandler(tracker, pods, h.recorder)


def nodes_of(h: Harness, *names: str) -> dict[str, str]:
    return {n: h.cache.pods[f"default/{n}"].node for n in names if f"default/{n}" in h.cache.pods}


async def test_four_two_gpu_members_share_one_eight_gpu_node() -> None:
    small = [make_node(f"small-{i}", gpus=2) for i in range(4)]
    h, pods, groups = setup(*small, make_node("big", gpus=8))
    groups.on_add(pod_group(min_count=4))
    names = [f"w{i}" for i in range(4)]
    for name in names:
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert set(nodes_of(h, *names).values()) == {"big"}
    assert h.scheduler.bound == 4
    assert len(h.queue) == 0


async def test_gang_that_cannot_fit_binds_nothing() -> None:
    h, pods, groups = setup(make_node("a", gpus=4), make_node("b", gpus=1))
    groups.on_add(pod_group(min_count=3))
    for name in ("w0", "w1", "w2"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()  # one cycle for the whole gang: 2 of 3 fit, so none is placed
    assert h.scheduler.bound == 0
    assert not any(h.cache.is_assumed(f"default/w{i}") for i in range(3))
    assert h.cache.node_gpus_used("a").sum() == 0
    assert {h.queue.where(f"default/w{i}") for i in range(3)} == {"unschedulable"}
    notes = {e["note"] for e in h.events.bodies if e["reason"] == "FailedScheduling"}
    assert len(notes) == 1
    (note,) = notes
    assert note.startswith("gang pg: only 2 of minCount 3 members fit: ")
    assert "Insufficient nvidia.com/gpu" in note
    assert conditions(h) == [("False", "Unschedulable", note)]


async def test_min_count_below_members_binds_all_that_fit() -> None:
    h, pods, groups = setup(make_node("a", gpus=4))
    groups.on_add(pod_group(min_count=2))
    for name in ("w0", "w1", "w2"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert h.scheduler.bound == 2
    left = [k for k in ("default/w0", "default/w1", "default/w2") if k not in h.cache.pods]
    assert len(left) == 1 and h.queue.where(left[0]) == "unschedulable"


def test_topology_key_keeps_the_gang_on_one_value_best_first() -> None:
    cache = cluster(
        make_node("r1-a", gpus=4, labels={"rack": "r1"}),
        make_node("r2-a", gpus=4, labels={"rack": "r2"}),
        make_node("r2-b", gpus=4, labels={"rack": "r2"}),
        make_node("nolabel", gpus=8),
    )
    members = [parse_pod(member(f"w{i}", gpus=4)) for i in range(2)]
    framework = default_framework(SchedulerConfig())
    plan = plan_gang(cache, framework, members, 2, "rack")
    assert plan.fits and plan.topology_value == "r2"
    assert {p.node for p in plan.placed} == {"r2-a", "r2-b"}
    assert all(cache.is_assumed(p.pod.key) for p in plan.placed)


def test_members_pack_on_the_gangs_nodes_or_each_take_their_best_node() -> None:
    # A 2+1+1+1 gang: packed, its members fill one free 8-GPU node (one node, 5 GPUs of it);
    # placed by score alone, each takes the node the NVLink score prefers for its size, and
    # the 8-GPU node stays whole.
    def plan(pack: bool) -> dict[str, str]:
        cache = cluster(
            make_node("big", gpus=8, domains="0-3,4-7"),
            make_node("four", gpus=4, domains="0-1,2-3"),
            make_node("two-a", gpus=2),
            make_node("two-b", gpus=2),
        )
        sizes = {"w0": 2, "w1": 1, "w2": 1, "w3": 1}
        members = [parse_pod(member(name, gpus=gpus)) for name, gpus in sizes.items()]
        settings = SchedulerConfig(scoring=ScoringConfig(pack_gang_members=pack))
        placed = plan_gang(cache, default_framework(settings), members, 4)
        assert placed.fits
        return {p.pod.name: p.node for p in placed.placed}

    assert set(plan(pack=True).values()) == {"big"}
    unpacked = plan(pack=False)
    assert "big" not in unpacked.values()
    assert unpacked["w0"] in ("two-a", "two-b", "four")


def test_topology_failure_forgets_every_assumption() -> None:
    cache = cluster(
        make_node("r1-a", gpus=4, labels={"rack": "r1"}),
        make_node("r2-a", gpus=4, labels={"rack": "r2"}),
    )
    members = [parse_pod(member(f"w{i}", gpus=4)) for i in range(2)]
    plan = plan_gang(cache, default_framework(SchedulerConfig()), members, 2, "rack")
    assert not plan.fits and plan.best == 1
    assert cache.pods == {}
    assert all(r.startswith("rack=r") for r in plan.unplaced.values())


def fragmented_racks() -> Any:
    """Rack r1: three 4-GPU nodes with 3 GPUs free each (9 free, no room for a 4-GPU member);
    rack r2: two free 4-GPU nodes (8 free); a node of rack r3 with 2 free."""
    nodes = [make_node(f"r1-{i}", gpus=4, labels={"rack": "r1"}) for i in range(3)]
    nodes += [make_node(f"r2-{i}", gpus=4, labels={"rack": "r2"}) for i in range(2)]
    nodes.append(make_node("r3-0", gpus=4, labels={"rack": "r3"}))
    used = [make_pod(f"used-{i}", gpus=1, node=f"r1-{i}") for i in range(3)]
    used.append(make_pod("used-r3", gpus=2, node="r3-0"))
    return cluster(*nodes, pods=used)


def test_domains_group_rows_by_value_with_free_gpus_and_one_node_slots() -> None:
    cache = fragmented_racks()
    domains = gang_cycle._domains(cache, "rack", set(), 4)
    assert [(d.value, d.free, d.slots) for d in domains] == [
        ("r1", 9, 0),
        ("r2", 8, 2),
        ("r3", 2, 0),
    ]
    names = [[cache.names[int(r)] for r in d.rows] for d in domains]
    assert names == [["r1-0", "r1-1", "r1-2"], ["r2-0", "r2-1"], ["r3-0"]]
    assert int(domains[1].mask().sum()) == 2
    pinned = gang_cycle._domains(cache, "rack", {"r3"}, 2)
    assert [(d.value, d.free, d.slots) for d in pinned] == [("r3", 2, 1)]
    assert gang_cycle._domains(cache, "zone", set(), 4) == []


def test_a_rack_without_one_node_room_per_member_is_not_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = fragmented_racks()
    tried: list[int] = []
    fill = gang_cycle._fill

    def counting_fill(*args: Any) -> Any:
        tried.append(int(args[3].sum()))
        return fill(*args)

    monkeypatch.setattr(gang_cycle, "_fill", counting_fill)
    members = [parse_pod(member(f"w{i}", gpus=4)) for i in range(2)]
    plan = plan_gang(cache, default_framework(SchedulerConfig()), members, 2, "rack")
    assert plan.fits and plan.topology_value == "r2"
    assert tried == [2]  # only r2's two nodes: r1 has 9 free GPUs but no node with 4


async def test_room_appearing_schedules_the_whole_gang() -> None:
    blocker = make_pod("blocker", gpus=4, node="a")
    h, pods, groups = setup(make_node("a", gpus=8), blockers=(blocker,))
    groups.on_add(pod_group(min_count=3))
    for name in ("w0", "w1", "w2"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert h.scheduler.bound == 0
    pods.on_delete(blocker)  # room: the unschedulable members move back
    h.after_backoff(1)
    await h.cycle()
    assert h.scheduler.bound == 3
    assert [c[:2] for c in conditions(h)] == [("False", "Unschedulable"), ("True", "Scheduled")]
    assert conditions(h)[1][2] == "3 of minCount 3 members bound"


def test_take_pops_waiting_members_wherever_they_are() -> None:
    h = harness(cluster(make_node("n")))
    for name in ("a", "b", "c"):
        pod = parse_pod(member(name))
        h.queue.add(pod.key, 0, pod)
    first = h.queue.pop_nowait()
    assert first is not None and first.key == "default/a"
    taken = h.queue.take(["default/a", "default/b", "default/c", "default/missing"])
    assert [q.key for q in taken] == ["default/b", "default/c"]  # a is in flight already
    assert {h.queue.where(k) for k in ("default/a", "default/b", "default/c")} == {"in_flight"}
    assert len({q.cycle for q in taken}) == 2 and all(q.attempts == 1 for q in taken)
    h.queue.requeue_unschedulable(taken[0])
    assert h.queue.where("default/b") == "unschedulable"


async def test_popped_member_of_a_deleted_group_is_held_not_tried() -> None:
    h, pods, groups = setup(make_node("n"))
    groups.on_add(pod_group(min_count=1))
    pods.on_add(member("a"))
    queued = h.queue.pop_nowait()
    assert queued is not None
    groups.on_delete(pod_group(min_count=1))  # in flight: left alone by the handler
    h.scheduler.schedule_one(queued)
    await h.settle()
    assert h.scheduler.bound == 0 and "default/a" not in h.queue
    assert h.scheduler.gangs is not None and h.scheduler.gangs.held == {"default/a"}
    assert h.core.condition_messages() == ["waiting for PodGroup pg: it does not exist"]


async def test_members_bound_earlier_count_and_pin_the_topology_value() -> None:
    h, pods, groups = setup(
        make_node("r1-a", gpus=8, labels={"rack": "r1"}),
        make_node("r2-a", gpus=4, labels={"rack": "r2"}),
    )
    groups.on_add(pod_group(min_count=2, topology="rack"))
    pods.on_add(member("w0", gpus=2, node="r2-a"))  # bound before (e.g. a retried member)
    pods.on_add(member("w1", gpus=2))
    await h.cycle()
    assert nodes_of(h, "w1") == {"w1": "r2-a"}  # r1 has more free GPUs, but the gang is on r2
    assert [c[:2] for c in conditions(h)] == [("True", "Scheduled")]


async def test_a_binding_refused_with_an_api_error_sets_scheduler_error() -> None:
    h, pods, groups = setup(make_node("a", gpus=4))
    groups.on_add(pod_group(min_count=2))
    h.core.bind_outcomes = [201, (500, "etcdserver: request timed out")]
    for name in ("w0", "w1"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert h.scheduler.bound == 1
    ((status, reason, message),) = conditions(h)
    assert (status, reason) == ("False", "SchedulerError")
    assert message.startswith("gang pg: binding 1 member(s) failed, 1 of minCount 2 bound: ")
    assert "etcdserver: request timed out" in message


async def test_a_member_that_went_away_is_no_scheduler_error() -> None:
    h, pods, groups = setup(make_node("a", gpus=4))
    groups.on_add(pod_group(min_count=2))
    h.core.bind_outcomes = [201, (404, 'pods "w1" not found')]
    for name in ("w0", "w1"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert conditions(h) == []


class GangPostFilterDouble:
    """Records the gang requests handed to the PostFilter."""

    def __init__(self) -> None:
        self.requests: list[GangRequest] = []
        self.enabled = True

    def cooling_down(self, gang: str) -> bool:
        return False

    async def attempt(self, request: GangRequest) -> bool:
        self.requests.append(request)
        return False


async def test_a_gang_that_does_not_fit_goes_to_the_gang_post_filter_whole() -> None:
    h, pods, groups = setup(make_node("a", gpus=4), make_node("b", gpus=1))
    post_filter = GangPostFilterDouble()
    h.scheduler.gang_post_filter = post_filter
    groups.on_add(pod_group(min_count=3))
    for name in ("w0", "w1", "w2"):
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    (request,) = post_filter.requests
    assert sorted(m.name for m in request.members) == ["w0", "w1", "w2"]
    assert (request.group.key, request.need) == ("default/pg", 3)


async def test_room_reserved_for_the_members_is_their_own() -> None:
    """Reclaim reserved a's GPUs for the members: their gang cycle may use them, and once the
    gang is placed the reservations are gone."""
    h, pods, groups = setup(make_node("a", gpus=4))
    groups.on_add(pod_group(min_count=2))
    for name in ("w0", "w1"):
        info = parse_pod(member(name, gpus=2))
        h.cache.reserve(info, "a", (0, 1) if name == "w0" else (2, 3), 0.0)
        pods.on_add(member(name, gpus=2))
    await h.cycle()
    assert h.scheduler.bound == 2
    assert h.cache.reservation("default/w0") is None
    assert h.cache.reservation("default/w1") is None
    assert h.cache.node_gpus_used("a").sum() == 4


async def test_a_gang_with_an_invalid_member_never_reaches_the_post_filter() -> None:
    """minCount 2 and one of the two members has an invalid field: no eviction could ever let
    the gang start, so the PostFilter is not asked."""
    h, pods, groups = setup(make_node("a", gpus=1))
    post_filter = GangPostFilterDouble()
    h.scheduler.gang_post_filter = post_filter
    groups.on_add(pod_group(min_count=2))
    bad = member("w1", gpus=2)
    bad["spec"]["preemptionPolicy"] = "Sometimes"
    pods.on_add(member("w0", gpus=2))
    pods.on_add(bad)
    await h.cycle()
    assert post_filter.requests == []
    assert {h.queue.where("default/w0"), h.queue.where("default/w1")} == {"unschedulable"}


async def test_members_that_finish_before_the_binds_return_still_count_as_bound() -> None:
    h, pods, groups = setup(make_node("a", gpus=4))
    groups.on_add(pod_group(min_count=2))
    for name in ("w0", "w1"):
        pods.on_add(member(name, gpus=2))
    gate = asyncio.Event()
    h.core.bind_gate = gate
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)
    await asyncio.sleep(0)  # the binds are sent and wait for their answer
    for name in ("w0", "w1"):  # a fast Job: the watch shows both bound and done already
        pods.on_update(member(name, gpus=2), member(name, gpus=2, node="a", phase="Succeeded"))
    gate.set()
    await h.settle()
    assert h.scheduler.bound == 2
    assert [c[:2] for c in conditions(h)] == [("True", "Scheduled")]


async def test_binding_tasks_cancelled_before_they_run_leave_no_member_assumed() -> None:
    """Leadership lost right after the gang's cycle: every member's pod is forgotten and backed
    off, none stays assumed with its queue entry in flight."""
    h, pods, groups = setup(make_node("a", gpus=8), make_node("b", gpus=8))
    groups.on_add(pod_group(min_count=2))
    for name in ("w0", "w1"):
        pods.on_add(member(name, gpus=8))
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)
    for task in asyncio.all_tasks():
        if task.get_name().startswith("scheduler:bind"):
            task.cancel()
    await h.settle()
    assert h.core.bindings == []
    for key in ("default/w0", "default/w1"):
        assert key not in h.cache.pods
        assert h.queue.where(key) == "backoff"
