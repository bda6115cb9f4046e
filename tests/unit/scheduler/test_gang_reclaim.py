"""The gang PostFilter on in-memory doubles: one plan for the whole gang across nodes, executed
only when the gang then fits; victim gangs taken whole or not at all; reservations and
nominations for every member."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import scheduler.postfilter.gang_reclaim as gang_plugin
import scheduler.victims.candidates as victims_plugin
from scheduler.gangs.planning import GangRequest
from scheduler.gangs.tracker import GangTracker, parse_pod_group
from scheduler.model.objects import parse_pod
from scheduler.postfilter.gang_reclaim import GangReclaimer
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.reclaim_doubles import Rig, make_rig, policy, victim_pod
from tests.unit.scheduler.test_gangs import member, pod_group


class Conditions:
    """PodGroup condition patches as (name, type, status, reason, message)."""

    def __init__(self) -> None:
        self.set: list[tuple[str, str, str, str, str]] = []

    async def __call__(
        self,
        custom: Any,
        namespace: str,
        name: str,
        status: str,
        reason: str,
        message: str,
        timeout: float = 30.0,
        uid: str = "",
        condition_type: str = "",
    ) -> None:
        self.set.append((name, condition_type, status, reason, message))


def setup(
    monkeypatch: pytest.MonkeyPatch, *victims: dict[str, Any], classes: Any = None
) -> tuple[Rig, GangReclaimer, GangTracker, Conditions]:
    cache = cluster(make_node("n1", gpus=2), make_node("n2", gpus=2), pods=victims)
    rig = make_rig(monkeypatch, cache, classes=classes, preemption=True)
    monkeypatch.setattr(gang_plugin, "nominate", rig.api.nominate)
    conditions = Conditions()
    monkeypatch.setattr(victims_plugin, "set_pod_group_condition", conditions)
    tracker = GangTracker()
    rig.reclaimer.gangs = tracker
    gangs = GangReclaimer(rig.reclaimer.context, rig.reclaimer, tracker)
    for pod in victims:
        info = parse_pod(pod)
        tracker.pod_seen(info, pending=False)
        rig.usage.gpus[info.name] = info.gpus
    return rig, gangs, tracker, conditions


def request(tracker: GangTracker, count: int = 2, gpus: int = 2, priority: int = 1000) -> Any:
    tracker.set_group(parse_pod_group(pod_group("train", min_count=count)))
    members = tuple(
        parse_pod(member(f"w{i}", group="train", gpus=gpus, priority=priority))
        for i in range(count)
    )
    for pod in members:
        tracker.pod_seen(pod, pending=True)
    return GangRequest(tracker.groups["default/train"], members, count)


async def test_idle_pods_on_two_nodes_are_evicted_for_the_whole_gang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig, gangs, tracker, _ = setup(
        monkeypatch, victim_pod("idle1", "n1", gpus=2), victim_pod("idle2", "n2", gpus=2)
    )
    wanted = request(tracker)
    assert await gangs.attempt(wanted) is True
    assert sorted(rig.api.evicted) == ["idle1", "idle2"]
    assert sorted(node for _, node in rig.api.nominated) == ["n1", "n2"]
    assert sorted(name for name, _ in rig.api.nominated) == ["w0", "w1"]
    reserved = [rig.cache.reservation(m.key) for m in wanted.members]
    assert {state.node for state in reserved if state is not None} == {"n1", "n2"}
    assert gangs.outcomes == {"evicted": 1}
    (note,) = rig.recorder.notes("ReclaimIdleGPUs")[:1]
    assert note == (
        "gang train: reclaiming 4 GPUs on 2 node(s) (n1, n2) from 2 idle pod(s) "
        "for minCount 2 members"
    )


async def test_a_plan_that_leaves_the_gang_partial_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One node's holder is protected (no policy) and of equal priority: only one member could
    start, so the idle pod on the other node is not evicted either."""
    protected = victim_pod("busy", "n2", gpus=2, klass="protected")
    protected["spec"]["priority"] = 1000
    rig, gangs, tracker, _ = setup(
        monkeypatch,
        victim_pod("idle1", "n1", gpus=2),
        protected,
        classes={"idle-ok": policy(), "protected": {}},
    )
    assert await gangs.attempt(request(tracker)) is False
    assert rig.api.evicted == []
    assert rig.api.nominated == []
    assert gangs.outcomes == {"refused": 1}
    notes = rig.recorder.notes("FailedScheduling")
    assert rig.recorder.notes("ReclaimSkipped") == notes * 2  # on both members
    assert [kind for kind, _, reason, _ in rig.recorder.events if reason == "FailedScheduling"] == [
        "PodGroup"
    ]
    assert notes[0].startswith(
        "gang train: preemption: no plan lets minCount 2 members fit, nothing evicted: "
    )
    assert "evicting all 1 idle pods on the candidate nodes does not let minCount 2" in notes[0]
    assert {kind for kind, *_ in rig.recorder.events} == {"PodGroup", "Pod"}


def victim_gang(
    tracker: GangTracker, names: list[str], nodes: list[str], klass: str = "idle-ok"
) -> list[dict[str, Any]]:
    group = pod_group("old", min_count=1)
    group["spec"]["disruptionMode"] = {"all": {}}
    tracker.set_group(parse_pod_group(group))
    pods = []
    for name, node in zip(names, nodes, strict=True):
        pod = victim_pod(name, node, gpus=1, klass=klass)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "old"}
        pods.append(pod)
    return pods


async def test_a_victim_gang_with_disruption_mode_all_goes_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gang (one 2-GPU member) needs a whole node: n1 holds one member of an idle victim
    gang (1 GPU) and a lone idle pod (1 GPU); n2 the victim gang's other member and a protected
    pod. Freeing n1 takes the victim gang whole (its member on n2 too) and marks its PodGroup."""
    tracker_probe = GangTracker()
    gang_pods = victim_gang(tracker_probe, ["old0", "old1"], ["n1", "n2"])
    keep = victim_pod("keep", "n2", gpus=1, klass="protected", gpu_indices="1")
    keep["spec"]["priority"] = 2000
    rig, gangs, tracker, conditions = setup(
        monkeypatch,
        *gang_pods,
        victim_pod("lone", "n1", gpus=1, gpu_indices="1"),
        keep,
        classes={"idle-ok": policy(), "protected": {}},
    )
    tracker.set_group(tracker_probe.groups["default/old"])
    wanted = request(tracker, count=1)
    assert await gangs.attempt(wanted) is True
    assert sorted(rig.api.evicted) == ["lone", "old0", "old1"]
    assert conditions.set == [
        (
            "old",
            "DisruptionTarget",
            "True",
            "PreemptionByScheduler",
            "idle reclaim: evicted to make room for PodGroup default/train",
        )
    ]


async def test_a_victim_gang_with_one_ineligible_member_is_not_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracker_probe = GangTracker()
    gang_pods = victim_gang(tracker_probe, ["old0", "old1"], ["n1", "n2"])
    gang_pods[1]["spec"]["priorityClassName"] = "protected"
    for pod in gang_pods:
        pod["spec"]["priority"] = 2000  # above the gang: no preemption either
    rig, gangs, tracker, conditions = setup(
        monkeypatch,
        *gang_pods,
        victim_pod("lone", "n1", gpus=1, gpu_indices="1"),
        classes={"idle-ok": policy(), "protected": {}},
    )
    tracker.set_group(tracker_probe.groups["default/old"])
    assert await gangs.attempt(request(tracker, count=1)) is False
    assert rig.api.evicted == []
    assert conditions.set == []
    (note,) = rig.recorder.notes("FailedScheduling")
    assert "gang default/old is evicted only as a whole and 1 of its 2 members" in note


def two_node_victim_gang(
    monkeypatch: pytest.MonkeyPatch, klass: str, preemption: bool
) -> tuple[Rig, Conditions]:
    """Nodes n1, n2 of 2 GPUs, each full with one member of victim gang `old` (all)."""
    tracker_probe = GangTracker()
    gang_pods = victim_gang(tracker_probe, ["old0", "old1"], ["n1", "n2"], klass=klass)
    for pod in gang_pods:
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
        pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    cache = cluster(make_node("n1", gpus=2), make_node("n2", gpus=2), pods=gang_pods)
    classes = {"idle-ok": policy(), "protected": {}}
    rig = make_rig(monkeypatch, cache, classes=classes, preemption=preemption)
    conditions = Conditions()
    monkeypatch.setattr(victims_plugin, "set_pod_group_condition", conditions)
    tracker = GangTracker()
    tracker.set_group(tracker_probe.groups["default/old"])
    for pod in gang_pods:
        info = parse_pod(pod)
        tracker.pod_seen(info, pending=False)
        rig.usage.gpus[info.name] = 2
    rig.reclaimer.gangs = tracker
    return rig, conditions


@pytest.mark.parametrize(("klass", "preemption"), [("idle-ok", False), ("protected", True)])
async def test_a_single_pod_takes_a_victim_gang_whole(
    monkeypatch: pytest.MonkeyPatch, klass: str, preemption: bool
) -> None:
    """Idle reclaim (an idle gang) and priority preemption (a lower-priority gang) for one
    2-GPU pod: the victim gang (disruptionMode all) loses both members, not only the one on the
    node the pod goes to, and its PodGroup is marked DisruptionTarget."""
    rig, conditions = two_node_victim_gang(monkeypatch, klass, preemption)
    preemptor = parse_pod(make_pod("solo", gpus=2, priority=1000))
    node = await rig.attempt(preemptor)
    assert node in ("n1", "n2")
    assert sorted(rig.api.evicted) == ["old0", "old1"]
    assert [(name, kind, reason) for name, kind, _, reason, _ in conditions.set] == [
        ("old", "DisruptionTarget", "PreemptionByScheduler")
    ]


async def test_the_gang_never_evicts_its_own_bound_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """w0 of the gang already runs (idle) on n1; w1 waits and n2 is full with a busy pod of
    higher priority. Evicting w0 would let w1 fit, but would leave the gang below minCount."""
    own = victim_pod("w0", "n1", gpus=2)
    own["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    busy = victim_pod("busy", "n2", gpus=2, klass="protected")
    busy["spec"]["priority"] = 5000
    rig, gangs, tracker, _ = setup(
        monkeypatch, own, busy, classes={"idle-ok": policy(), "protected": {}}
    )
    tracker.set_group(parse_pod_group(pod_group("train", min_count=2)))
    pending = parse_pod(member("w1", group="train", gpus=2, priority=1000))
    tracker.pod_seen(pending, pending=True)
    wanted = GangRequest(tracker.groups["default/train"], (pending,), 1)
    assert await gangs.attempt(wanted) is False
    assert rig.api.evicted == []


async def test_dry_run_reports_the_gang_plan_and_evicts_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        make_node("n1", gpus=2),
        make_node("n2", gpus=2),
        pods=[victim_pod("idle1", "n1", gpus=2), victim_pod("idle2", "n2", gpus=2)],
    )
    rig = make_rig(monkeypatch, cache, mode="dry-run")
    monkeypatch.setattr(gang_plugin, "nominate", rig.api.nominate)
    rig.usage.gpus.update(idle1=2, idle2=2)
    tracker = GangTracker()
    gangs = GangReclaimer(rig.reclaimer.context, rig.reclaimer, tracker)
    assert await gangs.attempt(request(tracker)) is False
    assert (rig.api.evicted, rig.api.nominated) == ([], [])
    assert rig.recorder.notes("FailedScheduling") == []
    (note, *_) = rig.recorder.notes("ReclaimIdleGPUs")
    assert note.startswith("gang train: would reclaim 4 GPUs on 2 node(s) (n1, n2)")
    assert gangs.outcomes == {"dry_run": 1}


@pytest.mark.parametrize("never", [False, True])
async def test_priority_preemption_for_a_gang_across_nodes(
    monkeypatch: pytest.MonkeyPatch, never: bool
) -> None:
    """Both nodes are full with busy-or-unmeasured pods of lower priority and no reclaim
    policy: the gang preempts one on each node; a member with preemptionPolicy Never keeps it
    from preempting at all."""
    low = [victim_pod(f"low{i}", f"n{i + 1}", gpus=2, klass="protected") for i in range(2)]
    rig, gangs, tracker, _ = setup(monkeypatch, *low, classes={"protected": {}})
    wanted = request(tracker)
    if never:
        first = replace(wanted.members[0], preemption_policy="Never")
        wanted = replace(wanted, members=(first, *wanted.members[1:]))
    assert await gangs.attempt(wanted) is (not never)
    if never:
        assert rig.api.evicted == []
        (note,) = rig.recorder.notes("FailedScheduling")
        assert note.endswith("preemption: not eligible due to preemptionPolicy=Never.")
        return
    assert sorted(rig.api.evicted) == ["low0", "low1"]
    (note, *_) = rig.recorder.notes("Preempting")
    assert note == (
        "gang train: preempting 4 GPUs on 2 node(s) (n1, n2) from 2 pod(s) of lower priority "
        "for minCount 2 members"
    )
    assert rig.recorder.notes("Preempted")[0] == "Preempted by PodGroup uid-train"


async def test_no_attempt_and_no_cooldown_while_a_members_claim_is_not_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member whose template claim does not exist yet cannot fit anywhere: attempting would
    evict nothing and start the cooldown that keeps the gang waiting once its claim exists."""
    rig, gangs, tracker, _ = setup(
        monkeypatch, victim_pod("idle1", "n1", gpus=2), victim_pod("idle2", "n2", gpus=2)
    )
    wanted = request(tracker)
    raw = member("w1", group="train", gpus=2, priority=1000)
    raw["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    waiting = parse_pod(raw)
    assert waiting.resource_claims is not None and waiting.resource_claims.waiting
    assert await gangs.attempt(replace(wanted, members=(wanted.members[0], waiting))) is False
    assert rig.api.evicted == [] and gangs.outcomes == {"waiting": 1}
    assert not gangs.cooling_down("default/train")
    assert await gangs.attempt(wanted) is True  # once it exists, the gang is served at once
