"""GPU time metrics as a prometheus_client custom collector: the platform's busy share.

The collector reads plain totals (`GpuTimeTotals`) from a callable at every scrape, so the
sampler that adds them up and the HTTP server never share anything but that call. Metrics:

| name                                         | type    | labels                    |
|----------------------------------------------|---------|---------------------------|
| gpu_scheduler_gpu_allocated_seconds_total    | counter | namespace, priority_class |
| gpu_scheduler_gpu_busy_seconds_total         | counter | namespace, priority_class |
| gpu_scheduler_gpu_unmeasured_seconds_total   | counter | namespace, priority_class |
| gpu_scheduler_idle_gpus                      | gauge   | namespace                 |
| gpu_scheduler_accounting_periods_total       | counter | result ("measured", "failed") |

Definitions: `reclaim.accounting`. The busy share of a namespace is
``rate(busy) / (rate(allocated) - rate(unmeasured))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

GROUP_LABELS = ["namespace", "priority_class"]


@dataclass(frozen=True)
class GpuTimeTotals:
    """Totals since the process started, keyed by (namespace, PriorityClass), and the idle gauge
    by namespace."""

    allocated_s: Mapping[tuple[str, str], float] = field(default_factory=dict)
    busy_s: Mapping[tuple[str, str], float] = field(default_factory=dict)
    unmeasured_s: Mapping[tuple[str, str], float] = field(default_factory=dict)
    idle_gpus: Mapping[str, int] = field(default_factory=dict)
    periods: int = 0
    failed_periods: int = 0


class GpuTimeCollector(Collector):
    """Yields the GPU time families from `read()` at every collect."""

    def __init__(self, read: Callable[[], GpuTimeTotals]) -> None:
        self.read = read

    def register(self, registry: CollectorRegistry) -> CollectorRegistry:
        """Register on `registry` and return it (one line at the call site)."""
        registry.register(self)
        return registry

    def collect(self) -> Iterator[Metric]:
        totals = self.read()
        for name, doc, values in (
            (
                "gpu_scheduler_gpu_allocated_seconds",
                "GPU seconds allocated to bound, unfinished pods requesting nvidia.com/gpu.",
                totals.allocated_s,
            ),
            (
                "gpu_scheduler_gpu_busy_seconds",
                "Allocated GPU seconds times the measured utilization fraction.",
                totals.busy_s,
            ),
            (
                "gpu_scheduler_gpu_unmeasured_seconds",
                "Allocated GPU seconds without usage samples: neither busy nor idle.",
                totals.unmeasured_s,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=GROUP_LABELS)
            for (namespace, priority_class), seconds in sorted(values.items()):
                family.add_metric([namespace, priority_class], seconds)
            yield family
        idle = GaugeMetricFamily(
            "gpu_scheduler_idle_gpus",
            "GPUs held by pods idle over the whole accounting idle window.",
            labels=["namespace"],
        )
        for namespace, gpus in sorted(totals.idle_gpus.items()):
            idle.add_metric([namespace], float(gpus))
        yield idle
        periods = CounterMetricFamily(
            "gpu_scheduler_accounting_periods",
            "Accounting periods, by whether the usage query answered.",
            labels=["result"],
        )
        periods.add_metric(["measured"], float(totals.periods - totals.failed_periods))
        periods.add_metric(["failed"], float(totals.failed_periods))
        yield periods
