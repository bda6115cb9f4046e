"""The GPU time sampler: which pods of the cache it measures, one query per period, and a
Prometheus that fails adds no busy time and crashes nothing."""

from __future__ import annotations

from structlog.testing import capture_logs

from reclaim.prometheus import PrometheusClient, PrometheusUnavailable, Sample
from reclaim.promql import SIGNAL_LABEL
from scheduler.core.accounting_task import GpuAccounting, cache_holders
from scheduler.state.cache import ClusterCache
from tests.scheduling import settings_for
from tests.unit.scheduler.builders import cluster, make_node, make_pod

PERIOD_S = 60.0


class FakePrometheus(PrometheusClient):
    """Answers every query with `answer`, or raises `error`; records the queries."""

    def __init__(self, answer: list[Sample] | None = None, error: Exception | None = None) -> None:
        super().__init__("http://prometheus.invalid:9090")
        self.answer = answer or []
        self.error = error
        self.queries: list[str] = []

    async def query(self, promql: str) -> list[Sample]:
        self.queries.append(promql)
        if self.error is not None:
            raise self.error
        return self.answer


def gpu_cache() -> ClusterCache:
    return cluster(
        make_node("n1"),
        pods=[
            make_pod("train", gpus=2, node="n1", namespace="team", phase="Running"),
            make_pod("done", gpus=2, node="n1", namespace="team", phase="Succeeded"),
            make_pod("cpu", gpus=0, node="n1", namespace="team", phase="Running"),
            make_pod("waiting", gpus=1, namespace="team"),
        ],
    )


def accounting(prometheus: FakePrometheus) -> GpuAccounting:
    settings = settings_for("test", reclaim={"prometheusUrl": "http://prometheus.invalid:9090"})
    return GpuAccounting(settings, gpu_cache(), prometheus, wall_clock=lambda: 2e9)


def test_holders_are_the_bound_unfinished_pods_with_gpus() -> None:
    holders = cache_holders(gpu_cache(), ("gpu.nvidia.com",))
    assert [(h.namespace, h.name, h.gpus, h.node) for h in holders] == [("team", "train", 2, "n1")]


def util(signal: str, gpu: str, value: float) -> Sample:
    labels = {
        SIGNAL_LABEL: f"period/{signal}",
        "namespace": "team",
        "pod": "train",
        "Hostname": "n1",
        "gpu": gpu,
        "modelName": "NVIDIA H200",
    }
    return Sample(labels, value, 2e9)


async def test_one_query_per_period_and_busy_from_the_measured_fraction() -> None:
    # 30 s scrapes: a 60 s period needs 2 samples; GPU 0 at 50 %, GPU 1 at 100 %.
    answer = [
        util("util_count", "0", 2),
        util("util_sum", "0", 100),
        util("util_count", "1", 2),
        util("util_sum", "1", 200),
    ]
    prometheus = FakePrometheus(answer)
    sampler = accounting(prometheus)
    await sampler.sample(PERIOD_S)
    await sampler.sample(PERIOD_S)
    assert len(prometheus.queries) == 2
    key = ("team", "")
    assert sampler.ledger.allocated_s == {key: 240.0}
    assert sampler.ledger.busy_s == {key: 180.0}
    assert sampler.ledger.unmeasured_s == {key: 0.0}
    assert sampler.ledger.idle_gpus == {"team": 0}  # utilization alone never proves idle
    assert sampler.totals().busy_s == {key: 180.0}


async def test_prometheus_down_adds_no_busy_time_and_logs_why() -> None:
    error = PrometheusUnavailable("http://prometheus.invalid:9090", "connection refused")
    sampler = accounting(FakePrometheus(error=error))
    with capture_logs() as logs:
        increments = await sampler.sample(PERIOD_S)
    key = ("team", "")
    assert increments.allocated_s == {key: 120.0}
    assert increments.unmeasured_s == {key: 120.0}
    assert increments.busy_s == {key: 0.0}
    assert (sampler.ledger.periods, sampler.ledger.failed_periods) == (1, 1)
    (line,) = [entry for entry in logs if entry["event"] == "gpu_accounting_query_failed"]
    assert "connection refused" in line["error"]
    assert line["log_level"] == "warning"


async def test_without_prometheus_it_waits_and_measures_nothing() -> None:
    settings = settings_for("test", accounting={"enabled": False})
    sampler = GpuAccounting.from_settings(settings, gpu_cache())
    assert sampler.prometheus is None
    assert sampler.totals().periods == 0
