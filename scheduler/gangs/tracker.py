"""Gangs: Kubernetes PodGroups (scheduling.k8s.io/v1beta1) and the pods that point at them.

A pod joins a gang with `spec.schedulingGroup.podGroupName` (a PodGroup of its namespace). The
PodGroup says how the gang is scheduled:

- `spec.schedulingPolicy.gang.minCount`: at least that many members run at once or none does;
  `spec.schedulingPolicy.basic`: no all-or-nothing (a min count of 1);
- `spec.schedulingConstraints.topology[0].key`: every member lands on nodes sharing one value of
  that node label (e.g. one rack);
- `spec.priority` (with `spec.priorityClassName`) is the priority the gang preempts with, and
  `spec.disruptionMode` (single / all) says whether its members may be evicted one by one
  (`scheduler.victims.gangs`, `scheduler.postfilter.gang_reclaim`).

`parse_pod_group` never raises: a bad PodGroup yields a record whose `errors` name the fields
(`FieldError`), its members wait and the daemon reports the errors on the PodGroup.

`GangTracker` is PreEnqueue's bookkeeping (pure, no API calls): the PodGroups seen, which pods
exist per gang (pending or bound, any scheduler) and which of our pending pods belong to each.
`waiting(gang)` is "" once the PodGroup exists, is valid and at least minCount of its pods
exist; otherwise the message the held pods show. A Kueue pod group (`scheduler.gangs.kueue`)
has no object: its record is made from what its pods declare, and it waits until minCount of
its pods exist without scheduling gates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.gangs.kueue import (
    KUEUE_SOURCE,
    group_name,
    group_problems,
    is_kueue_gang,
    member_count,
)
from scheduler.kube.podgroups import CONDITION_TYPE as SCHEDULED_CONDITION
from scheduler.model.fields import FieldError, object_at
from scheduler.model.objects import COSCHEDULING_PREFIX, PodInfo, PodRef
from topology.text import clip, quote

MAX_MIN_COUNT = 100_000
"""Largest minCount accepted (a larger one can never be met and is reported)."""


@dataclass(frozen=True)
class PodGroupInfo:
    """One PodGroup, parsed. `errors` non-empty means: report, and its members wait."""

    key: str
    namespace: str
    name: str
    uid: str
    gang: bool
    """schedulingPolicy.gang (all-or-nothing) rather than basic."""
    min_count: int
    """gang.minCount; 1 for basic."""
    topology_key: str = ""
    """schedulingConstraints.topology[0].key: the node label all members share ("" none)."""
    priority: int | None = None
    """spec.priority (the admission controller sets it from spec.priorityClassName, or to 0)."""
    priority_class: str = ""
    """spec.priorityClassName ("" when unset: then `priority` is only the default 0)."""
    disruption_mode: str = ""
    """"single" or "all" (spec.disruptionMode), "" when unset."""
    condition: tuple[str, str, str] | None = None
    """status.conditions[PodGroupInitiallyScheduled] as (status, reason, message), if any."""
    errors: tuple[FieldError, ...] = ()
    source: str = "scheduling.k8s.io/v1beta1"
    """The API the group comes from: this one, `COSCHEDULING_SOURCE` or `KUEUE_SOURCE`."""
    schedule_timeout_seconds: int | None = None
    """scheduler-plugins' spec.scheduleTimeoutSeconds: for information only (not enforced)."""


def gang_key(pod: PodInfo | PodRef) -> str:
    """ "namespace/podGroupName" of the pod's gang, "" when it has none (a parsed pod, or a
    deleted pod's `PodRef`)."""
    return f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else ""


def _min_count(raw: object, errors: list[FieldError]) -> int:
    where = "spec.schedulingPolicy.gang.minCount"
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(FieldError(where, f"must be an integer, got {quote(raw)}"))
        return 1
    if raw < 1 or raw > MAX_MIN_COUNT:
        errors.append(FieldError(where, f"must be between 1 and {MAX_MIN_COUNT}, got {quote(raw)}"))
        return 1
    return raw


def _topology_key(raw: object, errors: list[FieldError]) -> str:
    where = "spec.schedulingConstraints.topology"
    if raw is None:
        return ""
    if not isinstance(raw, list):
        errors.append(FieldError(where, f"must be a list, got {type(raw).__name__}"))
        return ""
    if not raw:
        return ""
    first = object_at(raw[0], f"{where}[0]", errors)
    key = first.get("key")
    if not isinstance(key, str) or not key:
        errors.append(FieldError(f"{where}[0].key", f"must be a label key, got {quote(key)}"))
        return ""
    return key


def _condition(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for item in conditions:
        if isinstance(item, Mapping) and item.get("type") == SCHEDULED_CONDITION:
            return (str(item.get("status")), str(item.get("reason")), str(item.get("message")))
    return None


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroupInfo from a PodGroup's JSON. Never raises; problems land in `errors`."""
    errors: list[FieldError] = []
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    status = object_at(obj.get("status"), "status", errors)
    namespace = clip(metadata.get("namespace") or "")
    name = clip(metadata.get("name") or "")
    policy = object_at(spec.get("schedulingPolicy"), "spec.schedulingPolicy", errors)
    gang_raw, basic_raw = policy.get("gang"), policy.get("basic")
    gang, min_count = False, 1
    if (gang_raw is None) == (basic_raw is None):
        errors.append(FieldError("spec.schedulingPolicy", "must set exactly one of gang, basic"))
    elif gang_raw is not None:
        gang = True
        min_count = _min_count(
            object_at(gang_raw, "spec.schedulingPolicy.gang", errors).get("minCount"), errors
        )
    constraints = object_at(spec.get("schedulingConstraints"), "spec.schedulingConstraints", errors)
    topology_key = _topology_key(constraints.get("topology"), errors)
    priority_raw = spec.get("priority")
    priority: int | None = None
    if isinstance(priority_raw, int) and not isinstance(priority_raw, bool):
        priority = priority_raw
    elif priority_raw is not None:
        errors.append(FieldError("spec.priority", f"must be an integer, got {quote(priority_raw)}"))
    mode = object_at(spec.get("disruptionMode"), "spec.disruptionMode", errors)
    disruption_mode = "all" if "all" in mode else "single" if "single" in mode else ""
    return PodGroupInfo(
        key=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        uid=clip(metadata.get("uid") or ""),
        gang=gang,
        min_count=min_count,
        topology_key=topology_key,
        priority=priority,
        priority_class=clip(str(spec.get("priorityClassName") or "")),
        disruption_mode=disruption_mode,
        condition=_condition(status),
        errors=tuple(errors),
    )


class GangTracker:
    """PodGroups and gang members as the informers report them (see the module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[str, PodGroupInfo] = {}
        self._existing: dict[str, set[str]] = {}
        """Gang key -> keys of its pods that exist and are not finished (any scheduler)."""
        self._pending: dict[str, dict[str, PodInfo]] = {}
        """Gang key -> our pending members, by pod key."""
        self._gang_of: dict[str, str] = {}
        """Pod key -> its gang key (pods in `_existing`)."""
        self._bound_once: dict[str, set[str]] = {}
        """Gang key -> keys of its pods seen bound to a node, finished ones included, until they
        are deleted: a member that ran to completion was bound."""
        self.held: set[str] = set()
        """Keys of our pending members held back by PreEnqueue (not queued), until their gang
        may run; kept by the pod handler and the gang cycle, cleared when the pod goes."""
        self._declared: dict[str, dict[str, int | FieldError]] = {}
        """Kueue gang key -> pod key -> the total count it declares (or its error), for its
        pods not deleted; the gang's record in `groups` is made from it."""
        self._declared_in: dict[str, str] = {}
        """Pod key -> the Kueue gang key it declares a count in."""
        self._gated: dict[str, set[str]] = {}
        """Kueue gang key -> keys of its existing pods that still have scheduling gates."""

    def set_group(self, group: PodGroupInfo) -> None:
        self.groups[group.key] = group

    def remove_group(self, key: str) -> None:
        self.groups.pop(key, None)

    def pod_seen(self, pod: PodInfo, pending: bool) -> None:
        """The informer's latest view of `pod`; `pending` says it is ours, pending and not gated
        (a candidate for a gang cycle). A finished or terminating pod no longer counts."""
        self._forget(pod.key)
        gang = gang_key(pod)
        if gang and pod.bound:
            self._bound_once.setdefault(gang, set()).add(pod.key)
        kueue = bool(gang) and is_kueue_gang(gang)
        before = self._declared_in.get(pod.key)
        if before is not None and before != gang:  # relabelled into another group, or out
            self._declare(before, pod.key, None)
        if kueue:
            self._declare(gang, pod.key, member_count(pod))
        if not gang or pod.finished or pod.terminating:
            return
        self._gang_of[pod.key] = gang
        self._existing.setdefault(gang, set()).add(pod.key)
        if kueue and pod.scheduling_gates:
            self._gated.setdefault(gang, set()).add(pod.key)
        if pending:
            self._pending.setdefault(gang, {})[pod.key] = pod

    def pod_gone(self, key: str, gang: str = "") -> None:
        """The pod (of gang `gang`, when known) was deleted."""
        self.held.discard(key)
        self._forget(key)
        before = self._declared_in.get(key)
        if before is not None:
            self._declare(before, key, None)
        bound = self._bound_once.get(gang)
        if bound is not None:
            bound.discard(key)
            if not bound:
                del self._bound_once[gang]

    def _forget(self, key: str) -> None:
        gang = self._gang_of.pop(key, None)
        if gang is None:
            return
        existing = self._existing.get(gang)
        if existing is not None:
            existing.discard(key)
            if not existing:
                del self._existing[gang]
        pending = self._pending.get(gang)
        if pending is not None:
            pending.pop(key, None)
            if not pending:
                del self._pending[gang]
        gated = self._gated.get(gang)
        if gated is not None:
            gated.discard(key)
            if not gated:
                del self._gated[gang]

    def _declare(self, gang: str, key: str, value: int | FieldError | None) -> None:
        """Record what pod `key` of Kueue gang `gang` declares (None: it was deleted) and
        remake the gang's record; the record goes with the last pod."""
        declared = self._declared.setdefault(gang, {})
        if value is None:
            declared.pop(key, None)
            self._declared_in.pop(key, None)
        elif declared.get(key) == value:
            return  # unchanged (a status update): the record stands
        else:
            declared[key] = value
            self._declared_in[key] = gang
        if not declared:
            del self._declared[gang]
            self.groups.pop(gang, None)
            return
        count, errors = group_problems(declared)
        old = self.groups.get(gang)
        if old is not None and old.min_count == count and old.errors == errors:
            return
        namespace = gang.partition("/")[0]
        self.groups[gang] = PodGroupInfo(
            key=gang,
            namespace=namespace,
            name=group_name(gang),
            uid="",
            gang=True,
            min_count=count,
            errors=errors,
            source=KUEUE_SOURCE,
        )

    def members(self, gang: str) -> set[str]:
        """Keys of the gang's pods that exist (pending or bound, not finished)."""
        return set(self._existing.get(gang, ()))

    def bound_once(self, gang: str) -> set[str]:
        """Keys of the gang's pods the informer saw bound, finished ones included (until they
        are deleted)."""
        return set(self._bound_once.get(gang, ()))

    def pending(self, gang: str) -> dict[str, PodInfo]:
        """Our pending members of the gang, by key."""
        return dict(self._pending.get(gang, {}))

    def waiting(self, gang: str) -> str:
        """ "" when the gang's pods may be tried; else why they wait (bounded in size)."""
        group = self.groups.get(gang)
        name = gang.partition("/")[2]
        if group is None:
            return f"waiting for PodGroup {clip(name)}: it does not exist"
        if group.source == KUEUE_SOURCE:
            return self._kueue_waiting(gang, group)
        if group.errors:
            return f"waiting for PodGroup {clip(name)}: it is invalid: " + "; ".join(
                str(e) for e in group.errors[:3]
            )
        count = len(self._existing.get(gang, ()))
        if count < group.min_count:
            return (
                f"waiting for PodGroup {clip(name)}: {count} of minCount {group.min_count} "
                "pods exist"
            )
        return ""

    def _kueue_waiting(self, gang: str, group: PodGroupInfo) -> str:
        """`waiting` for a Kueue pod group: its pods declare it, and it may run once Kueue
        admitted it, i.e. minCount of its pods exist without scheduling gates."""
        name = clip(group.name)
        if group.errors:
            return f"waiting for Kueue pod group {name}: it is invalid: " + "; ".join(
                str(e) for e in group.errors
            )
        existing = self._existing.get(gang, set())
        ungated = len(existing - self._gated.get(gang, set()))
        if ungated < group.min_count:
            return (
                f"waiting for Kueue pod group {name}: {ungated} of its total count "
                f"{group.min_count} pods exist without scheduling gates (admitted)"
            )
        return ""


# -- scheduler-plugins coscheduling (scheduling.x-k8s.io/v1alpha1) ------------------------------

COSCHEDULING_SOURCE = "scheduling.x-k8s.io/v1alpha1"


def parse_coscheduling_group(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroupInfo (all-or-nothing, minCount = spec.minMember) from a scheduler-plugins
    PodGroup's JSON. `spec.scheduleTimeoutSeconds` is read and kept for information only.
    Never raises; problems land in `errors`."""
    errors: list[FieldError] = []
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    namespace = clip(metadata.get("namespace") or "")
    name = clip(metadata.get("name") or "")
    raw = spec.get("minMember")
    min_count = 1
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(FieldError("spec.minMember", f"must be an integer, got {quote(raw)}"))
    elif raw < 1 or raw > MAX_MIN_COUNT:
        errors.append(
            FieldError("spec.minMember", f"must be between 1 and {MAX_MIN_COUNT}, got {quote(raw)}")
        )
    else:
        min_count = raw
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
        errors.append(
            FieldError("spec.scheduleTimeoutSeconds", f"must be an integer, got {quote(timeout)}")
        )
        timeout = None
    return PodGroupInfo(
        key=f"{namespace}/{COSCHEDULING_PREFIX}{name}",
        namespace=namespace,
        name=name,
        uid=clip(metadata.get("uid") or ""),
        gang=True,
        min_count=min_count,
        errors=tuple(errors),
        source=COSCHEDULING_SOURCE,
        schedule_timeout_seconds=timeout,
    )
