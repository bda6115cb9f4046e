"""Which reclaim victims run under Kueue, and which of those may be taken back.

A pod admitted by Kueue holds its GPUs on its Workload's quota. Evicting the pod alone does not
give the quota back (its Job recreates the pod; see `scheduler.kube.kueue_workloads`), so idle
reclaim takes such a victim back through its Workload instead, and the Workload goes as a
whole: every pod of it is taken down by Kueue. Hence the rule here: a Kueue victim is weighed
only when every pod of its Workload that the scheduler counts is idle too; one busy pod keeps
the whole Workload.

How a pod is recognised (labels and annotations Kueue v0.17 and the Job controller set):

- `kueue.x-k8s.io/podset` on the pods of an admitted job (Kueue adds it to the pod template when
  it admits), `kueue.x-k8s.io/managed: "true"` on pods of the pod integration, or the
  `kueue.x-k8s.io/workload` annotation (topology-aware scheduling) naming the Workload;
- the owner: the Job's UID from `batch.kubernetes.io/controller-uid` (or the older
  `controller-uid`), the pod's own UID under the pod integration, and the Workload's name when a
  label gives it (a pod group's `kueue.x-k8s.io/pod-group-name`, a prebuilt Workload's
  `kueue.x-k8s.io/prebuilt-workload-name`, the workload annotation).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.model.objects import PodInfo

PODSET_LABEL = "kueue.x-k8s.io/podset"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")


@dataclass(frozen=True)
class KueueOwner:
    """What links a pod to its Workload: the candidate owner UIDs (its Job's, or its own) and,
    when known, the Workload's name."""

    namespace: str
    owner_uids: tuple[str, ...]
    workload_name: str = ""

    @property
    def key(self) -> str:
        """Stable identity of the Workload within the cluster (pods of one Workload share it)."""
        return f"{self.namespace}/{self.workload_name or ','.join(self.owner_uids)}"


def kueue_owner(pod: PodInfo) -> KueueOwner | None:
    """The Kueue link of `pod`, None for a pod Kueue does not manage (see the module
    docstring)."""
    labels, annotations = pod.labels, pod.annotations
    managed = labels.get(MANAGED_LABEL) == "true"
    if not (PODSET_LABEL in labels or managed or WORKLOAD_ANNOTATION in annotations):
        return None
    name = (
        annotations.get(WORKLOAD_ANNOTATION)
        or labels.get(PREBUILT_WORKLOAD_LABEL)
        or (labels.get(POD_GROUP_LABEL) if managed else None)
        or ""
    )
    job_uids = tuple(dict.fromkeys(labels[k] for k in JOB_UID_LABELS if labels.get(k)))
    uids = job_uids or ((pod.uid,) if managed else ())
    return KueueOwner(pod.namespace, uids, name)


def partial_workloads(idle: Iterable[str], owners: Mapping[str, KueueOwner]) -> dict[str, str]:
    """The idle victims (pod keys) that may not be taken back, and why: their Workload (by
    `KueueOwner.key`) has another counted pod that is not among `idle`. `owners` maps every
    counted Kueue pod's key to its owner."""
    idle_keys = set(idle)
    members: dict[str, list[str]] = {}
    for member, its_owner in owners.items():
        members.setdefault(its_owner.key, []).append(member)
    excluded: dict[str, str] = {}
    for key in sorted(idle_keys):
        owner = owners.get(key)
        if owner is None:
            continue
        busy = sorted(k for k in members[owner.key] if k not in idle_keys)
        if busy:
            excluded[key] = (
                f"its Kueue Workload ({owner.key}) also runs {len(busy)} pod(s) not idle here, "
                f"e.g. {busy[0]}"
            )
    return excluded
