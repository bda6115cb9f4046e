"""The client-side rate limit of Binding calls (`binding.qps` / `binding.burst`): a token bucket
taken inside a bind slot, before the leadership check and the call."""

from __future__ import annotations

import asyncio

import pytest
from aiolimiter import AsyncLimiter

from scheduler.config import BindingConfig, ConfigError, config_from_data
from scheduler.kube.binding import bind_rate_limiter
from tests.unit.scheduler.builders import cluster, make_node, pod_info
from tests.unit.scheduler.core_api_double import harness


def test_no_qps_means_no_limiter() -> None:
    assert bind_rate_limiter(0.0) is None
    assert bind_rate_limiter(0.0, burst=10) is None


@pytest.mark.parametrize(
    ("qps", "burst", "capacity", "period"),
    [(100.0, 0, 200, 2.0), (100.0, 50, 50, 0.5), (0.2, 0, 1, 5.0), (2.5, 0, 5, 2.0)],
)
def test_limiter_holds_burst_tokens_refilled_at_qps(
    qps: float, burst: int, capacity: int, period: float
) -> None:
    limiter = bind_rate_limiter(qps, burst)
    assert limiter is not None
    assert (limiter.max_rate, limiter.time_period) == (capacity, pytest.approx(period))
    assert limiter.max_rate / limiter.time_period == pytest.approx(qps)


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
    h = harness(cluster(make_node("n", gpus=8)), bind_limiter=AsyncLimiter(1, time_period=3600.0))
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
