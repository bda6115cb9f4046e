"""The pacing of Binding calls (`binding.qps` / `binding.burst`, `scheduler.kube.rate_limit`): a
token bucket taken inside a bind slot, before the leadership check and the call; and a pause of
every bind for the Retry-After of a 429."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from scheduler.config import BindingConfig, ConfigError, config_from_data
from scheduler.kube.apierrors import APITooManyRequestsError, expect_success
from scheduler.kube.rate_limit import (
    DEFAULT_PAUSE_S,
    MAX_PAUSE_S,
    BindRateLimiter,
    bind_rate_limiter,
)
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import FakeClock, FakeResponse, harness

APF_REFUSAL = "Too many requests, please try again later.\n"
"""The body of priority and fairness's 429 (k8s.io/apiserver v0.37.2
pkg/server/filters/priority-and-fairness.go, `tooManyRequests`): plain text, not a Status."""


def limiter_on(clock: FakeClock, qps: float, burst: int = 0) -> BindRateLimiter:
    return BindRateLimiter(qps, burst, clock=clock, sleep=clock.sleep)


async def times_of(limiter: BindRateLimiter, clock: FakeClock, calls: int) -> list[float]:
    """When each of `calls` acquisitions in a row went through, relative to the start."""
    start, times = clock.now, []
    for _ in range(calls):
        await limiter.acquire()
        times.append(round(clock.now - start, 6))
    return times


async def test_no_qps_means_no_bucket() -> None:
    clock = FakeClock()
    limiter = bind_rate_limiter(0.0, burst=10)
    assert not limiter.limited
    limiter.clock, limiter.sleep = clock, clock.sleep
    assert await times_of(limiter, clock, 1000) == [0.0] * 1000


@pytest.mark.parametrize(
    ("qps", "burst", "held"), [(100.0, 0, 200), (100.0, 50, 50), (0.2, 0, 1), (2.5, 0, 5)]
)
async def test_bucket_lets_the_burst_through_then_qps_a_second(
    qps: float, burst: int, held: int
) -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, qps, burst)
    assert limiter.burst == held
    times = await times_of(limiter, clock, held + 3)
    assert times[:held] == [0.0] * held
    assert times[held:] == pytest.approx([1 / qps, 2 / qps, 3 / qps])


async def test_tokens_saved_up_in_a_quiet_spell_never_exceed_the_burst() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 10.0, 4)
    await times_of(limiter, clock, 4)
    clock.now += 60.0  # quiet for a minute: 600 tokens' worth, but the bucket holds 4
    assert await times_of(limiter, clock, 6) == pytest.approx([0, 0, 0, 0, 0.1, 0.2])


async def test_a_pause_holds_every_call_and_the_bucket_restarts_empty() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 10.0, 5)
    assert limiter.pause(3.0) == 3.0
    # the 5 saved tokens are gone: after the pause, one call every 0.1 s
    assert await times_of(limiter, clock, 3) == pytest.approx([3.1, 3.2, 3.3])
    assert limiter.pauses == 1


async def test_a_pause_without_a_bucket_holds_calls_until_it_ends() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 0.0)
    limiter.pause(2.0)
    assert await times_of(limiter, clock, 3) == [2.0, 2.0, 2.0]


def test_a_pause_is_only_lengthened_and_bounded() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 10.0)
    assert limiter.pause(5.0) == 5.0
    assert limiter.pause(1.0) == 5.0  # a shorter Retry-After does not end the longer pause
    clock.now += 1.0
    assert limiter.pause(None) == 4.0  # no Retry-After: DEFAULT_PAUSE_S, inside the pause
    assert limiter.pause(10 * MAX_PAUSE_S) == MAX_PAUSE_S
    clock.now += MAX_PAUSE_S + 1
    assert limiter.pause(None) == DEFAULT_PAUSE_S
    assert limiter.pause(-3.0) == DEFAULT_PAUSE_S  # a negative wait is none


async def test_a_pause_that_begins_while_a_call_waits_for_its_token_holds_it() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 1.0, 1)
    await limiter.acquire()  # the only token
    waiting = asyncio.create_task(limiter.acquire())  # sleeps 1 s for the next token
    await asyncio.sleep(0)
    limiter.pause(10.0)  # at 1 s (the fake sleep moved the clock): the pause ends at 11 s
    await waiting
    assert clock.now - 1000.0 == pytest.approx(12.0)  # the pause, then a token from empty


async def test_waiting_calls_go_in_the_order_they_asked() -> None:
    clock = FakeClock()
    limiter = limiter_on(clock, 5.0, 1)
    order: list[int] = []

    async def call(index: int) -> None:
        await limiter.acquire()
        order.append(index)

    await asyncio.gather(*(call(i) for i in range(8)))
    assert order == list(range(8))


def test_settings_default_to_a_rate_limit_and_are_validated() -> None:
    config = config_from_data({"binding": {"qps": 150, "burst": 300}})
    assert (config.binding.qps, config.binding.burst) == (150.0, 300)
    assert (BindingConfig().qps, BindingConfig().burst, BindingConfig().concurrency) == (
        100.0,
        200,
        1000,
    )
    assert config_from_data({"binding": {"qps": 0}}).binding.qps == 0.0
    for bad in ({"qps": -1}, {"qps": float("nan")}, {"burst": -1}, {"burst": 1.5}):
        with pytest.raises(ConfigError) as raised:
            config_from_data({"binding": bad})
        assert raised.value.key == f"binding.{next(iter(bad))}"


async def test_binds_beyond_the_burst_wait_for_a_token() -> None:
    """One token and no refill within the test: the first pod is bound, the second waits in
    its slot without a call; stopping the binds forgets and requeues it."""
    never = BindRateLimiter(1 / 3600, 1)
    h = harness(cluster(make_node("n", gpus=8)), bind_limiter=never)
    h.add(pod_info("a", gpus=1))
    h.add(pod_info("b", gpus=1))
    for _ in range(2):
        queued = h.queue.pop_nowait()
        assert queued is not None
        h.scheduler.schedule_one(queued)
    for _ in range(50):  # bounded: let both binding tasks run as far as they can
        await asyncio.sleep(0)

    assert [b["metadata"]["name"] for b in h.core.bindings] == ["a"]
    assert h.scheduler.binds_in_flight == 1
    assert h.cache.is_assumed("default/b")

    await h.scheduler.finish_binds(timeout=0.05)
    assert [b["metadata"]["name"] for b in h.core.bindings] == ["a"]
    assert not h.cache.is_assumed("default/b")
    assert h.queue.where("default/b") == "backoff"


# -- a 429 answer --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "seconds"),
    [
        (FakeResponse.plain(429, APF_REFUSAL, {"Retry-After": "4"}), 4.0),
        (FakeResponse.plain(429, APF_REFUSAL), None),
        (FakeResponse.plain(429, APF_REFUSAL, {"Retry-After": "soon"}), None),
        (FakeResponse.plain(429, APF_REFUSAL, {"Retry-After": "-2"}), None),
        (FakeResponse.json(429, {"kind": "Status", "details": {"retryAfterSeconds": 7}}), 7.0),
        (
            FakeResponse.json(429, {"details": {"retryAfterSeconds": 7}}).with_headers(
                {"Retry-After": "2"}
            ),
            2.0,
        ),
    ],
    ids=["header", "none", "not-a-number", "negative", "status-details", "header-first"],
)
async def test_a_429_carries_the_seconds_to_wait(
    response: FakeResponse, seconds: float | None
) -> None:
    with pytest.raises(APITooManyRequestsError) as caught:
        await expect_success(response, "binding default/a")
    assert caught.value.retry_after == seconds
    assert caught.value.too_many_requests


async def test_a_429_on_a_binding_pauses_every_bind_for_its_retry_after() -> None:
    """The refused pod backs off as after any failed bind; the next pod's Binding waits the
    Retry-After out, then goes (the bucket starts empty: one token after 1/qps)."""
    h = harness(cluster(make_node("n", gpus=8)))
    limiter = limiter_on(h.clock, 10.0, 20)
    h.scheduler.bind_limiter = limiter
    h.core.bind_outcomes.append(FakeResponse.plain(429, APF_REFUSAL, {"Retry-After": "3"}))
    h.add(pod_info("a", gpus=1))
    h.add(pod_info("b", gpus=1))

    with capture_logs() as logs:
        refused_at = h.clock.now
        assert await h.cycle() == "default/a"
        assert h.queue.where("default/a") == "backoff"
        assert not h.cache.is_assumed("default/a")
        assert limiter.resume_at == refused_at + 3.0

        assert await h.cycle() == "default/b"
    assert [b["metadata"]["name"] for b in h.core.bindings] == ["a", "b"]
    assert h.cache.is_assumed("default/b")  # bound, waiting for the informer
    assert h.clock.now == pytest.approx(refused_at + 3.1)
    [paused] = [e for e in logs if e["event"] == "binds_paused"]
    assert (paused["pod"], paused["retry_after"], paused["paused_s"]) == ("default/a", 3.0, 3.0)
    assert [e["reason"] for e in h.events.bodies] == ["FailedScheduling", "Scheduled"]


async def test_a_429_without_retry_after_pauses_one_second() -> None:
    h = harness(cluster(make_node("n", gpus=8)))
    h.core.bind_outcomes.append(FakeResponse.plain(429, APF_REFUSAL))
    h.add(pod_info("a", gpus=1))
    refused_at = h.clock.now
    await h.cycle()
    assert h.scheduler.bind_limiter.resume_at == refused_at + DEFAULT_PAUSE_S
    assert h.queue.where("default/a") == "backoff"


@pytest.mark.parametrize("status", [409, 500, 503])
async def test_other_refusals_do_not_pause(status: int) -> None:
    h = harness(cluster(make_node("n", gpus=8)))
    h.core.bind_outcomes.append(FakeResponse.plain(status, "no", {"Retry-After": "3"}))
    h.add(pod_info("a", gpus=1))
    await h.cycle()
    assert h.scheduler.bind_limiter.pauses == 0
