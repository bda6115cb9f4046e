"""The accounting's single batched query, its answer split back into two parts, and the
collector that exports the totals."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metrics.gpu_time import GpuTimeCollector, GpuTimeTotals
from reclaim.accounting_query import accounting_query, split_answer
from reclaim.prometheus import Sample, assemble_windows
from reclaim.promql import DEFAULT_LABELS, SIGNAL_LABEL

PODS = [("team-a", "p0"), ("team-b", "p1")]


def test_one_query_holds_both_windows_and_one_power_floor() -> None:
    text = accounting_query(PODS, 60.0, 3600.0, DEFAULT_LABELS, 30.0)
    assert text.count('"period/util_sum"') == 1
    assert text.count('"idle/util_sum"') == 1
    assert text.count("power_floor") == 1  # asked once, in the idle part
    assert "period/util_peak" not in text
    assert "[1m]" in text or "[60s]" in text
    assert "[3600s]" in text


def element(signal: str, value: float, pod: str = "p0", gpu: str = "0") -> Sample:
    labels = {
        SIGNAL_LABEL: signal,
        "namespace": "team-a",
        "pod": pod,
        "Hostname": "n1",
        "gpu": gpu,
        "modelName": "NVIDIA H200",
    }
    return Sample(labels, value, 1000.0)


def test_split_restores_bare_signals_and_copies_the_power_floor() -> None:
    answer = [
        element("period/util_count", 60),
        element("period/util_sum", 3000),
        element("idle/util_count", 3600),
        element("idle/util_sum", 0),
        element("idle/power_floor", 120.0),
        element("unrelated", 1),
        element("", 1),
    ]
    period, idle = split_answer(answer)
    assert [s.labels[SIGNAL_LABEL] for s in period] == ["util_count", "util_sum", "power_floor"]
    assert [s.labels[SIGNAL_LABEL] for s in idle] == ["util_count", "util_sum", "power_floor"]
    (window,) = assemble_windows(period, [("team-a", "p0")], 60.0)[("team-a", "p0")]
    assert (window.util_samples, window.util_mean_pct, window.power_floor_w) == (60, 50.0, 120.0)


def scrape(totals: GpuTimeTotals) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = GpuTimeCollector(lambda: totals).register(CollectorRegistry())
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_collector_exports_counters_and_the_idle_gauge() -> None:
    totals = GpuTimeTotals(
        allocated_s={("team-a", "batch"): 120.0},
        busy_s={("team-a", "batch"): 60.0},
        unmeasured_s={("team-a", "batch"): 0.0},
        idle_gpus={"team-a": 2, "team-b": 0},
        periods=3,
        failed_periods=1,
    )
    samples = scrape(totals)
    group = (("namespace", "team-a"), ("priority_class", "batch"))
    assert samples[("gpu_scheduler_gpu_allocated_seconds_total", group)] == 120.0
    assert samples[("gpu_scheduler_gpu_busy_seconds_total", group)] == 60.0
    assert samples[("gpu_scheduler_gpu_unmeasured_seconds_total", group)] == 0.0
    assert samples[("gpu_scheduler_idle_gpus", (("namespace", "team-a"),))] == 2.0
    assert samples[("gpu_scheduler_idle_gpus", (("namespace", "team-b"),))] == 0.0
    assert samples[("gpu_scheduler_accounting_periods_total", (("result", "failed"),))] == 1.0
    assert samples[("gpu_scheduler_accounting_periods_total", (("result", "measured"),))] == 2.0


def test_collector_reads_the_totals_at_every_scrape() -> None:
    current = [GpuTimeTotals()]
    registry = GpuTimeCollector(lambda: current[0]).register(CollectorRegistry())
    assert b"gpu_scheduler_gpu_busy_seconds_total{" not in generate_latest(registry)
    current[0] = GpuTimeTotals(busy_s={("ns", ""): 5.0})
    assert b'gpu_scheduler_gpu_busy_seconds_total{namespace="ns",priority_class=""} 5.0' in (
        generate_latest(registry)
    )
