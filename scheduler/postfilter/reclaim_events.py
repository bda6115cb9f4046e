"""What the reclaim PostFilter tells: its counters (`ReclaimStats`), and the Events and log lines
of an attempt (`ReclaimReporter`): the plan on the preemptor, the verdict on each victim, and
why an attempt was skipped.

Idle reclaim's words are written here; a plan or a victim of priority preemption is handed to
`scheduler.postfilter.preemption.PriorityPreemption`, which writes kube-scheduler's. The
preemptor's name is never written on a victim: its namespace may be private.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import structlog

from scheduler.config import ReclaimConfig
from scheduler.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from scheduler.kube.kueue_workloads import WorkloadRef
from scheduler.model.objects import PodInfo
from scheduler.postfilter.preemption import PriorityPreemption
from scheduler.victims.candidates import PREEMPTION, Plan, Victim
from scheduler.victims.kueue import kueue_owner

log = structlog.get_logger("gpu-scheduler.reclaim")

MAX_ERROR_CHARS = 200
"""Longer error texts (Prometheus, the API server) are cut in events."""


def cut(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` whole when it has at most `limit` characters, else its first `limit` and "..."."""
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class ReclaimStats:
    """Counters exported as metrics: attempts, evictions by result, skips by reason."""

    attempts: int = 0
    evictions: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)
    last_eviction_s: float = 0.0
    """Duration of the latest Eviction API call or Workload deactivation (for the latency
    benchmark); not exported."""


class ReclaimReporter:
    """Writes the events and log lines of reclaim attempts and counts skips in `stats`."""

    def __init__(
        self,
        settings: ReclaimConfig,
        recorder: EventRecorder,
        stats: ReclaimStats,
        preemption: PriorityPreemption,
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self.stats = stats
        self.preemption = preemption

    def report(self, pod: PodInfo, plan: Plan, dry_run: bool) -> None:
        """The preemptor's event for `plan` (and in dry-run the victims' "would evict")."""
        if plan.step == PREEMPTION:
            self.preemption.report(pod, plan)
            return
        victims = plan.victims
        gpus = sum(v.held_gpus for v in victims)
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
                self.tell_victim(pod, victim, dry_run=True)

    def tell_victim(
        self, pod: PodInfo, victim: Victim, dry_run: bool, workload: WorkloadRef | None = None
    ) -> None:
        """The victim's event: its measured usage (idle reclaim; `workload` when it was taken
        back through its Kueue Workload) or kube-scheduler's words (priority preemption)."""
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

    def skip(self, pod: PodInfo, reason: str, note: str | None) -> None:
        """Count a skipped attempt under `reason`; `note`, when given, becomes a Warning event
        on the preemptor."""
        self.stats.skips[reason] += 1
        log.info("reclaim_skipped", pod=pod.key, reason=reason, detail=note)
        if note is not None:
            ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
            self.recorder.emit(ref, WARNING, "ReclaimSkipped", "Reclaim", note)
