"""Claim writes pass the write fence: the binding cycle writes ResourceClaims through the API
client every other write uses, so a replica whose Lease term is over sends none of them (not the
finalizer, not the allocation, not an undo); and under an open fence the finalizer write stamps
the claim with the term the API server's fencing policy judges the later status write by."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from scheduler.core.claim_binding import ClaimWrites
from scheduler.core.cycle import Scheduler
from scheduler.core.profile import default_framework
from scheduler.kube.claims import ClaimWriteError, lease_term_of
from scheduler.kube.fence import LEASE_TERM_ANNOTATION, NotLeader, WriteFence, lease_term
from scheduler.model.claims import parse_resource_claim
from scheduler.plugins.dynamic_resources import ClaimPlan
from tests.dra_objects import allocated, resource_claim, result
from tests.unit.scheduler.claim_api_double import dra_harness, pod_using
from tests.unit.scheduler.test_fence_client import Readings, Recorder, fenced_client, serving

TERM = lease_term("gpu-scheduler", "gpu-scheduler", "alpha", 4)


def plan() -> ClaimPlan:
    """Claim default/one (unallocated, no finalizer) to allocate gpu-0 and gpu-1 for pod p."""
    raw = resource_claim("one", metadata={"uid": "uid-one", "resourceVersion": "5"})
    claim = parse_resource_claim(raw)
    decided = parse_resource_claim(
        {**raw, "status": allocated(result("gpus", "gpu-0"), result("gpus", "gpu-1"))}
    ).allocation
    assert decided is not None
    return ClaimPlan("default/p", "p", "uid-p", allocate=((claim, decided),))


def closed_fence() -> WriteFence:
    """Armed; the term held until 9 on a clock that reads 100: over."""
    fence = WriteFence(Readings(100.0))
    fence.arm(10.0, 1.0)
    fence.renewed(0.0, TERM)
    return fence


def open_fence() -> WriteFence:
    fence = WriteFence(Readings(1.0))
    fence.arm(10.0, 1.0)
    fence.renewed(0.0, TERM)
    return fence


async def test_a_replica_whose_term_is_over_sends_no_claim_write() -> None:
    recorder = Recorder()
    async with serving(recorder) as host, fenced_client(host, closed_fence()) as api:
        writes = ClaimWrites(client.ResourceV1Api(api), plan(), timeout=5.0)
        with capture_logs() as logs, pytest.raises(ClaimWriteError) as refused:
            await writes.write()
        await writes.undo()
    assert isinstance(refused.value.__cause__, NotLeader)
    # undo reads the claim back (reads are never fenced) and, finding it not reserved, writes
    # nothing; the server saw no PATCH at all.
    assert recorder.requests == [
        "GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/one HTTP/1.1"
    ]
    assert [e["event"] for e in logs if e["event"] == "write_fenced"] == ["write_fenced"]


async def test_the_binding_cycle_writes_claims_through_the_fenced_client() -> None:
    """The leader check passed (the elector has not noticed yet), but the term is over: the
    claim writes of the pod are refused by the fence, nothing is sent, the pod backs off."""
    recorder = Recorder()
    d = dra_harness("one")
    async with serving(recorder) as host, fenced_client(host, closed_fence()) as api:
        d.h.scheduler.resource = client.ResourceV1Api(api)
        d.h.add(pod_using("trainer", "one"))
        with capture_logs() as logs:
            await d.h.cycle()
    assert [r.split()[0] for r in recorder.requests] == ["GET"]  # undo's read-back only
    assert d.h.core.bindings == []
    assert d.h.queue.where("default/trainer") == "backoff"
    assert d.h.cache.dra.in_use() == frozenset()
    (failed,) = [e for e in logs if e["event"] == "bind_failed"]
    assert "not sent" in failed["error"]


def test_the_binding_cycle_uses_the_context_api_client() -> None:
    """`BindingCycle.resource` is built on `context.api_client`, the daemon's fenced client."""
    d = dra_harness()
    context = d.h.context
    fresh = Scheduler(context, d.h.queue, default_framework(context.settings))
    assert getattr(fresh.resource, "api_client", None) is context.api_client
    assert getattr(fresh.core, "api_client", None) is context.api_client


async def test_the_finalizer_write_stamps_the_claim_with_the_term() -> None:
    recorder = Recorder()
    async with serving(recorder) as host, fenced_client(host, open_fence()) as api:
        resource = client.ResourceV1Api(api)
        assert lease_term_of(resource) == TERM
        await ClaimWrites(resource, plan(), timeout=5.0).write()
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/one"
    assert recorder.requests == [f"PATCH {path} HTTP/1.1", f"PATCH {path}/status HTTP/1.1"]
    meta = json.loads(recorder.received[0].split(b"\r\n\r\n", 1)[1])
    assert meta["metadata"]["annotations"] == {LEASE_TERM_ANNOTATION: TERM}
    assert meta["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert meta["metadata"]["resourceVersion"] == "5"


async def test_without_a_term_the_finalizer_write_clears_a_stale_stamp() -> None:
    """Leader election off (an unarmed fence): the finalizer write removes any term an earlier
    leader left, so the policy does not judge this replica's allocation by it."""
    d = dra_harness("one")
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    kind, _, body = d.resource.writes[0]
    assert kind == "meta"
    assert body["metadata"]["annotations"] == {LEASE_TERM_ANNOTATION: None}


async def test_an_armed_fence_stamps_a_claim_that_has_its_finalizer_already() -> None:
    recorder = Recorder()
    raw: dict[str, Any] = resource_claim(
        "one",
        metadata={
            "uid": "uid-one",
            "resourceVersion": "5",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
    )
    base = plan()
    claim = parse_resource_claim(raw)
    assert claim.finalizers
    stamped = ClaimPlan(
        base.pod_key, base.pod_name, base.pod_uid, allocate=((claim, base.allocate[0][1]),)
    )
    async with serving(recorder) as host, fenced_client(host, open_fence()) as api:
        await ClaimWrites(client.ResourceV1Api(api), stamped, timeout=5.0).write()
    assert [r.split()[0] for r in recorder.requests] == ["PATCH", "PATCH"]
