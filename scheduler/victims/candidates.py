"""What the PostFilter's steps (idle reclaim, priority preemption) hand to the shared
enforcement in `scheduler.postfilter.enforcement.Enforcer`: the victims chosen on one node.

Both steps go through the same machinery: re-validate the plan, reserve the room in the cache,
set `status.nominatedNodeName`, evict through the Eviction API, budget-guarded victims first.
`Plan.step` says which step chose the victims, and so which events are written.

Victims that belong to gangs are weighed with their gangs (`scheduler.victims.gangs`): the
helpers at the end gather the gangs' facts from the cache and the `GangTracker`, and mark the
v1beta1 PodGroups that lose members (DisruptionTarget, reason PreemptionByScheduler).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog
from kubernetes_asyncio import client

from reclaim.usage import Verdict
from scheduler.gangs.tracker import GangTracker, PodGroupInfo, gang_key
from scheduler.kube.podgroups import (
    DISRUPTION_TARGET,
    PREEMPTION_BY_SCHEDULER,
    set_pod_group_condition,
)
from scheduler.model.objects import PodInfo
from scheduler.state.cache import ClusterCache, PodState
from scheduler.victims.gangs import VictimGang, VictimPod

log = structlog.get_logger("gpu-scheduler.reclaim")
V1BETA1 = "scheduling.k8s.io/v1beta1"

RECLAIM = "reclaim"
PREEMPTION = "preemption"


def may_make_room(state: PodState, preemptor: PodInfo) -> bool:
    """Whether the pod of `state` may be weighed as a victim for `preemptor` by either step: it
    counts on its node (not a reservation, not assumed by a binding in flight), is not already
    terminating and is not the preemptor itself."""
    return not (
        state.assumed
        or state.reserved_at is not None
        or state.info.terminating
        or state.info.key == preemptor.key
    )


@dataclass(frozen=True)
class Victim:
    """A pod chosen for eviction, the PodDisruptionBudgets guarding it and, for idle reclaim,
    its policy window and (once measured) its verdict (zero and None for preemption)."""

    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    window_s: int = 0
    threshold_pct: float = 0.0
    verdict: Verdict | None = None
    budgets: tuple[str, ...] = ()
    gpu_count: int | None = None
    """The whole GPUs it holds, DRA devices included (`scheduler.state.gpu_holdings`); None:
    its `nvidia.com/gpu` request."""

    @property
    def held_gpus(self) -> int:
        """The whole GPUs it holds (`gpu_count`, else its request)."""
        return self.pod.gpus if self.gpu_count is None else self.gpu_count


@dataclass(frozen=True)
class Plan:
    """The victims chosen on one node; `guarded` are those a budget forbids evicting now;
    `step` is the PostFilter step that chose them (`RECLAIM` or `PREEMPTION`)."""

    node: str
    victims: tuple[Victim, ...]
    guarded: frozenset[str] = frozenset()
    step: str = RECLAIM

    def eviction_order(self) -> list[Victim]:
        """Budget-guarded victims first: if the API server refuses one, nothing else on the
        node was evicted for nothing."""
        return sorted(self.victims, key=lambda v: v.pod.key not in self.guarded)

    def guarded_warning(self) -> str:
        """What the preemptor's event adds when budgets may refuse an eviction ("" if none)."""
        if not self.guarded:
            return ""
        return (
            f"; {len(self.guarded)} of them guarded by a PodDisruptionBudget that allows no "
            "more disruptions now: the eviction may be refused"
        )


# -- victims weighed with their gangs ----------------------------------------------------------


def victim_gangs(
    cache: ClusterCache, tracker: GangTracker | None, pods: Iterable[PodInfo]
) -> dict[str, VictimGang]:
    """The facts (`scheduler.victims.gangs.VictimGang`) of the gangs `pods` belong to: minCount,
    disruptionMode all, and the members counted in the cache. Empty without a tracker."""
    gangs: dict[str, VictimGang] = {}
    if tracker is None:
        return gangs
    for pod in pods:
        gang = gang_key(pod)
        group = tracker.groups.get(gang) if gang else None
        if group is None or gang in gangs:
            continue
        members = tuple(sorted(k for k in tracker.members(gang) if k in cache.pods))
        gangs[gang] = VictimGang(gang, group.min_count, group.disruption_mode == "all", members)
    return gangs


def mate_nodes(cache: ClusterCache, gangs: Mapping[str, VictimGang]) -> set[str]:
    """The nodes holding members of gangs evicted only as a whole."""
    found: set[str] = set()
    for gang in gangs.values():
        if gang.spare > 0:
            continue
        for key in gang.members:
            state = cache.pods.get(key)
            if state is not None:
                found.add(state.node)
    return found


def victim_pod(victim: Victim) -> VictimPod:
    """The plain facts of a victim, for `scheduler.victims.gangs`."""
    pod = victim.pod
    return VictimPod(pod.key, pod.priority, victim.held_gpus, gang_key(pod), victim.budgets)


def disrupted_groups(tracker: GangTracker | None, victims: Iterable[Victim]) -> list[PodGroupInfo]:
    """The scheduling.k8s.io/v1beta1 PodGroups losing members among `victims`."""
    groups: dict[str, PodGroupInfo] = {}
    if tracker is None:
        return []
    for victim in victims:
        gang = gang_key(victim.pod)
        group = tracker.groups.get(gang) if gang else None
        if group is not None and group.source == V1BETA1:
            groups[gang] = group
    return list(groups.values())


async def mark_disruption_targets(
    custom: client.CustomObjectsApi,
    tracker: GangTracker | None,
    victims: Iterable[Victim],
    message: str,
    timeout: float = 10.0,
) -> list[str]:
    """Set DisruptionTarget=True (reason PreemptionByScheduler, `message`) on every v1beta1
    PodGroup losing members among `victims`, as kube-scheduler marks what it preempts before
    evicting. A failed patch is logged and does not stop the eviction. Returns the PodGroups
    marked."""
    marked: list[str] = []
    for group in disrupted_groups(tracker, victims):
        try:
            await set_pod_group_condition(
                custom,
                group.namespace,
                group.name,
                "True",
                PREEMPTION_BY_SCHEDULER,
                message,
                timeout,
                group.uid,
                condition_type=DISRUPTION_TARGET,
            )
            marked.append(group.key)
        except Exception as error:
            log.warning("disruption_target_failed", podgroup=group.key, error=str(error)[:200])
    return marked
