"""Measured GPU usage for idle reclaim: where it comes from (`UsageSource`, the Prometheus
adapter `reclaim.prometheus.PrometheusClient`) and the idle verdict of each candidate victim
(`UsageMeter`, with `reclaim.usage.idle_verdict`).

One query per distinct idle window: a window whose query fails, times out
(`reclaim.prometheusTimeoutSeconds`) or returns nothing leaves only its own pods unmeasured,
and an unmeasured pod is never idle. Only when every window failed is the attempt skipped,
saying why; nothing is ever evicted on missing metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

import structlog

from reclaim.signals import GpuWindow, with_own_usage
from reclaim.usage import DEFAULT_POWER_MODELS, PowerModel, idle_verdict
from scheduler.config import ReclaimConfig
from scheduler.model.objects import PodInfo
from scheduler.postfilter.reclaim_events import ReclaimReporter, cut
from scheduler.victims.candidates import Victim

log = structlog.get_logger("gpu-scheduler.reclaim")


class UsageSource(Protocol):
    """Where measured usage comes from (the Prometheus adapter)."""

    async def usage_windows(
        self,
        pods: list[tuple[str, str]],
        window_s: float,
        *,
        scrape_interval_s: float | None = None,
        started_at: Mapping[tuple[str, str], float] | None = None,
        uids: Mapping[tuple[str, str], str] | None = None,
    ) -> Mapping[tuple[str, str], list[GpuWindow]]:
        """See `reclaim.prometheus.PrometheusClient.usage_windows`: `started_at` (epoch seconds)
        keeps a predecessor's samples out of a pod's window, `uids` drops other pods' series
        where they carry a UID, `scrape_interval_s` sizes the sub-windows."""
        ...


class UsageMeter:
    """Judges candidate victims idle or not from `usage` (see the module docstring); the GPU
    power models are the defaults overridden by `reclaim.powerModels`."""

    def __init__(
        self, settings: ReclaimConfig, usage: UsageSource, reporter: ReclaimReporter
    ) -> None:
        self.settings = settings
        self.usage = usage
        self.reporter = reporter
        self.power_models: dict[str, PowerModel] = dict(DEFAULT_POWER_MODELS)
        for model, watts in settings.power_models.items():
            self.power_models[model] = PowerModel(watts["idleWatts"], watts["maxWatts"])

    async def measure(self, pod: PodInfo, victims: list[Victim]) -> list[Victim] | None:
        """The victims with their verdicts, one Prometheus query per idle window. A window whose
        query fails or returns nothing leaves only its own pods unmeasured (never idle); only
        when every window failed does the attempt stop, saying why (a skip of `pod`)."""
        by_window: dict[int, list[Victim]] = {}
        for victim in victims:
            by_window.setdefault(victim.window_s, []).append(victim)
        measured: list[Victim] = []
        failures: list[tuple[str, str]] = []
        for window_s, group in sorted(by_window.items()):
            pods = [(v.pod.namespace, v.pod.name) for v in group]
            started_at = {
                key: moment.timestamp()
                for key, v in zip(pods, group, strict=True)
                if (moment := v.pod.scheduled_at or v.pod.created) is not None
            }
            try:
                windows = await asyncio.wait_for(
                    self.usage.usage_windows(
                        pods,
                        float(window_s),
                        scrape_interval_s=self.settings.scrape_interval_seconds,
                        started_at=started_at,
                        uids={key: v.pod.uid for key, v in zip(pods, group, strict=True)},
                    ),
                    self.settings.prometheus_timeout_seconds,
                )
            except Exception as error:  # down, slow, erroring: never evict on missing metrics
                text = cut(str(error) or type(error).__name__)
                log.warning(
                    "reclaim_query_failed", preemptor=pod.key, window_s=window_s, error=text
                )
                failures.append(
                    ("prometheus_unavailable", f"reclaim skipped: Prometheus query failed: {text}")
                )
                continue
            if not any(windows.get(p) for p in pods):
                log.info("reclaim_no_metrics", preemptor=pod.key, window_s=window_s, pods=len(pods))
                failures.append(
                    (
                        "no_metrics",
                        f"reclaim skipped: Prometheus has no GPU samples for the {len(pods)} "
                        f"candidate pod(s) over {window_s} s",
                    )
                )
                continue
            for victim, key in zip(group, pods, strict=True):
                verdict = idle_verdict(
                    with_own_usage(windows.get(key, []), self.settings.per_process_shared_usage),
                    victim.threshold_pct,
                    self.power_models,
                    scrape_interval_s=self.settings.scrape_interval_seconds,
                    min_coverage=self.settings.min_coverage,
                    held_gpus=victim.held_gpus,
                )
                measured.append(replace(victim, verdict=verdict))
        if not measured:
            reason, note = failures[0]
            self.reporter.skip(pod, reason, note)
            return None
        return measured
