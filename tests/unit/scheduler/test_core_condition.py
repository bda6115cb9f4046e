"""The PodScheduled=False condition: the patch's answer is checked, a failed patch is retried on
the pod's next unschedulable cycle, marks are kept per pod UID, pruned when the pod is bound or
deleted, and bounded in number."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from structlog.testing import capture_logs

import scheduler.core.binding_cycle
from scheduler.core.handlers import PodHandler
from scheduler.kube.apierrors import APIError, APITransportError
from scheduler.kube.binding import set_unschedulable
from scheduler.model.objects import PodInfo, parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info
from tests.unit.scheduler.core_api_double import FakeCoreV1, Harness, harness

KEY = "default/big"


def full_cluster() -> Harness:
    """One 8-GPU node whose GPUs are all taken: a 1-GPU pod is unschedulable (resolvably)."""
    return harness(cluster(make_node("n"), pods=[make_pod("hog", gpus=8, node="n")]))


def big(uid: str = "uid-big") -> PodInfo:
    raw = make_pod("big", gpus=1)
    raw["metadata"]["uid"] = uid
    return parse_pod(raw)


async def retry(h: Harness, attempts: int) -> None:
    """Send the unschedulable pod back through a cycle (a cluster event, then its backoff)."""
    h.queue.move_all_to_active_or_backoff("NodeUpdate")
    h.after_backoff(attempts)
    await h.cycle()


async def test_set_unschedulable_raises_on_an_error_answer() -> None:
    core = FakeCoreV1(patch_outcomes=[(500, "etcdserver: leader changed")])
    with pytest.raises(APIError) as caught:
        await set_unschedulable(core, "default", "big", "0/1 nodes are available.")  # type: ignore[arg-type]
    assert caught.value.status == 500


async def test_set_unschedulable_types_transport_errors() -> None:
    core = FakeCoreV1(patch_outcomes=[aiohttp.ServerDisconnectedError()])
    with pytest.raises(APITransportError):
        await set_unschedulable(core, "default", "big", "0/1 nodes are available.")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(500, id="http-500"),
        pytest.param(aiohttp.ServerDisconnectedError(), id="server-disconnected"),
    ],
)
async def test_failed_condition_patch_is_retried_on_the_next_cycle(failure: object) -> None:
    h = full_cluster()
    h.core.patch_outcomes.append(failure)  # type: ignore[arg-type]
    h.add(big())
    with capture_logs() as logs:
        await h.cycle()
    assert len(h.core.patches) == 1
    assert [e["event"] for e in logs if e["event"] == "condition_update_failed"]
    assert not [e for e in logs if e["event"] == "background_task_failed"]

    await retry(h, attempts=1)
    assert len(h.core.patches) == 2  # patched again: the first one did not land
    await retry(h, attempts=2)
    assert len(h.core.patches) == 2  # landed, same message: not patched a third time
    assert (
        h.core.condition_messages()
        == [
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        ]
        * 2
    )


async def test_recreated_pod_with_the_same_name_gets_its_condition() -> None:
    h = full_cluster()
    h.add(big("uid-1"))
    await h.cycle()
    assert len(h.core.patches) == 1
    h.queue.delete(KEY)  # deleted ...
    h.add(big("uid-2"))  # ... and created again under the same name
    await h.cycle()
    assert len(h.core.patches) == 2


async def test_condition_marks_are_pruned_when_the_pod_is_deleted_or_bound() -> None:
    h = full_cluster()
    handler = PodHandler(h.context, h.queue, h.scheduler.pod_gone)
    h.add(big())
    await h.cycle()
    assert len(h.scheduler._condition_messages) == 1
    handler.on_delete(make_pod("big", gpus=1))
    assert len(h.scheduler._condition_messages) == 0

    h.add(pod_info("other", gpus=1))
    await h.cycle()
    assert len(h.scheduler._condition_messages) == 1
    handler.on_add(make_pod("other", gpus=1, node="elsewhere"))  # bound by someone else
    assert len(h.scheduler._condition_messages) == 0


async def test_condition_marks_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler.core.binding_cycle, "MAX_CONDITION_MARKS", 3)
    h = full_cluster()
    for i in range(6):
        h.add(pod_info(f"p{i}", gpus=1))
    for _ in range(6):
        await h.cycle()
    assert len(h.core.patches) == 6
    assert len(h.scheduler._condition_messages) == 3
    assert list(h.scheduler._condition_messages) == ["uid-p3", "uid-p4", "uid-p5"]


async def test_one_patch_in_flight_per_pod_and_the_newest_message_lands_last() -> None:
    # A gang member's "waiting" patch still in flight when its gang's verdict comes: the
    # verdict must not be overtaken by the older message (it was, under a burst's load).
    h = full_cluster()
    h.core.patch_gate = asyncio.Event()
    pod = big()
    for count in (1, 2, 3):
        h.scheduler.pod_waiting(pod, f"waiting for PodGroup g: {count} of minCount 4 pods exist")
    h.scheduler._mark_condition(pod, "gang g: only 3 of minCount 4 members fit", "Unschedulable")
    for _ in range(5):
        await asyncio.sleep(0)
    assert h.core.condition_messages() == ["waiting for PodGroup g: 1 of minCount 4 pods exist"]
    h.core.patch_gate.set()
    await h.settle()
    assert h.core.condition_messages() == [
        "waiting for PodGroup g: 1 of minCount 4 pods exist",
        "gang g: only 3 of minCount 4 members fit",
    ]
    assert not h.scheduler._condition_next


async def test_a_pod_bound_meanwhile_gets_no_queued_condition_patch() -> None:
    h = full_cluster()
    h.core.patch_gate = asyncio.Event()
    pod = big()
    h.scheduler.pod_waiting(pod, "waiting for PodGroup g: 1 of minCount 4 pods exist")
    h.scheduler.pod_waiting(pod, "waiting for PodGroup g: 2 of minCount 4 pods exist")
    h.scheduler.pod_gone(pod.uid, pod.key)
    h.core.patch_gate.set()
    await h.settle()
    assert h.core.condition_messages() == ["waiting for PodGroup g: 1 of minCount 4 pods exist"]
