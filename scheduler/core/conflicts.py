"""GPU conflicts among bound pods: two pods on a node holding the same GPU index, or a node with
more GPUs bound than it has; and among ResourceClaims: one DRA device allocated to two claims.

None of these should ever happen; when one does, something wrote a binding or an allocation it
should not have (a replica that kept writing after it lost the Lease, another scheduler, a
hand-made Binding or claim status). The cache hides such a conflict on purpose (a pod whose
annotated GPUs are taken is counted on other GPUs), so the scan reads what the API server holds:
each bound pod's `gpu-scheduler.io/gpus` annotation and GPU request, and each ResourceClaim's
`status.allocation` (the claims of `DraStore`, never the allocations in flight here). The API
server does not check that a device is allocated to one claim only, so kube-scheduler and
gpu-scheduler allocating from the same pool can give one device twice; this scan is how that
shows.

A device counts as allocated to a claim as kube-scheduler counts it (`foreachAllocatedDevice`,
k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
allocateddevices.go): a result with `adminAccess` does not take the device; a result with a
`shareID` takes only that share of a device that allows multiple allocations. So two claims
conflict over a device when either holds it whole (no `shareID`) or both hold the same share.

`find_conflicts` and `find_device_conflicts` are the pure scans; `ConflictMonitor` runs them
while this process leads (at the start of every term and then every `interval` seconds) and
reports every conflict it has not reported yet: for pods a Warning Event `GPUConflict` on the
node and a log line `gpu_conflict`; for a device a Warning Event `DeviceConflict` on the node
whose pool it is in (a node-local pool), else on each pod the claims are reserved for, and a
log line `device_conflict` naming the claims; both in its `reported` count (the metric
`gpu_scheduler_gpu_conflicts_total`).
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
from scheduler.model.claims import ResourceClaim
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache, PodState
from scheduler.state.dra import DeviceID, DraStore

log = structlog.get_logger("gpu-scheduler.core.conflicts")

REASON = "GPUConflict"
DEVICE_REASON = "DeviceConflict"
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
    allocatable, sorted by node name. Pods without the annotation count only in the total.
    Nodes without GPU allocatable are skipped: a pod asking for GPUs there got them through a
    DRA claim (DeviceClass extendedResourceName), whose devices `find_device_conflicts` checks."""
    found = []
    for node in sorted(cache.pods_on_node):
        info = cache.nodes.get(node)
        if info is None:
            continue
        allocatable = int(info.allocatable[GPU])
        if not allocatable:
            continue  # GPUs asked for there come from DRA claims (see `find_device_conflicts`)
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
        if shared or bound > allocatable:
            found.append(GpuConflict(node, shared, bound, allocatable))
    return found


@dataclass(frozen=True, slots=True)
class DeviceConflict:
    """One DRA device (driver, pool, device) allocated to more than one claim: `claims` the
    claims' keys (sorted), `pods` the pods they are reserved for (namespace/name, uid; sorted),
    `node` the node whose pool the device is in ("" for a pool of several nodes)."""

    device: DeviceID
    claims: tuple[str, ...]
    pods: tuple[tuple[str, str], ...] = ()
    node: str = ""

    def describe(self) -> str:
        """One bounded line naming the device, the claims and the pods."""
        driver, pool, name = self.device
        text = (
            f"device {driver}/{pool}/{name} allocated to more than one ResourceClaim: "
            + ", ".join(_first(self.claims))
        )
        if self.pods:
            text += f" (reserved for pods {', '.join(_first([key for key, _ in self.pods]))})"
        return text


def _holdings(claim: ResourceClaim) -> dict[DeviceID, set[str]]:
    """Device -> the shares `claim` holds of it ("" for the whole device); admin access is no
    holding."""
    held: dict[DeviceID, set[str]] = defaultdict(set)
    if claim.allocation is not None:
        for result in claim.allocation.results:
            if not result.admin_access:
                held[result.device_id].add(result.share_id)
    return held


def _clash(first: set[str], second: set[str]) -> bool:
    """Whether two claims holding these shares of one device conflict."""
    return "" in first or "" in second or bool(first & second)


def find_device_conflicts(store: DraStore) -> list[DeviceConflict]:
    """Every device of `store`'s claims' allocations held by two claims that conflict (see the
    module docstring), sorted by device."""
    holders: dict[DeviceID, list[tuple[str, set[str]]]] = defaultdict(list)
    for key, claim in store.claims.items():
        for device, shares in _holdings(claim).items():
            holders[device].append((key, shares))
    nodes = {
        (s.driver, s.pool.name): s.node_selection.node_name
        for s in store.slices.values()
        if s.node_selection.node_name and not s.per_device_node_selection
    }
    found = []
    for device, held in sorted(holders.items()):
        clashing: set[str] = set()
        for index, (first, first_shares) in enumerate(held):
            for second, second_shares in held[index + 1 :]:
                if _clash(first_shares, second_shares):
                    clashing.update((first, second))
        if len(clashing) < 2:
            continue
        pods = {
            (f"{store.claims[key].namespace}/{ref.name}", ref.uid)
            for key in clashing
            for ref in store.claims[key].reserved_for
            if ref.is_pod
        }
        node = nodes.get(device[:2], "")
        found.append(DeviceConflict(device, tuple(sorted(clashing)), tuple(sorted(pods)), node))
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
        self._current: set[GpuConflict | DeviceConflict] = set()

    def scan(self) -> list[GpuConflict | DeviceConflict]:
        """Scan once; report and return the conflicts not seen by the previous scan."""
        conflicts: list[GpuConflict | DeviceConflict] = [*find_conflicts(self.cache)]
        conflicts += find_device_conflicts(self.cache.dra)
        new = [c for c in conflicts if c not in self._current]
        self._current = set(conflicts)
        for conflict in new:
            self.reported += 1
            if isinstance(conflict, DeviceConflict):
                self._report_device(conflict)
                continue
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

    def _report_device(self, conflict: DeviceConflict) -> None:
        message = conflict.describe()
        log.error(
            "device_conflict",
            device="/".join(conflict.device),
            claims=_first(conflict.claims),
            pods=_first([key for key, _ in conflict.pods]),
            node=conflict.node or None,
            message=message,
        )
        if conflict.node:
            refs = [ObjectRef("Node", conflict.node)]
        else:
            refs = [
                ObjectRef("Pod", key.partition("/")[2], key.partition("/")[0], uid)
                for key, uid in conflict.pods[:MAX_LISTED]
            ]
        for ref in refs:
            self.recorder.emit(ref, WARNING, DEVICE_REASON, "Scheduling", message)

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
