"""In-memory doubles for Reclaimer unit tests: scripted usage, recorded events and evictions, and
builders for PriorityClasses, PodDisruptionBudgets and the pods reclaim looks at."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

import scheduler.postfilter.enforcement as enforcement
from reclaim.policy import (
    MINIMUM_PREEMPTABLE_PRIORITY,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
    TOLERATION_SECONDS,
)
from reclaim.signals import GpuWindow
from scheduler.config import PreemptionConfig, ReclaimConfig, SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.eviction import EvictionResult
from scheduler.model.objects import PodInfo
from scheduler.postfilter.nominated_node import NominatedNode
from scheduler.postfilter.reclaim import Reclaimer
from scheduler.postfilter.reclaim_policies import PolicyStore
from scheduler.state.cache import ClusterCache
from scheduler.victims.pdb import PdbStore
from tests.unit.scheduler.builders import Json, make_pod
from tests.unit.scheduler.context import make_context

IDLE_CLASS = "idle-ok"
WINDOW_S = 60


def priority_class(
    name: str, annotations: Mapping[str, str], uid: str = "", version: str = "1"
) -> Json:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": version,
            "annotations": dict(annotations),
        },
        "value": 100,
    }


def policy(window_s: int = WINDOW_S, **overrides: str) -> dict[str, str]:
    values = {
        MINIMUM_PREEMPTABLE_PRIORITY: "500",
        TOLERATION_SECONDS: "0",
        RESOURCE_IDLE_SECONDS: str(window_s),
        RESOURCE_IDLE_USAGE_THRESHOLD: "10",
    }
    values.update(overrides)
    return values


def victim_pod(
    name: str,
    node: str,
    *,
    gpus: int = 1,
    klass: str = IDLE_CLASS,
    labels: Mapping[str, str] | None = None,
    uid: str = "",
    gpu_indices: str | None = None,
) -> Json:
    """A running pod of `klass`, bound long ago to `node`."""
    pod = make_pod(name, gpus=gpus, node=node, priority=100, gpu_indices=gpu_indices)
    pod["spec"]["priorityClassName"] = klass
    pod["status"] = {"phase": "Running", "startTime": "2024-05-01T10:00:00Z"}
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


def pending_pod(name: str = "preemptor", *, gpus: int = 1, uid: str = "") -> Json:
    pod = make_pod(name, gpus=gpus, priority=1000)
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


def pdb(name: str, labels: Mapping[str, str], allowed: int, namespace: str = "default") -> Json:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": dict(labels)}},
        "status": {"disruptionsAllowed": allowed},
    }


def idle_window(window_s: float, gpu: str = "0") -> GpuWindow:
    """One GPU drawing idle power for the whole window: idle by the verdict."""
    return GpuWindow(gpu, "NVIDIA H200", window_s, power_samples=100, power_mean_w=100.0)


class Usage:
    """Scripted usage: every asked pod is idle, except windows listed in `fail`; `during` runs
    while the query is in flight (to change the cluster under a plan)."""

    def __init__(self) -> None:
        self.fail: dict[float, Exception] = {}
        self.during: Callable[[], None] | None = None
        self.asked: list[tuple[float, list[tuple[str, str]]]] = []
        self.options: list[dict[str, Any]] = []
        """The keyword options of each query, in order."""
        self.gpus: dict[str, int] = {}
        """Pod name -> how many GPUs it holds (one idle window each); 1 when not listed."""

    async def usage_windows(
        self,
        pods: list[tuple[str, str]],
        window_s: float,
        **options: Any,
    ) -> Mapping[tuple[str, str], list[GpuWindow]]:
        self.asked.append((window_s, list(pods)))
        self.options.append(options)
        if self.during is not None:
            self.during()
        if window_s in self.fail:
            raise self.fail[window_s]
        return {
            pod: [idle_window(window_s, str(g)) for g in range(self.gpus.get(pod[1], 1))]
            for pod in pods
        }


@dataclass
class Recorder:
    """Events as (kind, name, reason, note)."""

    events: list[tuple[str, str, str, str]] = field(default_factory=list)

    def emit(self, ref: ObjectRef, type_: str, reason: str, action: str, note: str) -> bool:
        self.events.append((ref.kind, ref.name, reason, note))
        return True

    def reasons(self, name: str) -> list[str]:
        return [reason for _, n, reason, _ in self.events if n == name]

    def notes(self, reason: str) -> list[str]:
        return [note for _, _, r, note in self.events if r == reason]


@dataclass
class Api:
    """Records evictions and nominations; `results` scripts an eviction's outcome by pod name;
    `on_evict` runs after each eviction (to change the cluster between nodes)."""

    evicted: list[str] = field(default_factory=list)
    nominated: list[tuple[str, str]] = field(default_factory=list)
    results: dict[str, EvictionResult] = field(default_factory=dict)
    on_evict: Callable[[str], None] | None = None
    on_nominate: Callable[[str], None] | None = None
    """Runs while the nomination is in flight (to change the cluster before the evictions)."""

    async def evict(
        self, core: Any, namespace: str, name: str, uid: str, timeout: float = 10.0
    ) -> tuple[EvictionResult, str]:
        self.evicted.append(name)
        if self.on_evict is not None:
            self.on_evict(name)
        result = self.results.get(name, EvictionResult.EVICTED)
        return result, "" if result is EvictionResult.EVICTED else "Cannot evict pod"

    async def nominate(self, core: Any, namespace: str, name: str, node: str) -> None:
        self.nominated.append((name, node))
        if self.on_nominate is not None:
            self.on_nominate(node)


@dataclass
class Rig:
    """A Reclaimer over a real cache and framework, with the doubles above."""

    cache: ClusterCache
    reclaimer: Reclaimer
    usage: Usage
    recorder: Recorder
    api: Api
    policies: PolicyStore
    pdbs: PdbStore
    clock: list[float]

    def attempt(self, pod: PodInfo) -> Awaitable[str | None]:
        return self.reclaimer.attempt(pod)


def make_rig(
    monkeypatch: pytest.MonkeyPatch,
    cache: ClusterCache,
    *,
    classes: Mapping[str, Mapping[str, str]] | None = None,
    mode: str = "enforce",
    preemption: bool = False,
) -> Rig:
    recorder = Recorder()
    api = Api()
    monkeypatch.setattr(enforcement, "evict_pod", api.evict)
    monkeypatch.setattr(enforcement, "nominate", api.nominate)
    policies = PolicyStore(cast(EventRecorder, recorder))
    for name, notes in (classes if classes is not None else {IDLE_CLASS: policy()}).items():
        policies.on_add(priority_class(name, notes))
    pdbs = PdbStore()
    usage = Usage()
    clock = [1000.0]
    settings = SchedulerConfig(
        reclaim=ReclaimConfig(mode=mode, prometheus_url="http://prometheus.invalid"),
        preemption=PreemptionConfig(enabled=preemption),
    )
    framework = default_framework(SchedulerConfig())
    context = make_context(
        cache,
        settings=settings,
        recorder=cast(EventRecorder, recorder),
        clock=lambda: clock[0],
    )
    reclaimer = Reclaimer(context, framework, policies, usage, pdbs)
    framework.narrowers.append(NominatedNode(reclaimer))
    return Rig(cache, reclaimer, usage, recorder, api, policies, pdbs, clock)
