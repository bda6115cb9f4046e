"""The reclaim PostFilter: when a pod fits nowhere, free GPUs held by measurably idle pods.

One attempt for a pending pod (the preemptor), never two within `cooldownSeconds`:

1. Re-run the filters; only nodes rejected solely for reasons eviction can fix are candidates.
2. On those nodes, the pods whose PriorityClass policy makes them eligible (see
   `reclaim.policy.victim_eligibility`). None: skip.
3. One Prometheus query for all of them (`reclaim.prometheus`), then the idle verdict
   (`reclaim.usage.idle_verdict`). Prometheus down, slow, erroring or silent: skip, no eviction.
4. Per node, the fewest idle victims that let the preemptor pass every filter there, including
   NVLink (its GPUs fit in one domain when the node's domains allow it) and MIG profiles
   (`reclaim.policy.choose_victims` with a what-if of the cache); the best node by
   `reclaim.policy.best_node`.
5. dry-run: report "would evict" events and stop. enforce: reserve the room in the cache (no
   other pod can take it while the victims terminate), set `status.nominatedNodeName`, and evict
   through the Eviction API. A 429 (PodDisruptionBudget) fails that node's set: the reservation
   is dropped and the next best node is tried; 404 means the victim is already gone.

Events: on the preemptor ("reclaiming 2 GPUs on node X from 1 idle pod"), on each victim
("evicted: GPU usage 1.8 % < 10 % over 3600 s; reclaimed for a pod of priority 10000" — never the
preemptor's name, whose namespace may be private), and when an attempt is skipped, why.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import structlog
from kubernetes_asyncio import client

from reclaim.policy import (
    Candidate,
    PolicyResult,
    PolicyStatus,
    VictimFacts,
    VictimSet,
    best_node,
    choose_victims,
    order_candidates,
    parse_policy,
    victim_eligibility,
)
from reclaim.signals import GpuWindow
from reclaim.usage import DEFAULT_POWER_MODELS, PowerModel, Verdict, idle_verdict
from scheduler.cache import RESERVATION_PREFIX, ClusterCache
from scheduler.config import ReclaimConfig
from scheduler.framework.interface import CycleState
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.kube.apierrors import APIError
from scheduler.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from scheduler.kube.eviction import EvictionResult, evict_pod, nominate
from scheduler.objects import PodInfo
from scheduler.plugins.nvlink import one_domain_feasible
from topology.occupancy import choose_gpus

log = structlog.get_logger("gpu-scheduler.reclaim")

MODES = ("off", "dry-run", "enforce")


class UsageSource(Protocol):
    """Where measured usage comes from (the Prometheus adapter)."""

    async def usage_windows(
        self, pods: list[tuple[str, str]], window_s: float
    ) -> Mapping[tuple[str, str], list[GpuWindow]]: ...


class PolicyStore:
    """PriorityClass reclaim policies, parsed once per version; also the informer handler that
    reports invalid policies (log line and Warning event naming the annotation and value)."""

    def __init__(self, recorder: EventRecorder | None = None) -> None:
        self.recorder = recorder
        self._raw: dict[str, Mapping[str, Any]] = {}
        self._parsed: dict[str, tuple[str, PolicyResult]] = {}

    def policy(self, priority_class: str) -> PolicyResult:
        obj = self._raw.get(priority_class)
        if obj is None:
            return PolicyResult(priority_class, PolicyStatus.NONE)
        metadata = obj.get("metadata") or {}
        version = str(metadata.get("resourceVersion") or "")
        cached = self._parsed.get(priority_class)
        if cached is not None and cached[0] == version:
            return cached[1]
        annotations = metadata.get("annotations") or {}
        result = parse_policy(priority_class, {str(k): str(v) for k, v in annotations.items()})
        self._parsed[priority_class] = (version, result)
        if result.status is PolicyStatus.INVALID:
            for error in result.errors:
                log.warning("reclaim_policy_invalid", priority_class=priority_class, error=error)
            if self.recorder is not None:
                ref = ObjectRef(
                    "PriorityClass",
                    priority_class,
                    uid=str(metadata.get("uid") or ""),
                    api_version="scheduling.k8s.io/v1",
                )
                note = "; ".join(result.errors) + " (its pods are not reclaimed)"
                self.recorder.emit(ref, WARNING, "InvalidReclaimPolicy", "Reclaim", note)
        return result

    # informer handler
    def on_add(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._raw[name] = obj
        self.policy(name)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._raw.pop(name, None)
        self._parsed.pop(name, None)


@dataclass(frozen=True)
class Victim:
    """An eligible pod, its policy window, and (once measured) its verdict."""

    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    window_s: int
    threshold_pct: float
    verdict: Verdict | None = None


@dataclass
class ReclaimStats:
    """Counters exported as metrics: attempts, evictions by result, skips by reason."""

    attempts: int = 0
    evictions: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


class Reclaimer:
    """Runs reclaim attempts for unschedulable pods (see the module docstring)."""

    def __init__(
        self,
        settings: ReclaimConfig,
        cache: ClusterCache,
        framework: Framework,
        api_client: client.ApiClient,
        recorder: EventRecorder,
        policies: PolicyStore,
        usage: UsageSource | None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.settings = settings
        self.cache = cache
        self.framework = framework
        self.core = client.CoreV1Api(api_client)
        self.recorder = recorder
        self.policies = policies
        self.usage = usage
        self.clock = clock
        self.wall_clock = wall_clock
        self.is_leader = is_leader
        self.power_models: dict[str, PowerModel] = dict(DEFAULT_POWER_MODELS)
        for model, watts in settings.power_models.items():
            self.power_models[model] = PowerModel(watts["idleWatts"], watts["maxWatts"])
        self.stats = ReclaimStats()
        self.last_eviction_s = 0.0
        """Duration of the latest Eviction API call (for the latency benchmark)."""
        self._last_attempt: dict[str, float] = {}
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return self.settings.mode != "off"

    def cooling_down(self, pod_key: str) -> bool:
        last = self._last_attempt.get(pod_key)
        return last is not None and self.clock() - last < self.settings.cooldown_seconds

    # -- one attempt -----------------------------------------------------------------------------

    async def attempt(self, pod: PodInfo) -> str | None:
        """One reclaim attempt for `pod`; returns the node room was made (or would be made, in
        dry-run) on, or None. Never raises for API or Prometheus trouble: it skips."""
        if not self.enabled:
            return None
        if self.cooling_down(pod.key):
            self._skip(pod, "cooldown", None)
            return None
        self._last_attempt[pod.key] = self.clock()
        self.stats.attempts += 1
        async with self._lock:
            try:
                return await self._attempt(pod)
            except Exception:
                log.exception("reclaim_attempt_failed", pod=pod.key)
                self._skip(pod, "internal_error", "reclaim skipped: internal error (see log)")
                return None

    async def _attempt(self, pod: PodInfo) -> str | None:
        victims = self._eligible(pod)
        if victims is None:
            return None
        if not victims:
            self._skip(pod, "no_eligible_pods", None)
            return None
        if self.usage is None:
            self._skip(pod, "prometheus_not_configured", "reclaim skipped: no Prometheus set")
            return None
        measured = await self._measure(pod, victims)
        if measured is None:
            return None
        idle = [v for v in measured if v.verdict is not None and v.verdict.idle]
        for victim in measured:
            assert victim.verdict is not None
            log.info(
                "reclaim_verdict",
                preemptor=pod.key,
                pod=victim.pod.key,
                idle=victim.verdict.idle,
                usage_pct=victim.verdict.usage_pct,
                threshold_pct=victim.threshold_pct,
                window_s=victim.window_s,
                reason=victim.verdict.reason,
            )
        if not idle:
            self._skip(pod, "no_idle_pods", None)
            return None
        plans = self._plan(pod, idle)
        if not plans:
            self._skip(pod, "no_fitting_victim_set", None)
            return None
        if self.settings.mode == "dry-run":
            node, victim_set = plans[0]
            self._report(pod, node, victim_set, dry_run=True)
            self.stats.evictions["dry-run"] += len(victim_set)
            return node
        return await self._enforce(pod, plans)

    def _eligible(self, pod: PodInfo) -> list[Victim] | None:
        snapshot = Snapshot(self.cache)
        with self.cache.released(pod.key):
            diagnosis = self.framework.run_filters(pod, snapshot, CycleState())
            if diagnosis.feasible.any():
                log.info("reclaim_not_needed", pod=pod.key)
                return None
            nodes = [
                snapshot.names[row]
                for row in np.flatnonzero(diagnosis.resolvable_nodes(snapshot.valid))
            ]
        now = self.wall_clock()
        victims: list[Victim] = []
        for node in nodes:
            for state in self.cache.iter_pods_on(node):
                other = state.info
                if (
                    state.assumed
                    or state.reserved_at is not None
                    or other.terminating
                    or other.key == pod.key
                ):
                    continue
                facts = VictimFacts(
                    other.key,
                    other.priority,
                    other.priority_class,
                    _epoch(other.scheduled_at),
                    other.gpus,
                )
                result = victim_eligibility(
                    facts, pod.priority, self.policies.policy(other.priority_class), now
                )
                if not result.eligible:
                    log.debug("reclaim_not_eligible", pod=other.key, reason=result.reason)
                    continue
                assert result.resource_idle_seconds is not None
                assert result.threshold_pct is not None
                victims.append(
                    Victim(
                        other, node, state.gpus, result.resource_idle_seconds, result.threshold_pct
                    )
                )
        return victims

    async def _measure(self, pod: PodInfo, victims: list[Victim]) -> list[Victim] | None:
        assert self.usage is not None
        by_window: dict[int, list[Victim]] = {}
        for victim in victims:
            by_window.setdefault(victim.window_s, []).append(victim)
        measured: list[Victim] = []
        for window_s, group in sorted(by_window.items()):
            pods = [(v.pod.namespace, v.pod.name) for v in group]
            try:
                windows = await asyncio.wait_for(
                    self.usage.usage_windows(pods, float(window_s)),
                    self.settings.prometheus_timeout_seconds,
                )
            except Exception as error:  # down, slow, erroring: never evict on missing metrics
                message = (
                    f"reclaim skipped: Prometheus query failed: {error or type(error).__name__}"
                )
                self._skip(pod, "prometheus_unavailable", message)
                return None
            if not any(windows.get(p) for p in pods):
                self._skip(
                    pod,
                    "no_metrics",
                    f"reclaim skipped: Prometheus has no GPU samples for the {len(pods)} "
                    f"candidate pod(s) over {window_s} s",
                )
                return None
            for victim, key in zip(group, pods, strict=True):
                verdict = idle_verdict(
                    windows.get(key, []),
                    victim.threshold_pct,
                    self.power_models,
                    scrape_interval_s=self.settings.scrape_interval_seconds,
                    min_coverage=self.settings.min_coverage,
                )
                measured.append(
                    Victim(
                        victim.pod,
                        victim.node,
                        victim.gpus,
                        victim.window_s,
                        victim.threshold_pct,
                        verdict,
                    )
                )
        return measured

    def _fits_without(self, pod: PodInfo, node: str, removed: frozenset[str]) -> bool:
        """Whether `pod` passes every filter on `node` once `removed` pods are gone, with its
        GPUs inside one NVLink domain wherever the node's domains allow that."""
        with self.cache.released(pod.key), self.cache.without(removed):
            snapshot = Snapshot(self.cache)
            row = self.cache.row_of[node]
            diagnosis = self.framework.run_filters(pod, snapshot, CycleState())
            if not diagnosis.feasible[row]:
                return False
            if pod.gpus >= 2:
                largest = int(snapshot.domain_size[row].max(initial=0))
                if pod.gpus <= largest and not one_domain_feasible(snapshot, pod.gpus)[row]:
                    return False
            return True

    def _plan(self, pod: PodInfo, idle: list[Victim]) -> list[tuple[str, list[Victim]]]:
        """Victim sets per node, best node first."""
        by_node: dict[str, list[Victim]] = {}
        for victim in idle:
            by_node.setdefault(victim.node, []).append(victim)
        sets: dict[str, VictimSet] = {}
        chosen: dict[str, list[Victim]] = {}
        for node, victims in by_node.items():
            if node not in self.cache.row_of:
                continue
            candidates = [Candidate(v.pod.key, v.pod.priority, v.pod.gpus) for v in victims]

            def fits(removed: frozenset[str], node: str = node) -> bool:
                return self._fits_without(pod, node, removed)

            keys = choose_victims(order_candidates(candidates), fits)
            if keys is None or not keys:
                continue
            sets[node] = VictimSet.of(candidates, keys)
            by_key = {v.pod.key: v for v in victims}
            chosen[node] = [by_key[k] for k in keys]
        ordered: list[tuple[str, list[Victim]]] = []
        while sets:
            best = best_node(sets)
            assert best is not None
            ordered.append((best, chosen[best]))
            del sets[best]
        return ordered

    async def _enforce(self, pod: PodInfo, plans: list[tuple[str, list[Victim]]]) -> str | None:
        for node, victims in plans:
            if not self.is_leader():
                self._skip(pod, "not_leader", None)
                return None
            keys = frozenset(v.pod.key for v in victims)
            with self.cache.released(pod.key), self.cache.without(keys):
                topology = self.cache.nodes[node].topology
                used = self.cache.node_gpus_used(node)
                choice = choose_gpus(topology, used, pod.gpus) if pod.gpus else None
            gpus = tuple(choice.gpus) if choice is not None else ()
            self.cache.reserve(pod, node, gpus, self.clock())
            try:
                await nominate(self.core, pod.namespace, pod.name, node)
            except (APIError, OSError, TimeoutError) as error:
                log.warning("nominate_failed", pod=pod.key, node=node, error=str(error))
            self._report(pod, node, victims, dry_run=False)
            blocked = False
            for victim in victims:
                started = self.clock()
                result, message = await evict_pod(
                    self.core, victim.pod.namespace, victim.pod.name, victim.pod.uid
                )
                self.last_eviction_s = self.clock() - started
                self.stats.evictions[result.value] += 1
                log.info(
                    "reclaim_evict",
                    preemptor=pod.key,
                    pod=victim.pod.key,
                    node=node,
                    result=result.value,
                    message=message,
                )
                if result is EvictionResult.EVICTED:
                    self._tell_victim(pod, victim, dry_run=False)
                elif result in (EvictionResult.BLOCKED, EvictionResult.FAILED):
                    blocked = True
                    break
            if not blocked:
                return node
            self.cache.drop_reservation(pod.key)
            self._skip(
                pod,
                "eviction_blocked",
                f"reclaim on node {node} stopped: eviction refused ({message}); trying elsewhere",
            )
        return None

    # -- reporting ---------------------------------------------------------------------------

    def _report(self, pod: PodInfo, node: str, victims: list[Victim], dry_run: bool) -> None:
        gpus = sum(v.pod.gpus for v in victims)
        verb = "would reclaim" if dry_run else "reclaiming"
        note = f"{verb} {gpus} GPUs on node {node} from {len(victims)} idle pod(s)"
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, NORMAL, "ReclaimIdleGPUs", "Reclaim", note)
        log.info(
            "reclaim_plan",
            preemptor=pod.key,
            node=node,
            victims=[v.pod.key for v in victims],
            gpus=gpus,
            mode=self.settings.mode,
        )
        if dry_run:
            for victim in victims:
                self._tell_victim(pod, victim, dry_run=True)

    def _tell_victim(self, pod: PodInfo, victim: Victim, dry_run: bool) -> None:
        assert victim.verdict is not None
        usage = victim.verdict.usage_pct
        shown = "unknown" if usage is None else f"{usage:.1f} %"
        verb = "would evict" if dry_run else "evicted"
        note = (
            f"{verb}: GPU usage {shown} < {victim.threshold_pct:g} % over {victim.window_s} s "
            f"({victim.verdict.describe()}); reclaimed for a pod of priority {pod.priority}"
        )
        ref = ObjectRef("Pod", victim.pod.name, victim.pod.namespace, victim.pod.uid)
        reason = "WouldReclaim" if dry_run else "Reclaimed"
        self.recorder.emit(ref, WARNING, reason, "Reclaim", note)

    def _skip(self, pod: PodInfo, reason: str, note: str | None) -> None:
        self.stats.skips[reason] += 1
        log.info("reclaim_skipped", pod=pod.key, reason=reason, detail=note)
        if note is not None:
            ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
            self.recorder.emit(ref, WARNING, "ReclaimSkipped", "Reclaim", note)


__all__ = ["MODES", "RESERVATION_PREFIX", "PolicyStore", "Reclaimer", "UsageSource"]
