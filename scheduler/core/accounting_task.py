"""The GPU time sampler: once per `accounting.periodSeconds`, one usage query for every GPU holder.

Holders are every pod in the cache bound to a node, not finished and holding whole GPUs,
whoever scheduled it (the pod informer lists all pods): through the device plugin
(nvidia.com/gpu) or through DRA, one GPU per device of a `dra.gpuDrivers` driver allocated to its
claims reserved for it (`scheduler.state.gpu_holdings`). Each period sends ONE batched Prometheus
query (`reclaim.accounting_query.measure_holders`), computes the period's increments
(`reclaim.accounting.account_period`) and adds them to a `Ledger`; `GpuTimeCollector` exports
the ledger at every scrape.

Read-only (it writes nothing to the API server), so it runs on EVERY replica, leader or not:
each replica exports the same cluster-wide totals of its own uptime, and dashboards take one
replica's series (e.g. `max by (namespace, priority_class)` of the rates) rather than a sum.

The period's length is the time since the previous period started (the first: the setting), so
a late tick neither loses nor double-counts time; a gap longer than `MAX_PERIODS_PER_TICK`
periods (a suspended process) is cut to that. Prometheus down, slow or erroring: the period's
allocated seconds are added as unmeasured, no busy seconds, the idle gauge drops to 0, a log
line says why; the next period tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection

import structlog

from metrics.gpu_time import GpuTimeCollector, GpuTimeTotals
from reclaim.accounting import Holder, Ledger, Measure, PeriodIncrements, account_period
from reclaim.accounting_query import measure_holders
from reclaim.prometheus import PrometheusClient
from reclaim.promql import LabelNames
from reclaim.usage import DEFAULT_POWER_MODELS, PowerModel
from scheduler.config import ReclaimConfig, SchedulerConfig
from scheduler.model.objects import PodInfo
from scheduler.state.cache import ClusterCache
from scheduler.state.gpu_holdings import GpuHoldings

log = structlog.get_logger("gpu-scheduler.accounting")

MAX_PERIODS_PER_TICK = 10.0
MAX_ERROR_CHARS = 200


def power_models(reclaim: ReclaimConfig) -> dict[str, PowerModel]:
    """The built-in power models with `reclaim.powerModels` added or replacing them."""
    models = dict(DEFAULT_POWER_MODELS)
    for model, watts in reclaim.power_models.items():
        models[model] = PowerModel(watts["idleWatts"], watts["maxWatts"])
    return models


def measure_of(settings: SchedulerConfig) -> Measure:
    reclaim, accounting = settings.reclaim, settings.accounting
    return Measure(
        scrape_interval_s=reclaim.scrape_interval_seconds,
        min_coverage=reclaim.min_coverage,
        power_models=power_models(reclaim),
        idle_window_s=accounting.idle_window_seconds,
        idle_threshold_pct=accounting.idle_usage_threshold_percent,
        per_process_shared_usage=reclaim.per_process_shared_usage,
    )


def holder_of(pod: PodInfo, node: str, gpus: int) -> Holder | None:
    """`pod` as a holder of `gpus` whole GPUs on `node` (`scheduler.state.gpu_holdings`); None
    unless it is bound, not finished and holds any."""
    if gpus <= 0 or not pod.holds_resources:
        return None
    moment = pod.scheduled_at or pod.created
    return Holder(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        priority_class=pod.priority_class,
        gpus=gpus,
        started_at=None if moment is None else moment.timestamp(),
        node=node,
    )


def cache_holders(cache: ClusterCache, gpu_drivers: Collection[str]) -> list[Holder]:
    """Every pod of the cache that holds whole GPUs, DRA devices of `gpu_drivers` included
    (reservations and assumed pods left out: they hold nothing yet)."""
    holders = []
    holdings = GpuHoldings(cache, gpu_drivers)
    for state in cache.pods.values():
        if state.assumed or state.reserved_at is not None:
            continue
        holder = holder_of(state.info, state.node, holdings.of(state.info, state.node))
        if holder is not None:
            holders.append(holder)
    return holders


class GpuAccounting:
    """The sampler task and its ledger; `collector` exports the ledger."""

    def __init__(
        self,
        settings: SchedulerConfig,
        cache: ClusterCache,
        prometheus: PrometheusClient | None,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.gpu_drivers = settings.dra.gpu_drivers
        self.prometheus = prometheus
        self.period_s = settings.accounting.period_seconds
        self.timeout_s = settings.reclaim.prometheus_timeout_seconds
        self.measure = measure_of(settings)
        self.ledger = Ledger()
        self.wall_clock = wall_clock
        self.clock = clock
        self.collector = GpuTimeCollector(self.totals)

    @classmethod
    def from_settings(cls, settings: SchedulerConfig, cache: ClusterCache) -> GpuAccounting:
        """The sampler; it measures nothing (and says so once) when accounting is off or no
        Prometheus is configured."""
        reclaim = settings.reclaim
        if not settings.accounting.enabled or not reclaim.prometheus_url:
            return cls(settings, cache, None)
        prometheus = PrometheusClient(
            reclaim.prometheus_url,
            timeout_s=reclaim.prometheus_timeout_seconds,
            label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
        )
        return cls(settings, cache, prometheus)

    def totals(self) -> GpuTimeTotals:
        ledger = self.ledger
        return GpuTimeTotals(
            dict(ledger.allocated_s),
            dict(ledger.busy_s),
            dict(ledger.unmeasured_s),
            dict(ledger.idle_gpus),
            ledger.periods,
            ledger.failed_periods,
        )

    async def sample(self, period_s: float) -> PeriodIncrements:
        """Measure one period of `period_s` seconds ending now and add it to the ledger."""
        assert self.prometheus is not None
        holders = cache_holders(self.cache, self.gpu_drivers)
        failed = False
        try:
            windows = await asyncio.wait_for(
                measure_holders(
                    self.prometheus,
                    holders,
                    period_s,
                    self.measure.idle_window_s,
                    self.measure.scrape_interval_s,
                ),
                self.timeout_s,
            )
            period, idle = windows.period, windows.idle
        except Exception as error:  # down, slow, erroring: the period stays unmeasured
            text = str(error) or type(error).__name__
            log.warning(
                "gpu_accounting_query_failed",
                holders=len(holders),
                period_s=round(period_s, 3),
                error=text[:MAX_ERROR_CHARS],
            )
            period, idle, failed = None, None, True
        increments = account_period(
            holders, period, idle, period_s, self.wall_clock(), self.measure
        )
        self.ledger.add(increments, failed=failed)
        return increments

    async def run(self) -> None:
        """Sample every `period_s` seconds until cancelled; closes the Prometheus session.
        Without Prometheus (or turned off) it only waits to be cancelled."""
        if self.prometheus is None:
            log.info("gpu_accounting_off", reason="accounting.enabled false or no prometheusUrl")
            await asyncio.Event().wait()
            return
        try:
            started = self.clock()
            while True:
                await asyncio.sleep(max(0.0, started + self.period_s - self.clock()))
                now = self.clock()
                elapsed = min(now - started, MAX_PERIODS_PER_TICK * self.period_s)
                started = now
                await self.sample(elapsed)
        finally:
            await self.prometheus.close()
