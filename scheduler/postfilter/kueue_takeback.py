"""Idle reclaim of pods Kueue admitted (`KueueTakeBack`): such a pod is never evicted behind
Kueue's back. Its Workload is found (`scheduler.kube.kueue_workloads.find_workload`) before
anything on the node is touched, then deactivated (`spec.active: false`) instead of evicting the
pod: Kueue suspends the job, deletes its pods and releases the quota, and does not requeue it
until `spec.active` is true again. A Workload that cannot be found or patched drops the node's
set, with Events on the victim and the preemptor (docs/kueue.md).

Priority preemption evicts pods as kube-scheduler does, Kueue's or not.
"""

from __future__ import annotations

import structlog
from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError
from scheduler.kube.events import WARNING, ObjectRef
from scheduler.kube.eviction import EvictionResult
from scheduler.kube.kueue_workloads import (
    WorkloadNotFound,
    WorkloadRef,
    deactivate_workload,
    find_workload,
)
from scheduler.model.objects import PodInfo
from scheduler.postfilter.reclaim_events import MAX_ERROR_CHARS, ReclaimReporter, cut
from scheduler.state.context import SchedulerContext
from scheduler.victims.candidates import RECLAIM, Plan, Victim
from scheduler.victims.kueue import kueue_owner

log = structlog.get_logger("gpu-scheduler.reclaim")

KUEUE_API = "kueue.x-k8s.io/v1beta2"
WORKLOAD_DEACTIVATED = "workload_deactivated"
"""The eviction result counted for a Kueue victim taken back through its Workload."""


def _usage_text(victim: Victim) -> str:
    if victim.verdict is None or victim.verdict.usage_pct is None:
        return ""
    return (
        f": GPU usage {victim.verdict.usage_pct:.1f} % < {victim.threshold_pct:g} % "
        f"over {victim.window_s} s"
    )


class KueueTakeBack:
    """Takes Kueue victims back through their Workloads (see the module docstring); counts in
    the reporter's stats, skips and victims' events through the reporter."""

    def __init__(self, context: SchedulerContext, reporter: ReclaimReporter) -> None:
        self.custom = client.CustomObjectsApi(context.api_client)
        self.recorder = context.recorder
        self.clock = context.clock
        self.reporter = reporter
        self.stats = reporter.stats

    async def workloads(self, pod: PodInfo, plan: Plan) -> dict[str, WorkloadRef] | None:
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
                self._refused(pod, plan, victim, f"its Kueue Workload could not be found: {error}")
                return None
        return refs

    async def take_back(
        self, pod: PodInfo, plan: Plan, victim: Victim, ref: WorkloadRef, taken: set[str]
    ) -> tuple[EvictionResult, str]:
        """Deactivate the Workload of Kueue victim `victim` (once per Workload and plan, keys in
        `taken`) instead of evicting the pod: Kueue suspends its job, deletes its pods and
        releases its quota. Counted as `workload_deactivated` per victim pod; a refusal is FAILED
        (`failed`), after Events on the victim and the preemptor."""
        if ref.key not in taken:
            why = (
                f"idle GPU reclaim by gpu-scheduler for pod {pod.uid} on node {plan.node}"
                f"{_usage_text(victim)}"
            )
            started = self.clock()
            try:
                await deactivate_workload(self.custom, ref, why)
            except APIError as error:
                self.stats.last_eviction_s = self.clock() - started
                self.stats.evictions[EvictionResult.FAILED.value] += 1
                self._refused(
                    pod, plan, victim, f"deactivating its Kueue Workload {ref.key} failed: {error}"
                )
                return EvictionResult.FAILED, str(error)
            self.stats.last_eviction_s = self.clock() - started
            taken.add(ref.key)
            note = (
                f"deactivated: idle GPUs reclaimed for pod {pod.uid} of priority {pod.priority} "
                f"on node {plan.node}{_usage_text(victim)}; Kueue releases the quota and "
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
        self.reporter.tell_victim(pod, victim, dry_run=False, workload=ref)
        return EvictionResult.EVICTED, ""

    def _refused(self, pod: PodInfo, plan: Plan, victim: Victim, why: str) -> None:
        """A Kueue victim cannot be taken back through its Workload: Events on it and on the
        preemptor; the plan on `plan.node` is dropped (the next cycle plans again)."""
        why = cut(why, 2 * MAX_ERROR_CHARS)
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
        self.reporter.skip(
            pod,
            "kueue_workload_unavailable",
            f"reclaim on node {plan.node} skipped: victim {victim.pod.key}: {why}",
        )
