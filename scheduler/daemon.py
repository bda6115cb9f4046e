"""The daemon: named, guarded tasks in one TaskGroup, and an explicit graceful stop.

Tasks:

| task            | does                                                                  |
|-----------------|-----------------------------------------------------------------------|
| informer:nodes  | list+watch Nodes into the cache                                       |
| informer:pods   | list+watch all Pods: bound ones into the cache, our pending ones queued |
| informer:priorityclasses, informer:pdbs | policies and budgets read by reclaim         |
| informer:namespaces | namespace labels for pod affinity's namespaceSelector             |
| informer:pvcs, informer:pvs, informer:storageclasses | claims, volumes, classes (VolumeBinding) |
| informer:podgroups | PodGroups (scheduling.k8s.io/v1beta1) for gang scheduling; not   |
|                 | awaited for readiness: gang members wait until their PodGroup is seen |
| informer:coscheduling | scheduler-plugins PodGroups (scheduling.x-k8s.io/v1alpha1), likewise |
| queue-flush     | moves pods out of backoff and out of a long unschedulable stay       |
| event-series    | ends event series that stopped repeating, refreshes long ones (final |
|                 | counts written; scheduler.kube.events)                                |
| cache-expiry    | drops expired reclaim reservations (assumed pods never expire)        |
| leader-election | competes for the Lease (or always leads when disabled)                |
| scheduling      | while leading and synced: the scheduling loop; cancelled the moment   |
|                 | leadership is lost (in-flight binds are cancelled and forgotten)      |
| allocation-tracking | with allocationTracking on and a Prometheus, every replica: GPU indices |
|                 | pods on device-plugin nodes really hold, from dcgm-exporter          |
| gpu-conflicts   | while leading: reports pods sharing a GPU index (scheduler.core.conflicts)  |
| gpu-accounting  | every replica: GPU busy/allocated time (scheduler.core.accounting_task)    |
| gpu-health      | with health on and a Prometheus: sick GPUs into the cache on every replica; |
|                 | events and DeviceTaintRules while leading (scheduler.core.health_task) |
| admission-webhooks | with webhooks on, every replica: kopf's HTTPS admission server      |
|                 | (scheduler.admission.server)                                          |
| http            | /metrics, /healthz, /readyz, /livez; with metricsServing.secure: HTTPS, |
|                 | /metrics for authorized bearer tokens only (metrics.access)           |

Stop (SIGTERM/SIGINT, or `Daemon.stop()`): the queue closes, so no new cycle starts; in-flight
binds get `bind_grace_seconds` to finish, the rest are cancelled and their pods forgotten; the
Lease is released so a follower takes over at once; then everything else is cancelled.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import structlog
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry

from metrics.access import CacheTtls, MetricsAccess
from metrics.collectors import (
    Reading,
    count_samples,
    labelled_samples,
    leader_samples,
    node_gpu_samples,
    oldest_age_samples,
    pending_samples,
    single,
)
from metrics.queries import query_histogram, query_timing
from metrics.scheduling import SchedulingMetrics
from metrics.server import make_app, start_server
from reclaim.prometheus import PrometheusClient
from reclaim.promql import LabelNames
from scheduler.config import MetricsServingConfig, SchedulerConfig, split_host_port
from scheduler.core.accounting_task import GpuAccounting
from scheduler.core.allocation import allocation_tracker
from scheduler.core.conflicts import ConflictMonitor
from scheduler.core.coscheduling import CoschedulingGroupHandler
from scheduler.core.cycle import PostFilters, Scheduler
from scheduler.core.handlers import NodeHandler, PodGroupHandler, PodHandler
from scheduler.core.health_task import GpuHealthMonitor, health_source
from scheduler.core.namespaces import NamespaceLabels
from scheduler.core.profile import default_framework
from scheduler.core.queue import SchedulingQueue
from scheduler.gangs.kueue import InvalidGroupReporter
from scheduler.gangs.tracker import GangTracker
from scheduler.kube.access_reviews import ApiAccessReviews
from scheduler.kube.claims import list_device_taint_rules
from scheduler.kube.client import fence_of
from scheduler.kube.coscheduling import list_coscheduling_groups
from scheduler.kube.events import EventRecorder
from scheduler.kube.informer import Informer, InformerOptions
from scheduler.kube.leader import AlwaysLeader, Elector, LeaderElector, LeadershipLost
from scheduler.kube.podgroups import list_pod_groups
from scheduler.model.objects import PodInfo
from scheduler.model.stored import trim_node, trim_pod
from scheduler.model.volumes import ClaimHandler, ClassHandler, VolumeHandler
from scheduler.postfilter.gang_reclaim import GangReclaimer
from scheduler.postfilter.nominated_node import NominatedNode
from scheduler.postfilter.pod_watch import PodWatch
from scheduler.postfilter.reclaim import Reclaimer
from scheduler.postfilter.reclaim_policies import PolicyStore
from scheduler.postfilter.usage import UsageSource
from scheduler.state.cache import ClusterCache
from scheduler.state.context import SchedulerContext
from scheduler.state.dra_handlers import (
    DeviceClassHandler,
    DeviceTaintRuleHandler,
    ResourceClaimHandler,
    ResourceSliceHandler,
)
from scheduler.state.readings import domain_gpus

if TYPE_CHECKING:
    from scheduler.admission.server import AdmissionWebhooks

log = structlog.get_logger("gpu-scheduler.daemon")

BIND_GRACE_SECONDS = 10.0
CACHE_EXPIRY_INTERVAL_S = 5.0


def metrics_access(
    serving: MetricsServingConfig, api_client: client.ApiClient
) -> MetricsAccess | None:
    """Who may read /metrics: the API server's reviews with the configured cache lifetimes;
    None (open) when `serving.secure` is off."""
    if not serving.secure:
        return None
    ttls = CacheTtls(
        authentication=serving.authentication_cache_ttl_seconds,
        allowed=serving.authorization_allowed_cache_ttl_seconds,
        denied=serving.authorization_denied_cache_ttl_seconds,
    )
    return MetricsAccess(ApiAccessReviews(api_client), ttls)


def metrics_tls(serving: MetricsServingConfig, host: str) -> ssl.SSLContext | None:
    """The metrics server's TLS context: `certFile` and `keyFile`, else a self-signed
    certificate for `host`, localhost, 127.0.0.1 and this host's name (as kube-scheduler makes
    one without `--tls-cert-file`); None when `serving.secure` is off."""
    if not serving.secure:
        return None
    from scheduler.admission.certs import self_signed_context, serving_context

    if serving.cert_file is not None and serving.key_file is not None:
        return serving_context(serving.cert_file, serving.key_file)
    return self_signed_context([socket.gethostname(), "localhost", "127.0.0.1", host])


def usage_source(settings: SchedulerConfig) -> UsageSource | None:
    """The Prometheus adapter reclaim measures usage with; None when reclaim is off or no
    Prometheus is configured (reclaim then skips every attempt, saying why)."""
    reclaim = settings.reclaim
    if reclaim.mode == "off" or not reclaim.prometheus_url:
        return None
    return PrometheusClient(
        reclaim.prometheus_url,
        timeout_s=reclaim.prometheus_timeout_seconds,
        label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
    )


class Daemon:
    """One scheduler process; `run()` until `stop()` (see the module docstring)."""

    def __init__(
        self,
        settings: SchedulerConfig,
        api_client: client.ApiClient,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.api_client = api_client
        self.clock = clock
        self.cache = ClusterCache()
        self.queue: SchedulingQueue[PodInfo] = SchedulingQueue(
            clock=clock,
            backoff_initial=settings.backoff.initial_seconds,
            backoff_max=settings.backoff.max_seconds,
            unschedulable_flush=settings.queue.unschedulable_flush_seconds,
            pop_from_backoff=settings.queue.pop_from_backoff,
        )
        identity = settings.leader_election.identity
        self.metrics_registry = CollectorRegistry()
        """Every metric of this daemon, served on /metrics (see `metrics`); register more
        collectors here, never in prometheus_client's global registry."""
        self.metrics = SchedulingMetrics(self.metrics_registry, settings.scheduler_name)
        self.recorder = EventRecorder(api_client, settings.scheduler_name, identity)
        self.context = SchedulerContext(
            settings=settings,
            cache=self.cache,
            api_client=api_client,
            recorder=self.recorder,
            metrics=self.metrics,
            clock=clock,
            is_leader=lambda: self.elector.is_leader,
        )
        """What the daemon's long-lived parts share (`scheduler.state.context`)."""
        framework = default_framework(settings)
        self.policies = PolicyStore(self.recorder)
        self.usage = usage_source(settings)
        self.allocation = allocation_tracker(settings, self.cache)
        self.reclaimer = Reclaimer(self.context, framework, self.policies, self.usage)
        self.reclaimer.preemption.on_attempt = self.metrics.preemption
        framework.narrowers.append(NominatedNode(self.reclaimer))
        self.gangs = GangTracker()
        self.reclaimer.gangs = self.gangs
        self.gang_reclaimer = GangReclaimer(self.context, self.reclaimer, self.gangs)
        self.scheduler = Scheduler(
            self.context,
            self.queue,
            framework,
            PostFilters(pod=self.reclaimer, gang=self.gang_reclaimer),
            self.gangs,
        )
        self.elector: Elector = (
            LeaderElector(api_client, settings.leader_election, fence=fence_of(api_client))
            if settings.leader_election.enabled
            else AlwaysLeader(identity)
        )
        core = client.CoreV1Api(api_client)
        self.pod_handler = PodHandler(
            self.context,
            self.queue,
            self.scheduler.pod_gone,
            self.scheduler.pod_gated,
            gangs=self.gangs,
            gang_waiting=InvalidGroupReporter(self.recorder, self.scheduler.pod_waiting),
        )
        self.podgroups = Informer(
            "podgroups",
            list_pod_groups(api_client),
            PodGroupHandler(self.gangs, self.pod_handler, self.recorder),
        )
        self.cosched_groups = Informer(
            "coscheduling-podgroups",
            list_coscheduling_groups(api_client),
            CoschedulingGroupHandler(self.gangs, self.pod_handler, self.recorder),
        )
        self.informers = [
            Informer(
                "nodes",
                core.list_node,
                NodeHandler(self.cache, self.queue, self.recorder),
                InformerOptions(trim=trim_node),
            ),
            Informer("namespaces", core.list_namespace, NamespaceLabels(self.cache, self.queue)),
            Informer(
                "pods",
                core.list_pod_for_all_namespaces,
                PodWatch(self.pod_handler, self.reclaimer),
                InformerOptions(trim=trim_pod),
            ),
            Informer(
                "priorityclasses",
                client.SchedulingV1Api(api_client).list_priority_class,
                self.policies,
            ),
            Informer(
                "pdbs",
                client.PolicyV1Api(api_client).list_pod_disruption_budget_for_all_namespaces,
                self.reclaimer.pdbs,
            ),
            Informer(
                "pvcs",
                core.list_persistent_volume_claim_for_all_namespaces,
                ClaimHandler(self.cache.volumes, self.queue),
            ),
            Informer(
                "pvs", core.list_persistent_volume, VolumeHandler(self.cache.volumes, self.queue)
            ),
            Informer(
                "storageclasses",
                client.StorageV1Api(api_client).list_storage_class,
                ClassHandler(self.cache.volumes, self.queue),
            ),
            *self._dra_informers(api_client),
        ]
        self._admission: AdmissionWebhooks | None = None
        self.conflicts = ConflictMonitor(self.cache, self.recorder, self.elector, self.synced)
        self.accounting = GpuAccounting.from_settings(settings, self.cache)
        self.accounting.collector.register(self.metrics_registry)
        self.health_source = health_source(settings)
        self.health = (
            GpuHealthMonitor(self.context, self.queue, self.health_source, self.synced)
            if self.health_source is not None
            else None
        )
        self._register_collectors()
        self._stopping = asyncio.Event()
        self.http_port: int | None = None

    def _dra_informers(self, api_client: client.ApiClient) -> list[Informer]:
        """DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules into the cache's
        `DraStore` (resource.k8s.io/v1). They are optional: a cluster that does not serve a kind
        (before Kubernetes 1.34, or DeviceTaintRules before 1.37) counts as synced without it,
        and the informer fills its store once the kind is served."""
        resource = client.ResourceV1Api(api_client)
        store = self.cache.dra
        optional = InformerOptions(optional=True)
        return [
            Informer(
                "deviceclasses",
                resource.list_device_class,
                DeviceClassHandler(store, self.queue),
                optional,
            ),
            Informer(
                "resourceslices",
                resource.list_resource_slice,
                ResourceSliceHandler(store, self.queue),
                optional,
            ),
            Informer(
                "resourceclaims",
                resource.list_resource_claim_for_all_namespaces,
                ResourceClaimHandler(store, self.queue),
                optional,
            ),
            Informer(
                "devicetaintrules",
                list_device_taint_rules(api_client),
                DeviceTaintRuleHandler(store, self.queue),
                optional,
            ),
        ]

    @property
    def admission(self) -> AdmissionWebhooks:
        """The admission webhooks (`scheduler.admission.server`), made when first asked for:
        kopf and cryptography (about 10 MiB resident) are imported only when webhooks are on
        (or the metrics server makes its own certificate)."""
        if self._admission is None:
            from scheduler.admission.server import AdmissionWebhooks

            self._admission = AdmissionWebhooks(self.settings, self.api_client)
        return self._admission

    # -- state ---------------------------------------------------------------------------------

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    def _register_collectors(self) -> None:
        """The scrape-time metrics (`metrics.collectors`) and the Prometheus query latency."""
        stats = self.reclaimer.stats
        readings = [
            Reading(
                "gauge",
                "scheduler_pending_pods",
                "Number of pending pods, by the queue type: active, backoff, unschedulable "
                "(tried, fit nowhere), gated (scheduling gates left, or a gang member waiting for "
                "its PodGroup and minCount pods; never tried).",
                ("queue",),
                lambda: pending_samples(
                    self.queue.pools(), len(self.pod_handler.gated_keys) + len(self.gangs.held)
                ),
            ),
            Reading(
                "gauge",
                "gpu_scheduler_oldest_pending_pod_age_seconds",
                "Seconds since the longest-waiting pending pod first entered the queue (0: none).",
                (),
                lambda: oldest_age_samples(self.queue.oldest_queued_at(), self.clock()),
            ),
            Reading(
                "gauge",
                "gpu_scheduler_node_gpus",
                "GPUs per node and NVLink domain, by state: allocatable, allocated, free.",
                ("node", "domain", "state"),
                lambda: node_gpu_samples(domain_gpus(self.cache)),
            ),
            Reading(
                "gauge",
                "gpu_scheduler_leader",
                "1 while this process holds the leader Lease, else 0.",
                ("identity",),
                lambda: leader_samples(self.elector.identity, self.elector.is_leader),
            ),
            Reading(
                "counter",
                "gpu_scheduler_reclaim_attempts",
                "Reclaim attempts for pods that fit nowhere.",
                (),
                lambda: single(stats.attempts),
            ),
            Reading(
                "counter",
                "gpu_scheduler_reclaim_evictions",
                "Victims evicted (or, in dry-run, that would have been), by result.",
                ("result",),
                lambda: count_samples(stats.evictions),
            ),
            Reading(
                "counter",
                "gpu_scheduler_reclaim_skips",
                "Reclaim attempts that evicted nothing, by reason.",
                ("reason",),
                lambda: count_samples(stats.skips),
            ),
            Reading(
                "counter",
                "gpu_scheduler_events_dropped",
                "Events not written because too many writes were pending.",
                (),
                lambda: single(self.recorder.dropped),
            ),
            Reading(
                "counter",
                "gpu_scheduler_gpu_conflicts",
                "Nodes found with a GPU index bound to two pods, or more GPUs bound than "
                "allocatable.",
                (),
                lambda: single(self.conflicts.reported),
            ),
            Reading(
                "gauge",
                "gpu_scheduler_unhealthy_gpus",
                "GPUs reported sick (never chosen), by node and reason: xid_<code>, ecc_dbe, "
                "row_remap_failure.",
                ("node", "reason"),
                lambda: labelled_samples(self.health.unhealthy_counts() if self.health else {}),
            ),
        ]
        for reading in readings:
            self.metrics_registry.register(reading)
        queries = query_histogram(self.metrics_registry)
        tracker = self.allocation.prometheus if self.allocation is not None else None
        for source in (self.usage, tracker):  # each has its own session
            if isinstance(source, PrometheusClient):
                source.trace_configs.append(query_timing(queries))

    # -- run -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin the graceful stop; `run()` returns when it is done."""
        self._stopping.set()

    async def run(self) -> None:
        host, port = split_host_port(self.settings.metrics_address)
        serving = self.settings.metrics_serving
        access = metrics_access(serving, self.api_client)
        app = make_app(self.metrics_registry, self.synced, access)
        runner = await start_server(app, host, port, metrics_tls(serving, host))
        sockets = [s for site in runner.sites for s in getattr(site._server, "sockets", [])]
        self.http_port = sockets[0].getsockname()[1] if sockets else port
        log.info(
            "daemon_started",
            scheduler_name=self.settings.scheduler_name,
            identity=self.elector.identity,
            metrics_port=self.http_port,
            metrics_secure=serving.secure,
        )
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    *(self._guarded(f"informer:{i.name}", i.run, group) for i in self.informers),
                    self._guarded("informer:podgroups", self.podgroups.run, group),
                    self._guarded("informer:coscheduling", self.cosched_groups.run, group),
                    self._guarded("queue-flush", self.queue.run, group),
                    self._guarded("event-series", self.recorder.run, group),
                    self._guarded("cache-expiry", self._expire_reservations, group),
                    self._guarded("leader-election", self.elector.run, group),
                    self._guarded("scheduling", self._schedule_while_leading, group),
                    self._guarded("gpu-conflicts", self.conflicts.run, group),
                    self._guarded("gpu-accounting", self.accounting.run, group),
                ]
                if self.allocation is not None:
                    tasks.append(self._guarded("allocation-tracking", self.allocation.run, group))
                if self.health is not None:
                    tasks.append(self._guarded("gpu-health", self.health.run, group))
                if self.settings.webhooks.enabled:
                    tasks.append(self._guarded("admission-webhooks", self.admission.run, group))
                await self._stopping.wait()
                await self._graceful_stop()
                for task in tasks:
                    task.cancel()
        finally:
            if isinstance(self.usage, PrometheusClient):
                await self.usage.close()
            if self.health_source is not None:
                await self.health_source.close()
            await self.recorder.drain()
            await runner.cleanup()
            log.info("daemon_stopped")

    def _guarded(
        self,
        name: str,
        body: Callable[[], Awaitable[Any]],
        group: asyncio.TaskGroup,
    ) -> asyncio.Task[None]:
        async def guard() -> None:
            try:
                await body()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("task_failed", task=name)
                self.stop()
            else:
                if not self._stopping.is_set():
                    log.warning("task_exited", task=name)

        coroutine: Coroutine[Any, Any, None] = guard()
        return group.create_task(coroutine, name=name)

    async def _expire_reservations(self) -> None:
        while True:
            await asyncio.sleep(CACHE_EXPIRY_INTERVAL_S)
            expired = self.cache.expire_reservations(
                self.clock(), self.settings.reclaim.reservation_seconds
            )
            if expired:
                self.queue.move_all_to_active_or_backoff("ReservationExpired")

    async def _schedule_while_leading(self) -> None:
        await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
        log.info("caches_synced", nodes=len(self.cache.nodes), pods=len(self.cache.pods))
        while not self._stopping.is_set():
            try:
                async with self.elector.leadership():
                    log.info("scheduling_started")
                    await self.scheduler.run()
                    return  # the queue closed: stopping
            except LeadershipLost:
                log.warning("scheduling_stopped_leadership_lost")
                await self.scheduler.finish_binds(timeout=0)

    async def _graceful_stop(self) -> None:
        log.info("daemon_stopping", binds_in_flight=self.scheduler.binds_in_flight)
        self.queue.close()
        await self.scheduler.finish_binds(BIND_GRACE_SECONDS)
        await self.elector.release()
