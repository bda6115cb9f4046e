"""Leader election on a real Lease: one leader, hand-over on release, prompt stop on loss."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from scheduler.config import LeaderElectionConfig
from scheduler.kube.leader import (
    AlwaysLeader,
    Elector,
    LeaderElector,
    LeadershipLost,
    LeaseRecord,
    make_elector,
)
from tests.kube import eventually

LEASE = "gpu-scheduler-test"
UNREACHABLE = "https://127.0.0.1:9"
"""The discard port: nothing listens there, so every request is refused at once."""


def election(namespace: str, identity: str = "unused") -> LeaderElectionConfig:
    """Short timings so hand-overs take seconds: lease 3 s, renew deadline 2 s, retry 0.5 s."""
    return LeaderElectionConfig(
        lease_name=LEASE,
        lease_namespace=namespace,
        lease_duration_seconds=3,
        renew_deadline_seconds=2.0,
        retry_period_seconds=0.5,
        identity=identity,
    )


class Journal:
    """Transitions in the order the electors reported them: (identity, "started" | "stopped")."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []

    def index(self, identity: str, what: str) -> int:
        return self.entries.index((identity, what))

    def started(self, identity: str) -> bool:
        return (identity, "started") in self.entries


@contextlib.asynccontextmanager
async def competing(electors: Sequence[Elector], journal: Journal) -> AsyncIterator[None]:
    """Run every elector; on exit release them all and surface any crash of `run()`."""

    def run(elector: Elector) -> asyncio.Task[None]:
        return asyncio.create_task(
            elector.run(
                lambda: journal.entries.append((elector.identity, "started")),
                lambda: journal.entries.append((elector.identity, "stopped")),
            )
        )

    tasks = [run(elector) for elector in electors]
    try:
        yield
    finally:
        for elector in electors:
            await asyncio.wait_for(elector.release(), timeout=15)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        crashes = [result for result in results if isinstance(result, BaseException)]
        assert not crashes, crashes


async def read_lease(api_client: client.ApiClient, namespace: str) -> client.V1Lease:
    return await client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, namespace)


async def leader_of(*electors: Elector) -> Elector | None:
    leading = [elector for elector in electors if elector.is_leader]
    assert len(leading) <= 1, [elector.identity for elector in leading]
    return leading[0] if leading else None


async def test_exactly_one_of_two_leads_and_the_lease_says_so(
    api_client: client.ApiClient, namespace: str
) -> None:
    journal = Journal()
    a = LeaderElector(api_client, election(namespace), "a")
    b = LeaderElector(api_client, election(namespace), "b")
    async with competing([a, b], journal):
        leader = await eventually(lambda: leader_of(a, b), timeout=30, what="a leader")
        follower = b if leader is a else a
        for _ in range(12):  # three seconds of renewals: the leader keeps it, alone
            assert await leader_of(a, b) is leader
            await asyncio.sleep(0.25)

        lease = await read_lease(api_client, namespace)
        assert lease.spec.holder_identity == leader.identity
        assert lease.spec.lease_duration_seconds == 3
        assert lease.spec.lease_transitions == 0
        assert lease.spec.acquire_time <= lease.spec.renew_time <= datetime.now(UTC)
        first = lease.spec

        async def renewed() -> bool:
            spec = (await read_lease(api_client, namespace)).spec
            return bool(spec.renew_time > first.renew_time)

        await eventually(renewed, timeout=15, what="renewTime advancing")
        spec = (await read_lease(api_client, namespace)).spec
        assert spec.acquire_time == first.acquire_time
        assert spec.holder_identity == leader.identity

        await follower.release()  # a follower's release leaves the leader's Lease alone
        assert (await read_lease(api_client, namespace)).spec.holder_identity == leader.identity
        assert leader.is_leader
    assert journal.entries == [(leader.identity, "started"), (leader.identity, "stopped")]
    assert not journal.started(follower.identity)
    released = (await read_lease(api_client, namespace)).spec  # released on leaving `competing`
    assert not released.holder_identity
    assert released.lease_duration_seconds == 1
    assert released.lease_transitions == 0


async def test_release_hands_the_lease_to_the_other(
    api_client: client.ApiClient, namespace: str
) -> None:
    journal = Journal()
    a = LeaderElector(api_client, election(namespace), "a")
    b = LeaderElector(api_client, election(namespace), "b")
    with capture_logs() as logs:
        await handing_over(a, b, journal, api_client, namespace)
    leader = a if journal.entries[0][0] == "a" else b
    other = b if leader is a else a
    assert journal.index(leader.identity, "stopped") < journal.index(other.identity, "started")
    lease = f"{namespace}/{LEASE}"
    transitions = [
        (entry["event"], entry["identity"])
        for entry in logs
        if entry["event"] in ("leader_elected", "leader_released") and entry["lease"] == lease
    ]
    assert transitions[:3] == [
        ("leader_elected", leader.identity),
        ("leader_released", leader.identity),
        ("leader_elected", other.identity),
    ]


async def handing_over(
    a: LeaderElector,
    b: LeaderElector,
    journal: Journal,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Whoever leads releases; the other must take over."""
    async with competing([a, b], journal):
        leader = await eventually(lambda: leader_of(a, b), timeout=30, what="a leader")
        other = b if leader is a else a
        await leader.release()
        assert not leader.is_leader
        assert not leader.leading.is_set()
        assert journal.entries[-1] == (leader.identity, "stopped")

        async def other_leads() -> bool:
            return other.is_leader

        await eventually(other_leads, timeout=15, what=f"{other.identity} taking over")
        lease = await read_lease(api_client, namespace)
        assert lease.spec.holder_identity == other.identity
        assert lease.spec.lease_duration_seconds == 3
        assert lease.spec.lease_transitions == 1
        assert lease.spec.acquire_time <= lease.spec.renew_time


async def test_a_rival_holder_stops_the_leader_at_once(
    api_client: client.ApiClient, namespace: str
) -> None:
    journal = Journal()
    a = LeaderElector(api_client, election(namespace), "a")
    b = LeaderElector(api_client, election(namespace), "b")
    async with competing([a], journal):

        async def a_leads() -> bool:
            return a.is_leader

        await eventually(a_leads, timeout=30, what="a leading")

        async def hold() -> None:
            async with a.leadership() as lost:
                assert not lost.is_set()
                await asyncio.sleep(3600)

        block = asyncio.create_task(hold())
        await asyncio.sleep(0.1)  # let the block enter its term
        async with competing([b], journal):
            await overwrite_holder(api_client, namespace, "intruder")

            async def a_stopped() -> bool:
                return not a.leading.is_set()

            await eventually(a_stopped, timeout=15, what="a stopping")
            with pytest.raises(LeadershipLost):
                await asyncio.wait_for(block, timeout=5)
            assert not a.is_leader
            assert not b.is_leader  # the intruder's 3 s term has not run out yet

            async def someone_leads() -> Elector | None:
                return await leader_of(a, b)

            successor = await eventually(someone_leads, timeout=20, what="a successor")
            lease = await read_lease(api_client, namespace)
            assert lease.spec.holder_identity == successor.identity
            assert lease.spec.lease_transitions == 2  # a -> intruder -> successor
    assert journal.entries[:2] == [("a", "started"), ("a", "stopped")]


async def overwrite_holder(api_client: client.ApiClient, namespace: str, holder: str) -> None:
    """Write another holderIdentity into the Lease, as a third party would (retrying on 409)."""
    api = client.CoordinationV1Api(api_client)
    for _ in range(20):
        lease = await api.read_namespaced_lease(LEASE, namespace)
        now = datetime.now(UTC)
        record = LeaseRecord(holder, 3, now, now, (lease.spec.lease_transitions or 0) + 1)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "resourceVersion": lease.metadata.resource_version},
            "spec": record.to_spec(),
        }
        try:
            await api.replace_namespaced_lease(LEASE, namespace, body)
            return
        except client.ApiException as error:
            if error.status != 409:
                raise
    raise AssertionError("could not overwrite the Lease")


async def test_a_leader_that_cannot_renew_stops_before_the_other_takes_over(
    api_client: client.ApiClient, namespace: str
) -> None:
    journal = Journal()
    configuration = copy.deepcopy(api_client.configuration)
    async with client.ApiClient(configuration) as own_client:
        a = LeaderElector(own_client, election(namespace), "a")
        b = LeaderElector(api_client, election(namespace), "b")
        async with competing([a], journal):

            async def a_leads() -> bool:
                return a.is_leader

            await eventually(a_leads, timeout=30, what="a leading")
            async with competing([b], journal):
                reachable = configuration.host
                configuration.host = UNREACHABLE  # a is cut off from the API server

                async def a_stopped() -> bool:
                    return not a.leading.is_set()

                await eventually(a_stopped, timeout=15, what="a giving up")
                assert not b.is_leader
                assert (await read_lease(api_client, namespace)).spec.holder_identity == "a"

                async def b_leads() -> bool:
                    return b.is_leader

                await eventually(b_leads, timeout=20, what="b taking over")
                assert not a.is_leader
                assert (await read_lease(api_client, namespace)).spec.holder_identity == "b"
                configuration.host = reachable
    assert journal.entries[:3] == [("a", "started"), ("a", "stopped"), ("b", "started")]


async def test_disabled_election_always_leads_until_released() -> None:
    journal = Journal()
    config = LeaderElectionConfig(enabled=False, identity="solo")
    async with client.ApiClient() as unused:
        elector = make_elector(unused, config)
    assert isinstance(elector, AlwaysLeader)
    assert not elector.is_leader
    async with competing([elector], journal):
        await asyncio.wait_for(elector.leading.wait(), timeout=5)
        assert elector.is_leader

        async def hold() -> str:
            async with elector.leadership():
                await asyncio.sleep(3600)
            return "exited quietly"

        block = asyncio.create_task(hold())
        await asyncio.sleep(0.05)
        await elector.release()
        assert await asyncio.wait_for(block, timeout=5) == "exited quietly"
        assert not elector.is_leader
    assert journal.entries == [("solo", "started"), ("solo", "stopped")]


async def test_release_from_inside_the_leadership_block_is_not_cancelled() -> None:
    elector = AlwaysLeader("solo")
    runner = asyncio.create_task(elector.run())
    async with elector.leadership() as lost:
        await elector.release()
        assert lost.is_set()
        await asyncio.sleep(0)  # still running: the block was not cancelled
    await asyncio.wait_for(runner, timeout=5)


async def test_an_elector_stopped_without_release_fails_the_leadership_block() -> None:
    elector = AlwaysLeader("solo")
    runner = asyncio.create_task(elector.run())

    async def hold() -> None:
        async with elector.leadership():
            await asyncio.sleep(3600)

    block = asyncio.create_task(hold())
    await asyncio.sleep(0.05)
    runner.cancel()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(block, timeout=5)
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert not elector.is_leader


async def test_cancelling_the_block_from_outside_is_a_plain_cancellation() -> None:
    elector = AlwaysLeader("solo")
    runner = asyncio.create_task(elector.run())

    async def hold() -> None:
        async with elector.leadership():
            await asyncio.sleep(3600)

    block = asyncio.create_task(hold())
    await asyncio.sleep(0.05)
    block.cancel()
    with pytest.raises(asyncio.CancelledError):
        await block
    assert elector.is_leader  # the term goes on
    await elector.release()
    await asyncio.wait_for(runner, timeout=5)
