"""The GPU health monitor: every `health.periodSeconds`, which GPUs are sick, into the cache.

Each period sends ONE Prometheus query (`reclaim.health.read_health`: fatal Xids, uncorrectable
ECC errors, failed row remapping over `health.lookbackSeconds`) and applies the verdicts:

- every node: the sick GPU indices go to `ClusterCache.set_sick_gpus` (device-plugin nodes:
  never chosen, not counted free, the GPUHealth filter names them);
- DRA nodes: the device whose `uuid` attribute is the sick GPU's UUID is tainted NoSchedule in
  memory (`scheduler.state.gpu_health.apply_device_taints`), so the allocator skips it;
- when anything changed, unschedulable pods are retried (a recovered GPU may fit them);
- while this replica leads and its caches are synced: a Warning Event `GPUUnhealthy` on the
  node and on every pod holding the GPU, once per change of a GPU's verdict (a new leader
  reports the sick GPUs once), and a Normal Event `GPURecovered` on the node when the GPU
  recovers; with `health.writeDeviceTaintRules`, the DeviceTaintRules of sick DRA devices are
  created and those of recovered ones deleted (`scheduler.kube.device_taint_rules`, fenced
  writes; the rules this scheduler owns are recognized by their name prefix in the
  DeviceTaintRule informer's store).

Read-only parts run on every replica (followers keep the cache warm). Prometheus down, slow or
erroring: the previous verdicts stay, a log line says why, the next period tries again. A GPU
the answer does not mention is healthy (see `reclaim.health`).

`unhealthy_counts` feeds the gauge `gpu_scheduler_unhealthy_gpus{node,reason}`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Protocol

import structlog

from reclaim.health import GpuRef, Sickness, read_health
from reclaim.prometheus import PrometheusClient, PrometheusQueryFailed
from reclaim.promql import LabelNames
from scheduler.config import SchedulerConfig
from scheduler.core.queue import SchedulingQueue
from scheduler.kube.apierrors import APIError
from scheduler.kube.device_taint_rules import (
    HEALTH_RULE_PREFIX,
    create_rule,
    delete_rule,
    health_rule_body,
    health_rule_name,
    taint_value,
)
from scheduler.kube.events import NORMAL, WARNING, ObjectRef
from scheduler.model.objects import PodInfo
from scheduler.state.context import SchedulerContext
from scheduler.state.dra import DeviceID
from scheduler.state.gpu_health import pods_on_devices, pods_on_gpu, record_verdicts

log = structlog.get_logger("gpu-scheduler.core.health")

REASON = "GPUUnhealthy"
RECOVERED = "GPURecovered"
EVENT = "GPUHealthChange"
"""The queue event when a verdict changed."""


class HealthSource(Protocol):
    """The sick GPUs now (`PrometheusHealth`); raises PrometheusQueryFailed."""

    async def sick_gpus(self) -> dict[GpuRef, Sickness]: ...


class PrometheusHealth:
    """`HealthSource` over the Prometheus of `reclaim.prometheusUrl`."""

    def __init__(self, settings: SchedulerConfig) -> None:
        reclaim = settings.reclaim
        self.health = settings.health
        self.step_s = reclaim.scrape_interval_seconds
        self.client = PrometheusClient(
            reclaim.prometheus_url,
            timeout_s=reclaim.prometheus_timeout_seconds,
            label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
        )

    async def sick_gpus(self) -> dict[GpuRef, Sickness]:
        health = self.health
        return await read_health(
            self.client, health.fatal_xids, health.lookback_seconds, self.step_s
        )

    async def close(self) -> None:
        await self.client.close()


def health_source(settings: SchedulerConfig) -> PrometheusHealth | None:
    """The source the daemon runs the monitor with; None when health is off or no Prometheus
    is configured."""
    if not settings.health.enabled or not settings.reclaim.prometheus_url:
        return None
    return PrometheusHealth(settings)


class GpuHealthMonitor:
    """Applies GPU health verdicts to the cache and reports them; see the module docstring."""

    def __init__(
        self,
        context: SchedulerContext,
        queue: SchedulingQueue[PodInfo],
        source: HealthSource,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self.context = context
        self.queue = queue
        self.source = source
        self.synced = synced
        """Whether the informers' caches are synced: until then nothing is reported or written
        (the pods holding a GPU, and the DeviceTaintRules already there, are not known yet)."""
        self.verdicts: dict[GpuRef, Sickness] = {}
        self.devices: dict[GpuRef, list[DeviceID]] = {}
        """The DRA devices of each sick GPU (by its UUID)."""
        self.reported: dict[GpuRef, Sickness] = {}
        """What this replica last reported in events while leading."""
        self.failures = 0

    # -- one period ------------------------------------------------------------------------------

    async def refresh(self) -> bool:
        """One period; True when the cache changed."""
        try:
            verdicts = await self.source.sick_gpus()
        except PrometheusQueryFailed as error:
            self.failures += 1
            log.warning("gpu_health_refresh_failed", error=str(error))
            return False
        changed = self.apply(verdicts)
        if self.context.is_leader() and self.synced():
            self.report()
            if self.context.settings.health.write_device_taint_rules:
                await self.write_rules()
        return changed

    def apply(self, verdicts: Mapping[GpuRef, Sickness]) -> bool:
        """Put `verdicts` into the cache (indices and DRA device taints); True on a change, in
        which case unschedulable pods are retried."""
        self.verdicts = dict(verdicts)
        changed, self.devices = record_verdicts(self.context.cache, self.verdicts)
        if changed:
            sick = {f"{g.node}/{g.index}": s.describe() for g, s in sorted(self.verdicts.items())}
            log.info("gpu_health_changed", sick=sick)
            self.queue.move_all_to_active_or_backoff(EVENT)
        return changed

    # -- reporting ---------------------------------------------------------------------------

    def holders(self, gpu: GpuRef) -> list[PodInfo]:
        """Pods holding the GPU: by index on device-plugin nodes, by claim on DRA nodes."""
        cache = self.context.cache
        found = {pod.key: pod for pod in pods_on_gpu(cache, gpu.node, gpu.index)}
        found.update((pod.key, pod) for pod in pods_on_devices(cache, self.devices.get(gpu, [])))
        return [found[key] for key in sorted(found)]

    def report(self) -> None:
        """Events for every GPU whose verdict changed since this replica last reported."""
        recorder = self.context.recorder
        for gpu, sickness in sorted(self.verdicts.items()):
            if self.reported.get(gpu) == sickness:
                continue
            self.reported[gpu] = sickness
            what = self.describe_gpu(gpu)
            note = f"{what} is unhealthy ({sickness.describe()}); it is not chosen for new pods"
            recorder.emit(ObjectRef("Node", gpu.node), WARNING, REASON, "Scheduling", note)
            for pod in self.holders(gpu):
                ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
                pod_note = f"{what}, held by this pod, is unhealthy ({sickness.describe()})"
                recorder.emit(ref, WARNING, REASON, "Scheduling", pod_note)
            log.warning("gpu_unhealthy", gpu=what, reason=sickness.describe())
        for gpu in sorted(set(self.reported) - set(self.verdicts)):
            del self.reported[gpu]
            what = self.describe_gpu(gpu)
            note = f"{what} recovered; it may be chosen again"
            recorder.emit(ObjectRef("Node", gpu.node), NORMAL, RECOVERED, "Scheduling", note)
            log.info("gpu_recovered", gpu=what)

    def describe_gpu(self, gpu: GpuRef) -> str:
        text = f"GPU {gpu.index} of node {gpu.node}"
        if gpu.uuid:
            text += f" ({gpu.uuid})"
        devices = self.devices.get(gpu)
        if devices:
            text += ", device " + ", ".join("/".join(device) for device in devices)
        return text

    # -- DeviceTaintRules --------------------------------------------------------------------

    async def write_rules(self) -> None:
        """Create the rules of sick DRA devices that the informer does not show, delete the
        owned rules of devices no longer sick. A failed write is logged and retried next
        period."""
        context = self.context
        wanted: dict[str, tuple[DeviceID, str]] = {}
        for gpu, devices in self.devices.items():
            value = taint_value(self.verdicts[gpu].kinds())
            for device in devices:
                wanted[health_rule_name(*device)] = (device, value)
        existing = {
            name: rule
            for name, rule in context.cache.dra.taint_rules.items()
            if name.startswith(HEALTH_RULE_PREFIX)
        }
        timeout = context.settings.binding.timeout_seconds
        for name, (device, value) in sorted(wanted.items()):
            rule = existing.get(name)
            if rule is not None and rule.taint is not None and rule.taint.value == value:
                continue
            try:
                if rule is not None:
                    await delete_rule(context.api_client, name, timeout)
                body = health_rule_body(*device, value, context.scheduler_name)
                await create_rule(context.api_client, body, timeout)
                log.info("device_taint_rule_created", rule=name, device="/".join(device))
            except APIError as error:
                log.warning("device_taint_rule_write_failed", rule=name, error=str(error))
        for name in sorted(set(existing) - set(wanted)):
            try:
                await delete_rule(context.api_client, name, timeout)
                log.info("device_taint_rule_deleted", rule=name)
            except APIError as error:
                log.warning("device_taint_rule_write_failed", rule=name, error=str(error))

    # -- metrics and the loop --------------------------------------------------------------------

    def unhealthy_counts(self) -> dict[tuple[str, ...], int]:
        """Sick GPUs by (node, reason kind) for `gpu_scheduler_unhealthy_gpus`."""
        counts: Counter[tuple[str, ...]] = Counter()
        for gpu, sickness in self.verdicts.items():
            for kind in sickness.kinds():
                counts[(gpu.node, kind)] += 1
        return dict(counts)

    async def run(self) -> None:
        """Refresh at once, then every `health.periodSeconds`, until cancelled."""
        period = self.context.settings.health.period_seconds
        while True:
            await self.refresh()
            await asyncio.sleep(period)
