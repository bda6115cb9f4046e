"""A Binding whose answer was lost is read back before its GPUs are given to anyone else, and a
pod is never bound to a node that left the cluster."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from scheduler.kube.fence import NotLeader
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import Harness, harness

KEY = "default/train"
LOST = [
    pytest.param(aiohttp.ServerDisconnectedError(), id="server-disconnected"),
    pytest.param(aiohttp.ClientOSError(104, "Connection reset by peer"), id="reset"),
    pytest.param(TimeoutError(), id="timeout"),
]


def one_node() -> Harness:
    return harness(cluster(make_node("n", gpus=8)))


def landed(h: Harness, node: str = "n") -> dict[str, Any]:
    """The pod as the API server shows it after the Binding landed on `node`."""
    uid = h.core.bindings[-1]["metadata"]["uid"]
    return {"metadata": {"name": "train", "uid": uid}, "spec": {"nodeName": node}}


@pytest.mark.parametrize("lost", LOST)
async def test_a_binding_that_landed_keeps_its_gpus(lost: Exception) -> None:
    h = one_node()
    h.core.bind_outcomes.append(lost)
    h.add(pod_info("train", gpus=4))
    queued = h.queue.pop_nowait()
    assert queued is not None
    original = h.core.create_namespaced_pod_binding

    async def bind_then_script_read(*args: Any, **kwargs: Any) -> Any:
        try:
            return await original(*args, **kwargs)
        finally:  # the read-back then finds the pod bound, with this Binding's UID
            h.core.read_outcomes.append(landed(h))

    h.core.create_namespaced_pod_binding = bind_then_script_read  # type: ignore[method-assign]
    with capture_logs() as logs:
        h.scheduler.schedule_one(queued)
        await h.settle()

    assert h.core.reads == 1
    assert h.cache.is_assumed(KEY)  # still held: the informer will confirm it
    assert int(h.cache.node_gpus_used("n").sum()) == 4
    assert h.queue.where(KEY) is None  # done: nothing to retry
    assert h.scheduler.bound == 1
    events = [e["event"] for e in logs]
    assert "bind_outcome_unknown" in events and "bind_failed" not in events
    assert [b["reason"] for b in h.events.bodies] == ["Scheduled"]

    # The GPUs are not handed to the next pod while the landed Binding holds them.
    h.add(pod_info("next", gpus=4))
    await h.cycle()
    first = set(h.cache.gpus_of(KEY))
    assert first and first.isdisjoint(h.cache.gpus_of("default/next"))


@pytest.mark.parametrize("lost", LOST)
async def test_a_binding_that_did_not_land_is_retried(lost: Exception) -> None:
    h = one_node()
    h.core.bind_outcomes.append(lost)  # the read-back answers "unbound" by default
    h.add(pod_info("train", gpus=4))
    with capture_logs() as logs:
        await h.cycle()
    assert h.core.reads == 1
    assert KEY not in h.cache.pods
    assert h.queue.where(KEY) == "backoff"
    assert "bind_failed" in [e["event"] for e in logs]
    h.after_backoff(attempts=1)
    assert await h.cycle() == KEY
    assert h.scheduler.bound == 1


async def test_an_unreadable_outcome_keeps_the_pod_assumed_and_reads_again() -> None:
    h = one_node()
    h.core.bind_outcomes.append(aiohttp.ServerDisconnectedError())
    h.core.read_outcomes.append(aiohttp.ServerDisconnectedError())
    h.add(pod_info("train", gpus=4))
    await h.cycle()
    assert h.cache.is_assumed(KEY)  # unknown: the GPUs stay held
    assert int(h.cache.node_gpus_used("n").sum()) == 4
    assert h.queue.where(KEY) == "backoff"
    bindings = len(h.core.bindings)

    h.after_backoff(attempts=1)
    await h.cycle()  # the pop reads back again instead of binding again
    assert h.core.reads == 2
    assert len(h.core.bindings) == bindings
    assert KEY not in h.cache.pods  # read back unbound this time: forgotten and backed off
    assert h.queue.where(KEY) == "backoff"


async def test_a_fenced_write_was_never_sent_and_is_not_read_back() -> None:
    h = one_node()
    h.core.bind_outcomes.append(NotLeader("POST", "/api/v1/pods/train/binding", "lease lost"))
    h.add(pod_info("train", gpus=4))
    await h.cycle()
    assert h.core.reads == 0
    assert KEY not in h.cache.pods


async def test_no_binding_to_a_node_that_left_the_cluster() -> None:
    h = harness(cluster(make_node("n", gpus=8), make_node("m", gpus=8)))
    h.add(pod_info("train", gpus=4))
    queued = h.queue.pop_nowait()
    assert queued is not None
    h.scheduler.schedule_one(queued)  # assumed on a node; its bind task has not run yet
    (node,) = {state.node for state in h.cache.pods.values()}
    h.cache.remove_node(node)
    with capture_logs() as logs:
        await h.settle()
    assert h.core.bindings == []
    assert KEY not in h.cache.pods
    assert h.queue.where(KEY) == "backoff"
    assert "bind_skipped_node_gone" in [e["event"] for e in logs]
    h.after_backoff(attempts=1)
    await h.cycle()
    assert h.core.bindings[-1]["target"]["name"] != node
