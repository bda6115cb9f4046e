"""Claim events move only the unschedulable pods they may help (kube-scheduler's queueing hint
for ResourceClaims): a burst writes every claim two or three times, and moving every waiting pod
on each write retried pods waiting for their own claim to be created again and again."""

from __future__ import annotations

from typing import Any

from scheduler.core.handlers import PodHandler
from scheduler.core.queue import SchedulingQueue
from scheduler.model.claims import CLAIM_NOT_CREATED
from scheduler.model.objects import PodInfo, parse_pod
from scheduler.state.dra import DraStore
from scheduler.state.dra_handlers import ResourceClaimHandler
from tests.dra_objects import allocated, pod_with_claims, resource_claim, result
from tests.unit.scheduler.builders import cluster, make_node
from tests.unit.scheduler.core_api_double import harness
from tests.unit.test_queue import FakeClock

DRA = "DynamicResources"


def claim_pod(name: str, claim: str) -> PodInfo:
    return parse_pod(pod_with_claims(name, [{"name": "gpus", "resourceClaimName": claim}]))


def parked(queue: SchedulingQueue[PodInfo], pod: PodInfo, reason: str, plugin: str) -> None:
    queue.add(pod.key, 0, pod)
    popped = queue.pop_nowait()
    assert popped is not None
    queue.requeue_unschedulable(popped, [reason], [plugin])


def scene() -> tuple[SchedulingQueue[PodInfo], ResourceClaimHandler]:
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(clock=FakeClock(), backoff_initial=1.0)
    handler = ResourceClaimHandler(DraStore(), queue)
    parked(queue, claim_pod("mine", "wanted"), "0/1 nodes are available: x not found.", DRA)
    parked(queue, claim_pod("other", "elsewhere"), "cannot allocate all claims", DRA)
    waiting = 'pod "default/tmpl": ' + CLAIM_NOT_CREATED
    parked(queue, claim_pod("tmpl", "wanted"), waiting, DRA)
    parked(queue, claim_pod("cpu", "wanted"), "Insufficient cpu", "NodeResourcesFit")
    return queue, handler


def unschedulable(queue: SchedulingQueue[PodInfo]) -> set[str]:
    return {k.partition("/")[2] for k in ("default/mine", "default/other", "default/tmpl",
            "default/cpu") if queue.where(k) == "unschedulable"}  # fmt: skip


def allocated_claim(name: str) -> dict[str, Any]:
    return resource_claim(name, status=allocated(result("gpus", "gpu-0"), node="node-a"))


def test_a_claim_created_moves_only_the_pod_that_uses_it() -> None:
    queue, handler = scene()
    handler.on_add(resource_claim("wanted"))
    assert unschedulable(queue) == {"other", "tmpl", "cpu"}


def test_a_finalizer_write_moves_nobody() -> None:
    queue, handler = scene()
    handler.on_add(resource_claim("unrelated"))
    before = unschedulable(queue)
    with_finalizer = resource_claim("unrelated")
    with_finalizer["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    handler.on_update(resource_claim("unrelated"), with_finalizer)
    assert unschedulable(queue) == before == {"mine", "other", "tmpl", "cpu"}


def test_devices_freed_move_every_pod_dynamic_resources_rejected() -> None:
    queue, handler = scene()
    handler.on_add(allocated_claim("unrelated"))
    assert unschedulable(queue) == {"mine", "other", "tmpl", "cpu"}
    handler.on_update(allocated_claim("unrelated"), resource_claim("unrelated"))
    assert unschedulable(queue) == {"cpu"}


def test_a_deleted_allocated_claim_frees_devices_and_an_unallocated_one_does_not() -> None:
    queue, handler = scene()
    handler.on_add(resource_claim("unrelated"))
    handler.on_delete(resource_claim("unrelated"))
    assert unschedulable(queue) == {"mine", "other", "tmpl", "cpu"}
    handler.on_add(allocated_claim("held"))
    handler.on_delete(allocated_claim("held"))
    assert unschedulable(queue) == {"cpu"}


def test_a_pod_whose_template_claim_is_not_created_is_not_queued_until_its_status_names_it() -> (
    None
):
    h = harness(cluster(make_node("n")))
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone)
    pod = pod_with_claims("t", [{"name": "gpus", "resourceClaimTemplateName": "two"}])
    pod["spec"]["schedulerName"] = "gpu-scheduler"
    handler.on_add(pod)
    assert "default/t" not in h.queue  # PreEnqueue: nothing to try yet, nothing reported
    named = {
        **pod,
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "t-1"}]},
    }
    handler.on_update(pod, named)
    assert h.queue.where("default/t") == "active"
