"""Allocation tracking: which GPU indices pods really hold on device-plugin nodes, from
dcgm-exporter.

On a node that offers `nvidia.com/gpu` through the device plugin, the kubelet and the device
plugin pick a pod's GPUs when it starts (NVIDIA's plugin answers the kubelet's
GetPreferredAllocation with its own NVLink-aware choice); nothing on the node reads the
`gpu-scheduler.io/gpus` annotation. The scheduler's choice there is its intent, and its guess for
pods other schedulers bound. dcgm-exporter labels each GPU's series with the pod holding it, so
Prometheus knows the truth. Every `interval` seconds (`allocationTracking.periodSeconds`) the
tracker reads it (`PrometheusClient.gpu_holders`), lists where the cache differs
(`occupancy_corrections`), and corrects the cache's per-domain occupancy, all pods of a node at
once (`ClusterCache.correct_node_gpus`, so swaps converge in one round), logging each correction;
scoring and victim selection then use the corrected domains. The pod's annotation is not
rewritten. Prometheus trouble only skips a round. Pods on DRA nodes hold no GPU indices in the
cache (their claims' devices are the allocation the scheduler wrote), so nothing is corrected
there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import structlog

from reclaim.prometheus import (
    Correction,
    PodKey,
    PrometheusClient,
    PrometheusQueryFailed,
    occupancy_corrections,
)
from reclaim.promql import LabelNames
from scheduler.config import SchedulerConfig
from scheduler.state.cache import ClusterCache

log = structlog.get_logger("gpu-scheduler.core.allocation")

DEFAULT_INTERVAL_S = 30.0


class HolderSource(Protocol):
    """Who holds each GPU now, by (node, GPU index) (`PrometheusClient.gpu_holders`)."""

    async def gpu_holders(self) -> Mapping[tuple[str, int], set[PodKey]]: ...


class AllocationTracker:
    """Keeps the cache's GPU indices in step with what dcgm-exporter reports."""

    def __init__(
        self,
        cache: ClusterCache,
        prometheus: HolderSource,
        interval: float = DEFAULT_INTERVAL_S,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Corrects `cache` from `prometheus` every `interval` seconds; `close`, when given, is
        awaited when `run()` ends (the source's session)."""
        self.cache = cache
        self.prometheus = prometheus
        self.interval = interval
        self.close = close
        self.corrections = 0

    def recorded(self) -> dict[tuple[str, str], tuple[str, tuple[int, ...]]]:
        """What the cache holds for every bound pod with GPUs: (node, GPU indices)."""
        return {
            (state.info.namespace, state.info.name): (state.node, state.gpus)
            for state in self.cache.pods.values()
            if state.reserved_at is None and not state.assumed and state.info.gpus
        }

    async def refresh(self) -> int:
        """One round; returns how many pods the cache corrected."""
        holders = await self.prometheus.gpu_holders()
        by_node: dict[str, dict[str, Correction]] = {}
        for correction in occupancy_corrections(holders, self.recorded()):
            if correction.kind != "other-gpus":
                continue  # unknown pods arrive through the informer; nodes come from the API
            key = f"{correction.namespace}/{correction.pod}"
            by_node.setdefault(correction.node, {})[key] = correction
        changed = 0
        for node, corrections in sorted(by_node.items()):
            # One call per node: swaps and rotations between its pods converge in one round.
            observed = {key: c.gpus for key, c in corrections.items()}
            for key in self.cache.correct_node_gpus(node, observed):
                changed += 1
                log.info("gpu_allocation_corrected", pod=key, detail=corrections[key].describe())
        self.corrections += changed
        return changed

    async def run(self) -> None:
        """Refresh every `interval` seconds until cancelled; then `close`."""
        try:
            while True:
                await asyncio.sleep(self.interval)
                try:
                    await self.refresh()
                except PrometheusQueryFailed as error:
                    log.warning("gpu_allocation_refresh_failed", error=str(error))
        finally:
            if self.close is not None:
                await self.close()


def allocation_tracker(settings: SchedulerConfig, cache: ClusterCache) -> AllocationTracker | None:
    """The tracker the daemon runs, with its own Prometheus session; None (logged once) when
    `allocationTracking.enabled` is false or `reclaim.prometheusUrl` is empty: the cache then
    keeps the scheduler's choice of GPU indices for the pod's whole life."""
    reclaim = settings.reclaim
    if not settings.allocation_tracking.enabled or not reclaim.prometheus_url:
        log.info(
            "gpu_allocation_tracking_off",
            reason="allocationTracking.enabled false or no reclaim.prometheusUrl",
        )
        return None
    source = PrometheusClient(
        reclaim.prometheus_url,
        timeout_s=reclaim.prometheus_timeout_seconds,
        label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
    )
    return AllocationTracker(
        cache, source, settings.allocation_tracking.period_seconds, close=source.close
    )
