"""GPU conflicts among bound pods: two pods on a node holding the same GPU index, or a node with
more GPUs bound than it has.

Neither should ever happen; when it does, something wrote a binding it should not have (a
replica that kept writing after it lost the Lease, another scheduler, a hand-made Binding). The
cache hides such a conflict on purpose (a pod whose annotated GPUs are taken is counted on other
GPUs), so the scan reads what the API server holds: each bound pod's `gpu-scheduler.io/gpus`
annotation and GPU request. `find_conflicts` is the pure scan; `ConflictMonitor` runs it while
this process leads (at the start of every term and then every `interval` seconds) and reports
every conflict it has not reported yet: a Warning Event `GPUConflict` on the node, a log line
`gpu_conflict`, and its `reported` count (the metric `gpu_scheduler_gpu_conflicts_total`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from scheduler.kube.events import WARNING, EventRecorder, ObjectRef
from scheduler.kube.leader import Elector, LeadershipLost
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache, PodState

log = structlog.get_logger("gpu-scheduler.core.conflicts")

REASON = "GPUConflict"
DEFAULT_INTERVAL_S = 30.0
POLL_S = 1.0
"""How often the monitor looks again whether the caches are synced."""
MAX_LISTED = 8
"""Pods and indices named in one report; the rest are counted."""


@dataclass(frozen=True, slots=True)
class GpuConflict:
    """What is wrong on one node. `shared` maps each GPU index annotated on more than one bound
    pod to those pods' keys (sorted); `bound` is the GPUs requested by the pods bound there,
    `allocatable` the node's GPUs."""

    node: str
    shared: tuple[tuple[int, tuple[str, ...]], ...]
    bound: int
    allocatable: int

    @property
    def overcommitted(self) -> bool:
        return self.bound > self.allocatable

    @property
    def pods(self) -> tuple[str, ...]:
        """Pods involved in shared indices (sorted)."""
        return tuple(sorted({key for _, keys in self.shared for key in keys}))

    def describe(self) -> str:
        """One bounded line naming the indices, the pods and the GPU count."""
        parts = []
        if self.shared:
            listed = [f"{index} ({', '.join(_first(keys))})" for index, keys in self.shared]
            parts.append(f"GPU indices bound to more than one pod: {'; '.join(_first(listed))}")
        if self.overcommitted:
            parts.append(f"{self.bound} GPUs bound, {self.allocatable} allocatable")
        return f"node {self.node}: " + "; ".join(parts)


def _first(items: tuple[str, ...] | list[str]) -> list[str]:
    shown = list(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        shown.append(f"and {len(items) - MAX_LISTED} more")
    return shown


def _bound(state: PodState) -> bool:
    """A pod the API server has bound (not our own assumption, not a reservation)."""
    return not state.assumed and state.reserved_at is None


def find_conflicts(cache: ClusterCache) -> list[GpuConflict]:
    """Every node of `cache` with a GPU index annotated on two bound pods or more GPUs bound than
    allocatable, sorted by node name. Pods without the annotation count only in the total."""
    found = []
    for node in sorted(cache.pods_on_node):
        info = cache.nodes.get(node)
        if info is None:
            continue
        holders: dict[int, list[str]] = defaultdict(list)
        bound = 0
        for key in cache.pods_on_node[node]:
            state = cache.pods.get(key)
            if state is None or not _bound(state):
                continue
            bound += state.info.gpus
            for index in set(state.info.gpu_indices or ()):
                holders[index].append(state.info.key)
        shared = tuple(
            (index, tuple(sorted(keys))) for index, keys in sorted(holders.items()) if len(keys) > 1
        )
        allocatable = int(info.allocatable[GPU])
        if shared or bound > allocatable:
            found.append(GpuConflict(node, shared, bound, allocatable))
    return found


class ConflictMonitor:
    """Scans for conflicts while leading and reports each one once (see the module docstring).

    `elector` says when this process leads, `synced` whether the caches hold the whole cluster
    yet. A conflict that disappears and comes back is reported again.
    """

    def __init__(
        self,
        cache: ClusterCache,
        recorder: EventRecorder,
        elector: Elector,
        synced: Callable[[], bool],
        interval: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self.cache = cache
        self.recorder = recorder
        self.elector = elector
        self.synced = synced
        self.interval = interval
        self.reported = 0
        """Conflicts reported so far (each distinct conflict once while it lasts)."""
        self._current: set[GpuConflict] = set()

    def scan(self) -> list[GpuConflict]:
        """Scan once; report and return the conflicts not seen by the previous scan."""
        conflicts = find_conflicts(self.cache)
        new = [c for c in conflicts if c not in self._current]
        self._current = set(conflicts)
        for conflict in new:
            self.reported += 1
            message = conflict.describe()
            log.error(
                "gpu_conflict",
                node=conflict.node,
                pods=list(_first(conflict.pods)),
                indices=[index for index, _ in conflict.shared][:MAX_LISTED],
                bound=conflict.bound,
                allocatable=conflict.allocatable,
                message=message,
            )
            ref = ObjectRef("Node", conflict.node)
            self.recorder.emit(ref, WARNING, REASON, "Scheduling", message)
        return new

    async def run(self) -> None:
        """Scan at the start of every term once synced, then every `interval` while leading."""
        while True:
            with contextlib.suppress(LeadershipLost):
                async with self.elector.leadership():
                    await self._scan_while_leading()
            self._current.clear()  # the next term reports what it finds afresh

    async def _scan_while_leading(self) -> None:
        while True:
            if self.synced():
                self.scan()
                await asyncio.sleep(self.interval)
            else:
                await asyncio.sleep(min(POLL_S, self.interval))
