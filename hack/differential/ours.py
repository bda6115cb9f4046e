"""gpu-scheduler's side: the nodes its profile's filters accept for a pod, against live state.

The cache is filled the way the daemon's informer handlers fill it (scheduler/core/handlers.py,
scheduler/core/namespaces.py): every Node through `parse_node`, every bound Pod through `parse_pod`,
Namespace labels for namespaceSelector. Then `default_framework(...).evaluate` (the daemon's
filters and narrowers, in profile order) gives the feasible rows and, per rejected node, the
first plugin that rejected it. A pod with invalid or unsupported fields is feasible nowhere, as in
the scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.config import SchedulerConfig
from scheduler.core.namespaces import NamespaceLabels
from scheduler.core.profile import default_framework
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_node, parse_pod
from scheduler.state.cache import ClusterCache

INVALID = "InvalidPod"
UNSUPPORTED = "Unsupported"


@dataclass(frozen=True)
class Verdict:
    """gpu-scheduler's answer for one pod."""

    feasible: frozenset[str]
    first_failure: Mapping[str, str]
    """Rejected node -> "Plugin: reason" of the first plugin (profile order) that rejected it."""


def build_cache(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    namespaces: Iterable[Mapping[str, Any]],
    skip: str | None = None,
) -> ClusterCache:
    """A cache of `nodes`, the bound pods of `pods` (but not the one keyed `skip`) and the
    namespaces' labels."""
    cache = ClusterCache()
    for node in nodes:
        info = parse_node(node)
        if info.name:
            cache.add_or_update_node(info)
    for obj in pods:
        pod = parse_pod(obj)
        if pod.bound and pod.key != skip:
            cache.add_pod(pod)
    labels = NamespaceLabels(cache)
    for namespace in namespaces:
        labels.on_add(namespace)
    return cache


def framework() -> Framework:
    return default_framework(SchedulerConfig())


def verdict(pod_obj: Mapping[str, Any], cache: ClusterCache, profile: Framework) -> Verdict:
    """Which nodes of `cache` gpu-scheduler's filters accept for `pod_obj` (API JSON)."""
    pod = parse_pod(pod_obj)
    snapshot = Snapshot(cache)
    names = [cache.names[row] for row in np.flatnonzero(snapshot.valid)]
    if pod.errors or pod.unsupported:
        why = INVALID if pod.errors else UNSUPPORTED
        detail = "; ".join(str(e) for e in pod.errors) or ", ".join(pod.unsupported)
        return Verdict(frozenset(), {name: f"{why}: {detail}"[:200] for name in names})
    evaluation = profile.evaluate(pod, snapshot, choose=False)
    diagnosis = evaluation.diagnosis
    feasible = frozenset(cache.names[row] for row in np.flatnonzero(diagnosis.feasible))
    first: dict[str, str] = {}
    for rejection in diagnosis.rejections:  # in profile order
        for row in np.flatnonzero(rejection.failed & snapshot.valid):
            name = cache.names[row]
            first.setdefault(name, f"{rejection.plugin}: {rejection.reason}")
    return Verdict(feasible, first)
