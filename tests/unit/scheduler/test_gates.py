"""Scheduling gates (kube-scheduler's PreEnqueue): a gated pod is never queued, tried or bound;
it gets PodScheduled=False, reason SchedulingGated, once; removing its last gate queues it at
once."""

from __future__ import annotations

from typing import Any

from scheduler.core.handlers import PodHandler
from scheduler.model.objects import parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.core_api_double import Harness, harness

KEY = "default/gated"


def gated(*gates: str) -> dict[str, Any]:
    pod = make_pod("gated", gpus=1)
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    return pod


def roomy() -> tuple[Harness, PodHandler]:
    h = harness(cluster(make_node("n")))
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone, h.scheduler.pod_gated)
    return h, handler


def test_gates_are_parsed() -> None:
    assert parse_pod(gated("kueue.x-k8s.io/admission", "b")).scheduling_gates == (
        "kueue.x-k8s.io/admission",
        "b",
    )
    assert parse_pod(gated()).scheduling_gates == ()


def test_malformed_gate_still_gates_and_is_reported() -> None:
    raw = gated()
    raw["spec"]["schedulingGates"] = [{"nom": "x"}]
    pod = parse_pod(raw)
    assert pod.scheduling_gates == ("<invalid>",)
    assert [e.field for e in pod.errors] == ["spec.schedulingGates[0].name"]


async def test_gated_pod_is_not_queued_and_gets_the_condition_once() -> None:
    h, handler = roomy()
    handler.on_add(gated("a"))
    handler.on_add(gated("a"))  # a relist announces it again
    handler.on_update(gated("a"), gated("a", "b"))  # a spec change that keeps it gated
    assert KEY not in h.queue
    assert h.queue.pop_nowait() is None
    await h.settle()
    assert len(h.core.patches) == 1
    condition = h.core.patches[0][2]["status"]["conditions"][0]
    assert (condition["reason"], condition["status"]) == ("SchedulingGated", "False")
    assert condition["message"] == "Scheduling is blocked due to non-empty scheduling gates"


async def test_removing_the_last_gate_queues_the_pod_at_once() -> None:
    h, handler = roomy()
    handler.on_add(gated("a", "b"))
    handler.on_update(gated("a", "b"), gated("b"))
    assert KEY not in h.queue
    handler.on_update(gated("b"), gated())
    assert h.queue.pools()["active"] == 1  # activeQ, no flush or backoff needed
    assert await h.cycle() == KEY
    assert h.scheduler.bound == 1


async def test_gate_on_a_queued_pod_takes_it_out_of_the_queue() -> None:
    h, handler = roomy()
    handler.on_add(gated())
    assert KEY in h.queue
    handler.on_update(gated(), gated("late"))
    assert KEY not in h.queue
    assert h.queue.pop_nowait() is None


async def test_followers_do_not_write_the_condition() -> None:
    h, handler = roomy()
    h.scheduler.is_leader = lambda: False
    handler.on_add(gated("a"))
    await h.settle()
    assert h.core.patches == []
    h.scheduler.is_leader = lambda: True
    handler.on_add(gated("a"))  # its next event after taking the lead
    await h.settle()
    assert len(h.core.patches) == 1


async def test_pod_already_showing_the_gated_condition_is_not_patched() -> None:
    h, handler = roomy()
    raw = gated("a")
    raw["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
    }
    handler.on_add(raw)
    await h.settle()
    assert h.core.patches == []
    assert KEY not in h.queue
