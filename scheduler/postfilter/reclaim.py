"""The PostFilter: when a pod fits nowhere, free GPUs held by measurably idle pods, then (when
that made no room) preempt pods of lower priority.

One attempt for a pending pod (the preemptor), never two within `cooldownSeconds`:

1. Re-run the filters; only nodes rejected solely for reasons eviction can fix are candidates.
2. On those nodes, the pods whose PriorityClass policy makes them eligible (see
   `reclaim.policy.victim_eligibility`). None: skip.
3. One Prometheus query for all of them (`reclaim.prometheus`), then the idle verdict
   (`reclaim.usage.idle_verdict`). Prometheus down, slow, erroring or silent: skip, no eviction.
   One query per distinct idle window: a failed window leaves only its own pods unmeasured.
4. Per node, the fewest idle victims that let the preemptor pass every filter there, including
   NVLink (its GPUs fit in one domain when the node's domains allow it) and MIG profiles
   (`reclaim.policy.choose_victims` with a what-if of the cache); the best node by
   `reclaim.policy.best_node`. PodDisruptionBudgets (`scheduler.victims.pdb.PdbStore`) count as in
   kube-scheduler's preemption: victims whose eviction a budget forbids now are taken last and
   given back first, and nodes whose set violates fewer budgets come first.
5. dry-run: report "would evict" events and stop. enforce, node by node in that order:
   re-validate the plan (the preemptor is still pending with the same UID and unbound, every
   victim is still there with the same UID, and the preemptor still fits once they are gone;
   a stale plan stops the attempt), reserve the room in the cache (no other pod can take it
   while the victims terminate), set `status.nominatedNodeName`, and evict through the Eviction
   API, budget-guarded victims first. A 429 (PodDisruptionBudget) fails that node's set: the
   reservation is dropped and the next node is tried; 404 means the victim is already gone.
   A pod Kueue admitted is not evicted: its Workload is deactivated (`spec.active: false`,
   `scheduler.kube.kueue_workloads`), so Kueue suspends its job and releases the quota; such a
   victim counts only when every pod of its Workload is idle (`scheduler.victims.kueue`), its
   Workload goes first, and one that cannot be found or patched drops the node's set with an
   Event on the victim (docs/kueue.md).
   When this step made no room (off, nothing idle enough, no fitting set, refused, dry-run),
   priority preemption follows, through the same enforcement (`scheduler.postfilter.preemption`;
   order and semantics in docs/reclaim.md).
6. The next cycle of the preemptor tries the nominated node first (`NominatedNode`, a Narrow
   plugin, as kube-scheduler evaluates the nominated node first): when it fits there, it goes
   there.

Events: on the preemptor ("reclaiming 2 GPUs on node X from 1 idle pod", with a warning when a
budget may refuse), on each victim ("evicted: GPU usage 1.8 % < 10 % over 3600 s; reclaimed for
a pod of priority 10000" — never the preemptor's name, whose namespace may be private), and when
an attempt is skipped, why.

Memory: cooldowns, nominations and the preemptors' latest views are pruned when the pod is
deleted (`PodWatch`), when they expire, and are bounded (`MAX_TRACKED_PODS`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import structlog
from kubernetes_asyncio import client

from reclaim.policy import (
    Candidate,
    VictimFacts,
    VictimSet,
    best_node,
    budget_violations,
    choose_victims,
    order_candidates,
    victim_eligibility,
)
from reclaim.signals import GpuWindow
from reclaim.usage import DEFAULT_POWER_MODELS, PowerModel, idle_verdict
from scheduler.config import PreemptionConfig, ReclaimConfig
from scheduler.framework.interface import BoolArray, CycleState, Rejection
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.tracker import GangTracker
from scheduler.kube.apierrors import APIError
from scheduler.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from scheduler.kube.eviction import EvictionResult, evict_pod, nominate
from scheduler.kube.informer import InformerHandler, KubeObject
from scheduler.kube.kueue_workloads import (
    WorkloadNotFound,
    WorkloadRef,
    deactivate_workload,
    find_workload,
)
from scheduler.model.objects import PodInfo, parse_pod
from scheduler.plugins.nvlink import one_domain_feasible
from scheduler.postfilter.preemption import PriorityPreemption
from scheduler.postfilter.reclaim_policies import PolicyStore
from scheduler.state.cache import RESERVATION_PREFIX, ClusterCache
from scheduler.victims.candidates import (
    PREEMPTION,
    RECLAIM,
    Plan,
    Victim,
    mark_disruption_targets,
    mate_nodes,
    may_make_room,
    victim_gangs,
    victim_pod,
)
from scheduler.victims.gangs import Unit, broken_gangs, victim_units
from scheduler.victims.kueue import KueueOwner, kueue_owner, partial_workloads
from scheduler.victims.pdb import PdbStore
from topology.occupancy import choose_gpus

log = structlog.get_logger("gpu-scheduler.reclaim")

MODES = ("off", "dry-run", "enforce")
MAX_TRACKED_PODS = 10_000
"""At most this many cooldowns and nominations are kept; the oldest go first."""
MAX_ERROR_CHARS = 200
"""Longer error texts (Prometheus, the API server) are cut in events."""
KUEUE_API = "kueue.x-k8s.io/v1beta2"
WORKLOAD_DEACTIVATED = "workload_deactivated"
"""The eviction result counted for a Kueue victim taken back through its Workload."""


def _cut(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


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


@dataclass(frozen=True)
class Nomination:
    """Where room is being made for a preemptor (its `status.nominatedNodeName`)."""

    node: str
    uid: str
    at: float
    """Monotonic time of the nomination; it lapses with the reservation."""


@dataclass
class ReclaimStats:
    """Counters exported as metrics: attempts, evictions by result, skips by reason."""

    attempts: int = 0
    evictions: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _key_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


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
        pdbs: PdbStore | None = None,
        preemption: PreemptionConfig | None = None,
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
        self.pdbs = pdbs if pdbs is not None else PdbStore()
        """PodDisruptionBudgets; the daemon's "pdbs" informer fills it."""
        self.power_models: dict[str, PowerModel] = dict(DEFAULT_POWER_MODELS)
        for model, watts in settings.power_models.items():
            self.power_models[model] = PowerModel(watts["idleWatts"], watts["maxWatts"])
        self.stats = ReclaimStats()
        self.last_eviction_s = 0.0
        """Duration of the latest Eviction API call (for the latency benchmark)."""
        self._last_attempt: OrderedDict[str, float] = OrderedDict()
        """Pod key -> monotonic time of its latest attempt, oldest first."""
        self.nominations: OrderedDict[str, Nomination] = OrderedDict()
        """Pod key -> the node reclaim made room on, oldest first."""
        self._views: dict[str, PodInfo | None] = {}
        """Latest informer view of the preemptors being worked on or nominated (None: deleted);
        kept current by `PodWatch`."""
        self.lock = asyncio.Lock()
        self.preemption = PriorityPreemption(
            preemption or PreemptionConfig(enabled=False),
            cache,
            self.pdbs,
            recorder,
            self._fits_without,
            self.nominated_node,
        )
        """The second step, when idle reclaim made no room (the daemon turns it on by
        default, as `preemption.enabled` is; off unless given, for callers of reclaim alone)."""
        self.custom = client.CustomObjectsApi(api_client)

    @property
    def gangs(self) -> GangTracker | None:
        """The gangs victims may belong to (both steps weigh a victim with its gang,
        `scheduler.victims.gangs`); None: every victim stands alone."""
        return self.preemption.gangs

    @gangs.setter
    def gangs(self, tracker: GangTracker | None) -> None:
        self.preemption.gangs = tracker

    @property
    def enabled(self) -> bool:
        return self.settings.mode != "off" or self.preemption.enabled

    def cooling_down(self, pod_key: str) -> bool:
        last = self._last_attempt.get(pod_key)
        return last is not None and self.clock() - last < self.settings.cooldown_seconds

    # -- what the informers tell ---------------------------------------------------------------

    def pod_seen(self, obj: Mapping[str, Any]) -> None:
        """A pod was added or changed (`PodWatch`): refresh the view of a tracked preemptor; a
        bound preemptor no longer needs its nomination."""
        key = _key_of(obj)
        if key not in self._views and key not in self.nominations:
            return
        pod = parse_pod(obj)
        if key in self._views:
            self._views[key] = pod
        if pod.bound or pod.terminating:
            self.nominations.pop(key, None)

    def pod_gone(self, obj: Mapping[str, Any]) -> None:
        """A pod was deleted (`PodWatch`): forget its cooldown and nomination."""
        key = _key_of(obj)
        self._last_attempt.pop(key, None)
        self.nominations.pop(key, None)
        if key in self._views:
            self._views[key] = None

    def nominated_node(self, pod: PodInfo) -> str | None:
        """The node reclaim made room on for `pod` (same UID), while its reservation lasts."""
        nomination = self.nominations.get(pod.key)
        if nomination is None or nomination.uid != pod.uid:
            return None
        if self.clock() - nomination.at > self.settings.reservation_seconds:
            return None
        return nomination.node

    def _prune(self) -> None:
        """Drop expired cooldowns and nominations; leave room for one more under
        MAX_TRACKED_PODS (the oldest go first)."""
        now = self.clock()
        cooldown = self.settings.cooldown_seconds
        while self._last_attempt:
            key, at = next(iter(self._last_attempt.items()))
            if now - at < cooldown and len(self._last_attempt) < MAX_TRACKED_PODS:
                break
            del self._last_attempt[key]
        ttl = self.settings.reservation_seconds
        while self.nominations:
            key, nomination = next(iter(self.nominations.items()))
            if now - nomination.at <= ttl and len(self.nominations) < MAX_TRACKED_PODS:
                break
            del self.nominations[key]

    def begin_attempt(self, key: str) -> bool:
        """Start an attempt for `key` (a pod, or a gang's unit key): False while its cooldown
        lasts; otherwise the attempt is recorded (the cooldown restarts) and counted."""
        self._prune()
        if self.cooling_down(key):
            return False
        self._last_attempt.pop(key, None)
        self._last_attempt[key] = self.clock()
        self.stats.attempts += 1
        return True

    async def evict(self, victim: Victim) -> tuple[EvictionResult, str]:
        """One Eviction of `victim` (by its UID), timed (`last_eviction_s`) and counted."""
        started = self.clock()
        result, message = await evict_pod(
            self.core, victim.pod.namespace, victim.pod.name, victim.pod.uid
        )
        self.last_eviction_s = self.clock() - started
        self.stats.evictions[result.value] += 1
        return result, message

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Reserve the room made on `node` for `pod` (this UID) for `reservation_seconds`."""
        self.nominations.pop(pod.key, None)
        self.nominations[pod.key] = Nomination(node, pod.uid, self.clock())

    # -- one attempt -----------------------------------------------------------------------------

    async def attempt(self, pod: PodInfo) -> str | None:
        """One PostFilter attempt for `pod`: idle reclaim, then (when that made no room)
        priority preemption; returns the node room was made (or, for reclaim in dry-run, would
        be made) on, or None. Never raises for API or Prometheus trouble: it skips."""
        if not self.enabled:
            return None
        if not self.begin_attempt(pod.key):
            self._skip(pod, "cooldown", None)
            return None
        async with self.lock:
            self._views[pod.key] = pod
            try:
                return await self._attempt(pod)
            except Exception:
                log.exception("reclaim_attempt_failed", pod=pod.key)
                self._skip(pod, "internal_error", "reclaim skipped: internal error (see log)")
                return None
            finally:
                del self._views[pod.key]

    async def _attempt(self, pod: PodInfo) -> str | None:
        found = self.candidate_nodes(pod)
        if found is None:
            return None
        nodes, fit_message = found
        node = None
        if self.settings.mode != "off":
            node = await self._reclaim(pod, nodes)
            if node is not None and self.settings.mode == "enforce":
                return node  # idle victims made room: nobody busy is preempted
        if not self.preemption.enabled or self._preemptor_stale(pod) is not None:
            return node
        plans = await self.preemption.plans(pod, nodes, fit_message)
        if not plans:
            return node
        return await self._enforce(pod, plans)

    async def _reclaim(self, pod: PodInfo, nodes: list[str]) -> str | None:
        """The first step: idle victims (see the module docstring)."""
        victims = self.eligible(pod, nodes)
        gangs = victim_gangs(self.cache, self.gangs, (v.pod for v in victims))
        mates = mate_nodes(self.cache, gangs) - set(nodes)
        if mates:  # a gang evicted only whole: its members elsewhere must be eligible too
            victims = self.eligible(pod, [*nodes, *sorted(mates)])
        if not victims:
            self._skip(pod, "no_eligible_pods", None)
            return None
        if self.usage is None:
            self._skip(pod, "prometheus_not_configured", "reclaim skipped: no Prometheus set")
            return None
        measured = await self.measure(pod, victims)
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
        idle = self._whole_workloads(pod, idle)
        if not idle:
            self._skip(pod, "no_idle_pods", None)
            return None
        plans = self._plan(pod, idle)
        if not plans:
            self._skip(pod, "no_fitting_victim_set", None)
            return None
        if self.settings.mode == "dry-run":
            plan = plans[0]
            self._report(pod, plan, dry_run=True)
            self.stats.evictions["dry-run"] += len(plan.victims)
            return plan.node
        return await self._enforce(pod, plans)

    def candidate_nodes(self, pod: PodInfo) -> tuple[list[str], str] | None:
        """The nodes rejected only for reasons removing pods can fix, in snapshot order, and
        the failure message; None when the pod fits somewhere now."""
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
        return nodes, diagnosis.message(snapshot.valid)

    def eligible(self, pod: PodInfo, nodes: list[str]) -> list[Victim]:
        """The pods on `nodes` whose PriorityClass policy lets `pod` reclaim them."""
        now = self.wall_clock()
        victims: list[Victim] = []
        for node in nodes:
            for state in self.cache.iter_pods_on(node):
                other = state.info
                if not may_make_room(state, pod):
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
                budgets = self.pdbs.budgets_of(other.namespace, other.name, other.labels)
                victims.append(
                    Victim(
                        other,
                        node,
                        state.gpus,
                        result.resource_idle_seconds,
                        result.threshold_pct,
                        budgets=budgets,
                    )
                )
        return victims

    async def measure(self, pod: PodInfo, victims: list[Victim]) -> list[Victim] | None:
        """The victims with their verdicts, one Prometheus query per idle window. A window whose
        query fails or returns nothing leaves only its own pods unmeasured (never idle); only
        when every window failed does the attempt stop, saying why."""
        assert self.usage is not None
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
                text = _cut(str(error) or type(error).__name__)
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
                    windows.get(key, []),
                    victim.threshold_pct,
                    self.power_models,
                    scrape_interval_s=self.settings.scrape_interval_seconds,
                    min_coverage=self.settings.min_coverage,
                    held_gpus=victim.pod.gpus,
                )
                measured.append(replace(victim, verdict=verdict))
        if not measured:
            reason, note = failures[0]
            self._skip(pod, reason, note)
            return None
        return measured

    def _whole_workloads(self, pod: PodInfo, idle: list[Victim]) -> list[Victim]:
        """`idle` without the Kueue victims whose Workload also runs a pod that is not idle
        (`scheduler.victims.kueue.partial_workloads`): Kueue takes a Workload back whole."""
        owners: dict[str, KueueOwner] = {}
        for key, state in self.cache.pods.items():
            if state.reserved_at is not None or state.info.terminating:
                continue
            owner = kueue_owner(state.info)
            if owner is not None:
                owners[key] = owner
        excluded = partial_workloads((v.pod.key for v in idle), owners)
        for key, why in excluded.items():
            log.info("reclaim_kueue_workload_busy", preemptor=pod.key, pod=key, reason=why)
        return [v for v in idle if v.pod.key not in excluded]

    def _fits_without(self, pod: PodInfo, node: str, removed: frozenset[str]) -> bool:
        """Whether `pod` passes every filter on `node` once `removed` pods are gone, with its
        GPUs inside one NVLink domain wherever the node's domains allow that."""
        with self.cache.released(pod.key), self.cache.without(removed):
            snapshot = Snapshot(self.cache)
            row = self.cache.row_of.get(node)
            if row is None:
                return False
            diagnosis = self.framework.run_filters(pod, snapshot, CycleState())
            if not diagnosis.feasible[row]:
                return False
            if pod.gpus >= 2:
                largest = int(snapshot.domain_size[row].max(initial=0))
                if pod.gpus <= largest and not one_domain_feasible(snapshot, pod.gpus)[row]:
                    return False
            return True

    def _plan(self, pod: PodInfo, idle: list[Victim]) -> list[Plan]:
        """Victim sets per node, best node first (budget-violating sets last). A victim is
        weighed with its gang (`scheduler.victims.gangs.victim_units`): a gang evicted only as a
        whole is one candidate of all its members (on any node, all idle), and a set that would
        take a gang below minCount otherwise is not used."""
        by_key = {v.pod.key: v for v in idle}
        gangs = victim_gangs(self.cache, self.gangs, (v.pod for v in idle))
        units, excluded = victim_units((victim_pod(v) for v in idle), gangs)
        for line in excluded:
            log.info("reclaim_gang_not_eligible", preemptor=pod.key, reason=line)
        by_node: dict[str, list[Unit]] = {}
        for unit in units:
            for node in sorted({by_key[k].node for k in unit.pods}):
                by_node.setdefault(node, []).append(unit)
        allowed = self.pdbs.allowed()
        sets: dict[str, VictimSet] = {}
        chosen: dict[str, Plan] = {}
        for node, node_units in by_node.items():
            if node not in self.cache.row_of:
                continue
            unit_of = {u.key: u for u in node_units}
            candidates = [Candidate(u.key, u.priority, u.gpus, u.budgets) for u in node_units]

            def fits(
                removed: frozenset[str], node: str = node, unit_of: dict[str, Unit] = unit_of
            ) -> bool:
                pods = frozenset(k for key in removed for k in unit_of[key].pods)
                return self._fits_without(pod, node, pods)

            keys = choose_victims(order_candidates(candidates, allowed), fits, allowed)
            if keys is None or not keys:
                continue
            broken = broken_gangs([unit_of[k] for k in keys], gangs)
            if broken:
                log.info("reclaim_set_breaks_gang", preemptor=pod.key, node=node, gangs=broken)
                continue
            victim_set = VictimSet.of(candidates, keys, allowed)
            sets[node] = victim_set
            guarded_units = budget_violations(victim_set.victims, allowed)
            guarded = frozenset(p for k in guarded_units for p in unit_of[k].pods)
            victims = tuple(by_key[p] for k in keys for p in unit_of[k].pods)
            chosen[node] = Plan(node, victims, guarded)
        ordered: list[Plan] = []
        while sets:
            best = best_node(sets)
            assert best is not None
            ordered.append(chosen[best])
            del sets[best]
        return ordered

    # -- enforcing -----------------------------------------------------------------------------

    def _preemptor_stale(self, pod: PodInfo) -> str | None:
        """Why `pod` no longer needs room (None while it is still pending, unbound, the same
        pod): from the informer's latest view and the cache."""
        view = self._views.get(pod.key, pod)
        if view is None:
            return "the pod was deleted"
        if view.uid != pod.uid:
            return "the pod was re-created"
        if view.bound:
            return f"the pod was bound to node {view.node_name}"
        if view.terminating:
            return "the pod is being deleted"
        state = self.cache.pods.get(pod.key)
        if state is not None:
            return f"the pod is counted on node {state.node}"
        return None

    def _plan_stale(self, pod: PodInfo, plan: Plan) -> str | None:
        """Why `plan` no longer holds (None when it does): the preemptor changed, a victim is
        gone or changed, or the preemptor would not fit on the node even without the victims."""
        why = self._preemptor_stale(pod)
        if why is not None:
            return why
        for victim in plan.victims:
            state = self.cache.pods.get(victim.pod.key)
            if (
                state is None
                or state.info.uid != victim.pod.uid
                or state.node != victim.node
                or state.info.terminating
            ):
                return f"victim {victim.pod.key} is gone or changed"
        return self._room_gone(pod, plan)

    def _room_gone(self, pod: PodInfo, plan: Plan) -> str | None:
        """Why the preemptor would no longer fit on the plan's node once all its victims are
        gone (None when it would): e.g. another scheduler's pod took the room meanwhile."""
        if not self._fits_without(pod, plan.node, frozenset(v.pod.key for v in plan.victims)):
            return f"the pod no longer fits on node {plan.node} without the victims"
        return None

    def _stop_stale(self, pod: PodInfo, plan: Plan, why: str) -> None:
        self.cache.drop_reservation(pod.key)
        self.nominations.pop(pod.key, None)
        log.info("reclaim_plan_stale", preemptor=pod.key, node=plan.node, reason=why)
        self._skip(pod, "stale_plan", None)

    async def _enforce(self, pod: PodInfo, plans: list[Plan]) -> str | None:
        message = ""
        for plan in plans:
            node = plan.node
            if not self.is_leader():
                self._skip(pod, "not_leader", None)
                return None
            why = self._plan_stale(pod, plan)
            if why is not None:
                self._stop_stale(pod, plan, why)
                return None
            workloads = await self._kueue_workloads(pod, plan)
            if workloads is None:
                continue  # a Kueue victim's Workload is unknown: none of this set is touched
            keys = frozenset(v.pod.key for v in plan.victims)
            with self.cache.released(pod.key), self.cache.without(keys):
                topology = self.cache.nodes[node].topology
                used = self.cache.node_gpus_used(node)
                choice = choose_gpus(topology, used, pod.gpus) if pod.gpus else None
            gpus = tuple(choice.gpus) if choice is not None else ()
            self.cache.reserve(pod, node, gpus, self.clock())
            self.nominate(pod, node)
            try:
                await nominate(self.core, pod.namespace, pod.name, node)
            except (APIError, OSError, TimeoutError) as error:
                log.warning("nominate_failed", pod=pod.key, node=node, error=_cut(str(error)))
            self._report(pod, plan, dry_run=False)
            await mark_disruption_targets(
                self.custom,
                self.gangs,
                plan.victims,
                f"{plan.step}: evicted to make room for pod {pod.key}",
            )
            blocked = False
            taken: set[str] = set()
            # Kueue victims first: a Workload refused leaves nothing else evicted.
            order = sorted(plan.eviction_order(), key=lambda v: v.pod.key not in workloads)
            for victim in order:
                placed = self.cache.pods.get(pod.key)
                if placed is not None and placed.node == node:
                    log.info("reclaim_preemptor_placed", preemptor=pod.key, node=node)
                    return node  # it fits already: the other victims are spared
                # Checked again before every eviction: the awaits before it (nomination, the
                # previous eviction) let the cache move on.
                why = self._preemptor_stale(pod) or self._room_gone(pod, plan)
                if why is not None:
                    self._stop_stale(pod, plan, why)
                    return None
                ref = workloads.get(victim.pod.key)
                if ref is not None:
                    result, message = await self._take_back(pod, plan, victim, ref, taken)
                    if result is EvictionResult.FAILED:
                        blocked = True
                        break
                    continue
                result, message = await self.evict(victim)
                log.info(
                    "reclaim_evict",
                    step=plan.step,
                    preemptor=pod.key,
                    pod=victim.pod.key,
                    node=node,
                    result=result.value,
                    message=_cut(message),
                )
                if result is EvictionResult.EVICTED:
                    self._tell_victim(pod, victim, dry_run=False)
                elif result in (EvictionResult.BLOCKED, EvictionResult.FAILED):
                    blocked = True
                    break
            if not blocked:
                return node
            self.cache.drop_reservation(pod.key)
            self.nominations.pop(pod.key, None)
            self._skip(
                pod,
                "eviction_blocked",
                f"{plan.step} on node {node} stopped: eviction refused ({_cut(message)}); "
                "trying elsewhere",
            )
        return None

    # -- Kueue victims -------------------------------------------------------------------------

    async def _kueue_workloads(self, pod: PodInfo, plan: Plan) -> dict[str, WorkloadRef] | None:
        """The Workload of every Kueue victim of an idle-reclaim `plan` (victim key -> it), read
        from the API server; None when one cannot be found or read: that victim is not evicted
        behind Kueue's back, the plan is dropped (Events on the victim and the preemptor).
        Priority preemption evicts pods as kube-scheduler does: {}."""
        refs: dict[str, WorkloadRef] = {}
        if plan.step != RECLAIM:
            return refs
        for victim in plan.victims:
            owner = kueue_owner(victim.pod)
            if owner is None:
                continue
            try:
                refs[victim.pod.key] = await find_workload(
                    self.custom, owner.namespace, owner.owner_uids, owner.workload_name
                )
            except (WorkloadNotFound, APIError, ValueError) as error:
                self._kueue_refused(
                    pod, plan, victim, f"its Kueue Workload could not be found: {error}"
                )
                return None
        return refs

    async def _take_back(
        self, pod: PodInfo, plan: Plan, victim: Victim, ref: WorkloadRef, taken: set[str]
    ) -> tuple[EvictionResult, str]:
        """Deactivate the Workload of Kueue victim `victim` (once per Workload and plan, keys in
        `taken`) instead of evicting the pod: Kueue suspends its job, deletes its pods and
        releases its quota. Counted as `workload_deactivated` per victim pod; a refusal is FAILED
        (`failed`), after Events on the victim and the preemptor."""
        if ref.key not in taken:
            why = (
                f"idle GPU reclaim by gpu-scheduler for pod {pod.uid} on node {plan.node}"
                f"{self._usage_text(victim)}"
            )
            started = self.clock()
            try:
                await deactivate_workload(self.custom, ref, why)
            except APIError as error:
                self.last_eviction_s = self.clock() - started
                self.stats.evictions[EvictionResult.FAILED.value] += 1
                self._kueue_refused(
                    pod, plan, victim, f"deactivating its Kueue Workload {ref.key} failed: {error}"
                )
                return EvictionResult.FAILED, str(error)
            self.last_eviction_s = self.clock() - started
            taken.add(ref.key)
            note = (
                f"deactivated: idle GPUs reclaimed for pod {pod.uid} of priority {pod.priority} "
                f"on node {plan.node}{self._usage_text(victim)}; Kueue releases the quota and "
                "does not requeue it until spec.active is set to true again"
            )
            workload = ObjectRef("Workload", ref.name, ref.namespace, ref.uid, KUEUE_API)
            self.recorder.emit(workload, WARNING, "Reclaimed", "Deactivate", note)
        log.info(
            "reclaim_kueue_deactivate",
            preemptor=pod.key,
            pod=victim.pod.key,
            workload=ref.key,
            node=plan.node,
        )
        self.stats.evictions[WORKLOAD_DEACTIVATED] += 1
        self._tell_victim(pod, victim, dry_run=False, workload=ref)
        return EvictionResult.EVICTED, ""

    @staticmethod
    def _usage_text(victim: Victim) -> str:
        if victim.verdict is None or victim.verdict.usage_pct is None:
            return ""
        return (
            f": GPU usage {victim.verdict.usage_pct:.1f} % < {victim.threshold_pct:g} % "
            f"over {victim.window_s} s"
        )

    def _kueue_refused(self, pod: PodInfo, plan: Plan, victim: Victim, why: str) -> None:
        """A Kueue victim cannot be taken back through its Workload: Events on it and on the
        preemptor; the plan on `plan.node` is dropped (the next cycle plans again)."""
        why = _cut(why, 2 * MAX_ERROR_CHARS)
        log.warning(
            "reclaim_kueue_refused", preemptor=pod.key, pod=victim.pod.key, node=plan.node, why=why
        )
        ref = ObjectRef("Pod", victim.pod.name, victim.pod.namespace, victim.pod.uid)
        self.recorder.emit(
            ref,
            WARNING,
            "ReclaimSkipped",
            "Reclaim",
            f"not reclaimed for pod {pod.uid}: {why}; a pod Kueue admitted is never evicted "
            "without its Workload",
        )
        self._skip(
            pod,
            "kueue_workload_unavailable",
            f"reclaim on node {plan.node} skipped: victim {victim.pod.key}: {why}",
        )

    # -- reporting ---------------------------------------------------------------------------

    def _report(self, pod: PodInfo, plan: Plan, dry_run: bool) -> None:
        if plan.step == PREEMPTION:
            self.preemption.report(pod, plan)
            return
        victims = plan.victims
        gpus = sum(v.pod.gpus for v in victims)
        verb = "would reclaim" if dry_run else "reclaiming"
        note = f"{verb} {gpus} GPUs on node {plan.node} from {len(victims)} idle pod(s)"
        note += plan.guarded_warning()
        ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
        self.recorder.emit(ref, NORMAL, "ReclaimIdleGPUs", "Reclaim", note)
        log.info(
            "reclaim_plan",
            preemptor=pod.key,
            node=plan.node,
            victims=[v.pod.key for v in victims],
            budget_guarded=sorted(plan.guarded),
            gpus=gpus,
            mode=self.settings.mode,
        )
        if dry_run:
            for victim in victims:
                self._tell_victim(pod, victim, dry_run=True)

    def _tell_victim(
        self, pod: PodInfo, victim: Victim, dry_run: bool, workload: WorkloadRef | None = None
    ) -> None:
        if victim.verdict is None:  # chosen by priority preemption, not measured
            self.preemption.tell_victim(pod, victim)
            return
        usage = victim.verdict.usage_pct
        shown = "unknown" if usage is None else f"{usage:.1f} %"
        verb = "would evict" if dry_run else "evicted"
        note = (
            f"{verb}: GPU usage {shown} < {victim.threshold_pct:g} % over {victim.window_s} s "
            f"({victim.verdict.describe()}); reclaimed for a pod of priority {pod.priority}"
        )
        ref = ObjectRef("Pod", victim.pod.name, victim.pod.namespace, victim.pod.uid)
        if workload is not None:
            note = note.replace("evicted: ", f"Kueue Workload {workload.name} deactivated: ", 1)
            note = note.replace("for a pod of", f"for pod {pod.uid} of", 1)
        elif kueue_owner(victim.pod) is not None and dry_run:
            note += "; its Kueue Workload would be deactivated"
        reason = "WouldReclaim" if dry_run else "Reclaimed"
        self.recorder.emit(ref, WARNING, reason, "Reclaim", note)

    def _skip(self, pod: PodInfo, reason: str, note: str | None) -> None:
        self.stats.skips[reason] += 1
        log.info("reclaim_skipped", pod=pod.key, reason=reason, detail=note)
        if note is not None:
            ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
            self.recorder.emit(ref, WARNING, "ReclaimSkipped", "Reclaim", note)


NOMINATED_NODE = "NominatedNode"
NOMINATED_REASON = "node(s) passed, but the pod's nominated node is preferred"


class NominatedNode:
    """Narrow plugin: a pod reclaim made room for goes to its nominated node whenever it fits
    there, as kube-scheduler evaluates a pod's nominated node first; without it the pod could
    land elsewhere and the evictions would have been for nothing. Runs after the NVLink
    narrower, so a one-domain placement elsewhere still wins over a split one there."""

    name = NOMINATED_NODE

    def __init__(self, reclaimer: Reclaimer) -> None:
        self.reclaimer = reclaimer

    def narrow(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> list[Rejection]:
        node = self.reclaimer.nominated_node(pod)
        if node is None:
            return []
        row = snapshot.cache.row_of.get(node)
        if row is None or row >= feasible.shape[0] or not feasible[row]:
            return []
        others = feasible.copy()  # others: (rows,)
        others[row] = False
        if not others.any():
            return []
        return [Rejection(NOMINATED_REASON, others, False, NOMINATED_NODE)]


class PodWatch:
    """Pod informer handler: the scheduler's own handler, then the Reclaimer's view (a
    preemptor bound, deleted or re-created; cooldowns and nominations of deleted pods)."""

    def __init__(self, inner: InformerHandler, reclaimer: Reclaimer) -> None:
        self.inner = inner
        self.reclaimer = reclaimer

    def on_add(self, obj: KubeObject) -> None:
        self.inner.on_add(obj)
        self.reclaimer.pod_seen(obj)

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        self.inner.on_update(old, new)
        self.reclaimer.pod_seen(new)

    def on_delete(self, obj: KubeObject) -> None:
        self.inner.on_delete(obj)
        self.reclaimer.pod_gone(obj)


__all__ = [
    "MODES",
    "RESERVATION_PREFIX",
    "NominatedNode",
    "PodWatch",
    "PolicyStore",
    "Reclaimer",
    "UsageSource",
]
