"""The write fence: its term arithmetic on a fake clock, and the elector feeding it."""

from __future__ import annotations

import asyncio
import math

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from scheduler.config import LeaderElectionConfig
from scheduler.kube.apierrors import APIError
from scheduler.kube.fence import NotLeader, WriteFence, is_fenced, lease_term
from scheduler.kube.leader import LeaderElector, LeaseRecord


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def armed(clock: Clock, lease: float = 8.0, margin: float = 2.0) -> WriteFence:
    fence = WriteFence(clock)
    fence.arm(lease, margin)
    return fence


def test_unarmed_fence_lets_every_write_through_with_its_own_timeout() -> None:
    fence = WriteFence(Clock())
    assert fence.admit("POST", "/api/v1/namespaces/a/pods/p/binding", 30.0) == 30.0
    assert fence.admit("POST", "/api/v1/namespaces/a/pods/p/binding", None) is None
    assert fence.remaining() == math.inf


def test_armed_fence_refuses_until_the_first_acquire() -> None:
    fence = armed(Clock())
    with capture_logs() as logs, pytest.raises(NotLeader) as refused:
        fence.admit("POST", "/api/v1/namespaces/a/pods/p/binding", 5.0)
    assert refused.value.status == 0 and isinstance(refused.value, APIError)
    assert "no Lease acquired yet" in str(refused.value)
    assert [entry["event"] for entry in logs] == ["write_fenced"]
    assert logs[0]["verb"] == "POST" and logs[0]["path"].endswith("/pods/p/binding")
    assert fence.refused == 1


def test_fence_permits_inside_the_term_and_bounds_the_timeout() -> None:
    clock = Clock(100.0)
    fence = armed(clock, lease=8.0, margin=2.0)
    fence.renewed(100.0)  # held until 100 + 8 - 2 = 106
    clock.now = 103.0
    assert fence.admit("PATCH", "/p", 30.0) == pytest.approx(3.0)  # cut to the term
    assert fence.admit("PATCH", "/p", 0.5) == 0.5  # already inside it
    assert fence.admit("PATCH", "/p", None) == pytest.approx(3.0)  # none of its own: the term
    clock.now = 105.999
    assert fence.admit("PATCH", "/p", 30.0) == pytest.approx(0.001)


def test_fence_refuses_from_held_until_on() -> None:
    clock = Clock(100.0)
    fence = armed(clock, lease=8.0, margin=2.0)
    fence.renewed(100.0)
    clock.now = 106.0
    with pytest.raises(NotLeader, match="not renewed since"):
        fence.admit("POST", "/p", 1.0)
    clock.now = 1000.0
    with pytest.raises(NotLeader):
        fence.admit("POST", "/p", 1.0)


def test_renew_extends_the_term_and_an_older_renewal_never_shortens_it() -> None:
    clock = Clock(100.0)
    fence = armed(clock, lease=8.0, margin=2.0)
    fence.renewed(100.0)
    fence.renewed(104.0)
    assert fence.held_until == 110.0
    fence.renewed(101.0)  # a slow, older attempt reporting late
    assert fence.held_until == 110.0
    clock.now = 109.0
    assert fence.admit("POST", "/p", None) == pytest.approx(1.0)


def test_revoke_closes_at_once_and_says_why() -> None:
    clock = Clock(100.0)
    fence = armed(clock)
    fence.renewed(100.0)
    fence.revoke("Lease taken by b")
    with pytest.raises(NotLeader, match="leadership ended: Lease taken by b"):
        fence.admit("DELETE", "/p", None)
    fence.renewed(101.0)  # a new term
    assert fence.admit("DELETE", "/p", None) == pytest.approx(7.0)  # 101 + 8 - 2 - 100


def test_margin_must_lie_inside_the_lease() -> None:
    with pytest.raises(ValueError, match="margin"):
        WriteFence().arm(8.0, 8.0)
    with pytest.raises(ValueError, match="margin"):
        WriteFence().arm(8.0, -1.0)


@pytest.mark.parametrize(
    ("method", "path", "fenced"),
    [
        ("GET", "/api/v1/pods", False),
        ("HEAD", "/api/v1/pods", False),
        ("POST", "/api/v1/namespaces/a/pods/p/binding", True),
        ("PATCH", "/api/v1/namespaces/a/pods/p/status", True),
        ("POST", "/api/v1/namespaces/a/pods/p/eviction", True),
        ("POST", "/apis/events.k8s.io/v1/namespaces/a/events", True),
        ("PATCH", "/apis/events.k8s.io/v1/namespaces/a/events/p.0123abcd", True),
        ("DELETE", "/api/v1/namespaces/a/pods/p", True),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/gpu-scheduler", False),
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases", False),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x/other", True),
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", False),
        ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", False),
        ("POST", "/apis/authorization.k8s.io/v1/namespaces/a/localsubjectaccessreviews", True),
        ("DELETE", "/apis/authentication.k8s.io/v1/tokenreviews/x", True),
    ],
)
def test_which_requests_are_fenced(method: str, path: str, fenced: bool) -> None:
    assert is_fenced(method, path) is fenced


async def test_elector_extends_the_fence_on_success_only_and_closes_it_when_the_term_ends() -> None:
    clock = Clock(100.0)
    fence = WriteFence(clock)
    config = LeaderElectionConfig(
        lease_duration_seconds=3,
        renew_deadline_seconds=2.0,
        retry_period_seconds=0.01,
        identity="a",
    )
    seen: list[float] = []
    async with client.ApiClient() as unused:
        elector = LeaderElector(unused, config, clock=clock, fence=fence)
        assert fence.armed and fence.held_until == -math.inf  # closed until acquired

        # Each call: what the fence said on entry; then the attempt takes 0.5 s.
        # acquire ok, renew ok, renew fails, renew fails past the deadline, acquire: stop.
        script: list[str] = ["ok", "ok", "fail", "late", "stop"]

        async def attempt() -> bool:
            seen.append(fence.held_until)
            step = script.pop(0)
            clock.now += 0.5
            if step == "ok":
                elector._observe(LeaseRecord(holder="a", duration_seconds=3), clock.now)
                return True
            if step == "late":
                clock.now += 5.0
            if step == "stop":
                elector._stop.set()
                return False
            raise OSError("connection refused")

        elector._try_acquire_or_renew = attempt  # type: ignore[method-assign]
        with capture_logs():
            await asyncio.wait_for(elector.run(), timeout=30)

    # margin = 3 - 2 = 1: held until started + 2
    assert seen == [-math.inf, 102.0, 102.5, 102.5, -math.inf]
    assert fence.held_until == -math.inf


def test_the_fence_carries_the_term_it_is_open_for_and_forgets_it_when_closed() -> None:
    clock = Clock()
    assert WriteFence(clock).term is None  # unarmed: no term, the policy is not asked
    fence = armed(clock)
    assert fence.term is None  # closed until the first acquire
    fence.renewed(clock.now, lease_term("ops", "gpu-scheduler", "a", 3))
    assert fence.term == "ops/gpu-scheduler/a/3"
    fence.renewed(clock.now + 1.0)  # a renewal keeps the term
    assert fence.term == "ops/gpu-scheduler/a/3"
    fence.revoke("Lease taken by b")
    assert fence.term is None
    fence.renewed(clock.now, lease_term("ops", "gpu-scheduler", "a", 5))
    assert fence.term == "ops/gpu-scheduler/a/5"


async def test_elector_opens_the_fence_in_the_term_of_the_lease_it_wrote() -> None:
    clock = Clock(100.0)
    fence = WriteFence(clock)
    config = LeaderElectionConfig(
        lease_duration_seconds=3,
        renew_deadline_seconds=2.0,
        retry_period_seconds=0.01,
        identity="a",
        lease_name="sched",
        lease_namespace="ops",
    )
    terms: list[str | None] = []
    async with client.ApiClient() as unused:
        elector = LeaderElector(unused, config, clock=clock, fence=fence)
        script = [7, 7, None]

        async def attempt() -> bool:
            terms.append(fence.term)
            transitions = script.pop(0)
            if transitions is None:
                elector._stop.set()
                return False
            record = LeaseRecord(holder="a", duration_seconds=3, transitions=transitions)
            elector._observe(record, clock.now)
            return True

        elector._try_acquire_or_renew = attempt  # type: ignore[method-assign]
        with capture_logs():
            await asyncio.wait_for(elector.run(), timeout=30)
    assert terms == [None, "ops/sched/a/7", "ops/sched/a/7"]
    assert fence.term is None  # the term ended with the run
