"""evict_pod and nominate turn every answer and every client error into a typed outcome."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from scheduler.kube.apierrors import APITransportError
from scheduler.kube.eviction import EvictionResult, evict_pod, nominate
from tests.unit.scheduler.core_api_double import FakeResponse, Outcome, answer

UID_MISMATCH = "Precondition failed: UID in precondition: 1111, UID in object meta: 2222"


class EvictionCore:
    """The two CoreV1Api methods reclaim writes with, answering scripted outcomes."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes

    async def create_namespaced_pod_eviction(self, *args: Any, **kwargs: Any) -> FakeResponse:
        return await answer(self.outcomes, None, 201)

    async def patch_namespaced_pod_status(self, *args: Any, **kwargs: Any) -> FakeResponse:
        return await answer(self.outcomes, None, 200)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (201, EvictionResult.EVICTED),
        ((404, 'pods "victim" not found'), EvictionResult.GONE),
        ((409, UID_MISMATCH), EvictionResult.GONE),
        ((409, "the object has been modified; please apply your changes"), EvictionResult.FAILED),
        (
            (429, "Cannot evict pod as it would violate the pod's disruption budget."),
            EvictionResult.BLOCKED,
        ),
        ((500, "etcdserver: request timed out"), EvictionResult.FAILED),
        (aiohttp.ServerDisconnectedError(), EvictionResult.FAILED),
        (aiohttp.ClientPayloadError("cut"), EvictionResult.FAILED),
        (TimeoutError(), EvictionResult.FAILED),
        (ConnectionResetError(), EvictionResult.FAILED),
    ],
)
async def test_every_answer_is_an_eviction_result(
    outcome: Outcome, expected: EvictionResult
) -> None:
    result, message = await evict_pod(EvictionCore([outcome]), "ns", "victim", "1111")  # type: ignore[arg-type]
    assert result is expected
    assert (message == "") == (expected is EvictionResult.EVICTED)


async def test_nomination_raises_typed_errors_for_client_failures() -> None:
    with pytest.raises(APITransportError, match="nomination of ns/pod"):
        await nominate(EvictionCore([aiohttp.ServerDisconnectedError()]), "ns", "pod", "n1")  # type: ignore[arg-type]
