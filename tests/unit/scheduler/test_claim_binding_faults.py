"""Faults in DynamicResources' PreBind: whatever write fails (a claim's status write refused,
its answer lost after it landed, the pod's Binding refused after the allocation was written),
nothing stays allocated or reserved for a pod that was not bound, the pod backs off, and its
devices are free again in the store.

Each test fails if the binding cycle did not call `ClaimWrites.undo` (`without_undo` shows it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from scheduler.core.claim_binding import ClaimWrites
from scheduler.model.claims import DELETE_PROTECTION_FINALIZER, parse_resource_claim
from tests.unit.scheduler.claim_api_double import (
    LANDED_ANSWER_LOST,
    DraHarness,
    dra_harness,
    pod_using,
)

POD = "default/trainer"


def status(d: DraHarness, claim: str) -> dict[str, Any]:
    return dict(d.resource.claim(f"default/{claim}").get("status") or {})


def assert_released(d: DraHarness, *claims: str) -> None:
    """Nothing written stays: no claim allocated or reserved, the pod not bound nor assumed,
    backed off, its devices free in the store."""
    for claim in claims:
        assert status(d, claim) == {}, f"claim {claim} still holds {status(d, claim)}"
    assert not d.h.cache.is_assumed(POD)
    assert d.h.queue.where(POD) == "backoff"
    assert d.h.cache.dra.in_flight_for(POD) == {}
    assert d.h.cache.dra.in_use() == frozenset()


@pytest.fixture
def without_undo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`ClaimWrites.undo` doing nothing: what the tests must catch."""

    async def nothing(self: ClaimWrites) -> None:
        return None

    monkeypatch.setattr(ClaimWrites, "undo", nothing)
    yield


async def test_a_refused_status_write_leaves_no_claim_of_the_pod_allocated_or_reserved() -> None:
    """The pod has two claims; the first is allocated and reserved, the second's status write is
    refused (the claim changed since the decision): the first is released again."""
    d = dra_harness("one", "two")
    d.resource.status_outcomes += [200, (409, "the object has been modified")]
    d.h.add(pod_using("trainer", "one", "two"))
    with capture_logs() as logs:
        await d.h.cycle()
    assert d.h.core.bindings == []
    assert_released(d, "one", "two")
    assert ("status", "default/two") in [(kind, key) for kind, key, _ in d.resource.writes]
    released = [e for e in logs if e["event"] == "claim_released"]
    assert [(e["claim"], e["deallocated"]) for e in released] == [("default/one", True)]
    (failed,) = [e for e in logs if e["event"] == "bind_failed"]
    assert failed["status"] == 409 and "resourceclaim default/two" in failed["error"]
    # The finalizer stays: the resourceclaim controller removes it from an unallocated claim.
    assert DELETE_PROTECTION_FINALIZER in d.resource.claim("default/one")["metadata"]["finalizers"]


@pytest.mark.usefixtures("without_undo")
async def test_without_undo_a_refused_status_write_leaves_the_first_claim_allocated() -> None:
    d = dra_harness("one", "two")
    d.resource.status_outcomes += [200, (409, "the object has been modified")]
    d.h.add(pod_using("trainer", "one", "two"))
    with capture_logs():
        await d.h.cycle()
    assert status(d, "one")["reservedFor"][0]["uid"] == "uid-trainer"


async def test_a_status_write_that_landed_with_its_answer_lost_is_read_back_and_released() -> None:
    d = dra_harness("one")
    d.resource.status_outcomes.append(LANDED_ANSWER_LOST)
    d.h.add(pod_using("trainer", "one"))
    with capture_logs() as logs:
        await d.h.cycle()
    assert d.resource.reads == ["default/one"]  # undo read it back
    assert d.h.core.bindings == []
    assert_released(d, "one")
    (failed,) = [e for e in logs if e["event"] == "bind_failed"]
    assert "ServerDisconnectedError" in failed["error"]


@pytest.mark.usefixtures("without_undo")
async def test_without_undo_a_status_write_whose_answer_was_lost_stays_allocated() -> None:
    d = dra_harness("one")
    d.resource.status_outcomes.append(LANDED_ANSWER_LOST)
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert "allocation" in status(d, "one")


async def test_a_status_write_that_never_left_is_not_released_again() -> None:
    """A write refused before it was sent wrote nothing: undo reads the claim, finds it not
    reserved for the pod and writes nothing more."""
    d = dra_harness("one")
    d.resource.status_outcomes.append(aiohttp.ClientConnectorError(Any, OSError(111, "refused")))  # type: ignore[arg-type]
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert [kind for kind, _, _ in d.resource.writes] == ["meta"]
    assert_released(d, "one")


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param((500, "etcdserver: request timed out"), id="server-error"),
        pytest.param(
            (403, "sent in Lease term ns/l/alpha/4, but the current term is ns/l/beta/5"),
            id="fencing-policy",
        ),
    ],
)
async def test_a_binding_refused_after_the_allocation_was_written_undoes_it(
    refusal: tuple[int, str],
) -> None:
    d = dra_harness("one")
    d.h.core.bind_outcomes.append(refusal)
    d.h.add(pod_using("trainer", "one"))
    with capture_logs() as logs:
        await d.h.cycle()
    assert len(d.h.core.bindings) == 1
    assert_released(d, "one")
    kinds = [kind for kind, _, _ in d.resource.writes]
    assert kinds == ["meta", "status", "status"]  # finalizer, allocation, release
    release = d.resource.writes[-1][2]["status"]
    assert release == {
        "reservedFor": [{"$patch": "delete", "uid": "uid-trainer"}],
        "allocation": None,
    }
    assert [e["event"] for e in logs if e["event"] in ("claim_released", "bind_failed")] == [
        "claim_released",
        "bind_failed",
    ]


@pytest.mark.usefixtures("without_undo")
async def test_without_undo_a_refused_binding_leaves_the_claim_allocated() -> None:
    d = dra_harness("one")
    d.h.core.bind_outcomes.append((500, "etcdserver: request timed out"))
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert "allocation" in status(d, "one")


async def test_a_binding_whose_answer_was_lost_and_did_not_land_undoes_the_allocation() -> None:
    """The Binding's outcome is unknown; the read-back finds the pod unbound: undone."""
    d = dra_harness("one")
    d.h.core.bind_outcomes.append(aiohttp.ServerDisconnectedError())
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert d.h.core.reads == 1
    assert_released(d, "one")


async def test_a_claim_allocated_for_the_pod_and_bound_stays_allocated() -> None:
    """The control: no fault, the allocation and reservation stay and the pod is bound."""
    d = dra_harness("one")
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert d.h.scheduler.bound == 1
    written = status(d, "one")
    assert [r["uid"] for r in written["reservedFor"]] == ["uid-trainer"]
    assert len(written["allocation"]["devices"]["results"]) == 2


async def test_an_allocation_that_landed_and_could_not_be_released_stays_counted() -> None:
    """Finding 8 of docs/reliability.md: the status write lands but its answer is lost, and the
    undo's read fails too. The allocation stays on the claim; until the informer shows it, the
    store must keep its devices taken, or the next pod gets them (one device in two claims)."""
    d = dra_harness("one")
    d.resource.status_outcomes.append(LANDED_ANSWER_LOST)
    d.resource.read_outcomes.append(aiohttp.ServerDisconnectedError())
    d.h.add(pod_using("trainer", "one"))
    with capture_logs() as logs:
        await d.h.cycle()
    written = status(d, "one")["allocation"]["devices"]["results"]
    held = {(r["driver"], r["pool"], r["device"]) for r in written}
    assert held and held <= d.h.cache.dra.in_use()  # still counted, in flight
    assert d.h.cache.dra.in_flight("default/one") is not None
    assert not d.h.cache.is_assumed(POD) and d.h.queue.where(POD) == "backoff"
    assert [e["claims"] for e in logs if e["event"] == "claim_allocations_kept"] == [
        ["default/one"]
    ]
    # The informer shows the claim as it is: the claim itself counts now, not the flight.
    d.h.cache.dra.put_claim(parse_resource_claim(d.resource.claim("default/one")))
    assert d.h.cache.dra.in_flight("default/one") is None
    assert held <= d.h.cache.dra.in_use()


async def test_a_deleted_pod_gives_back_the_allocations_kept_for_it() -> None:
    d = dra_harness("one")
    d.resource.status_outcomes.append(LANDED_ANSWER_LOST)
    d.resource.read_outcomes.append(aiohttp.ServerDisconnectedError())
    d.h.add(pod_using("trainer", "one"))
    with capture_logs():
        await d.h.cycle()
    assert d.h.cache.dra.in_flight("default/one") is not None
    d.h.cache.remove_pod(POD)
    assert d.h.cache.dra.in_flight_for(POD) == {}
