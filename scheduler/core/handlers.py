"""What the scheduler does with each watch event: keep the cache and the queue in step.

- Nodes: add/update/remove in the cache. A node added, or changed in a way that can make room
  (allocatable, taints, labels, unschedulable), moves the unschedulable pods back to the queue.
  A node whose fields are invalid gets an Event naming the field (once per distinct problem).
- Pods bound to a node (by anyone): counted in the cache until they finish or are deleted; a pod
  deleted or finished moves the unschedulable pods back to the queue. A pod deleted (a watch
  event, or missing from a relist: the informer's diff calls `on_delete` for it) leaves the
  cache also while it is assumed, and so does an assumed pod the informer shows finished.
- `gone(uid, key)` is told of every pod that was bound or deleted, so per-pod bookkeeping
  elsewhere (the scheduler's PodScheduled condition marks) is pruned.
- Pods pending for this scheduler (our schedulerName, no node, not terminating): queued, unless
  they have scheduling gates (kube-scheduler's PreEnqueue): a gated pod is taken out of the queue
  and, unless it already shows PodScheduled=False with reason SchedulingGated, `gated(pod)` is
  told (the scheduler patches that condition); the update that removes the last gate queues it
  in activeQ at once.
- Pods whose ResourceClaimTemplate's claim is not created yet (DynamicResources' PreEnqueue) are
  not queued, and nothing is reported for them, as with kube-scheduler; the resourceclaim
  controller's write of the claim's name into the pod's status is the update that queues them.
- Gang members (spec.schedulingGroup, `scheduler.gangs.tracker`): PreEnqueue holds a member back,
  like a gated pod, until its PodGroup exists, is valid and at least minCount of its pods exist
  (`gang_waiting(pod, message)` is told once per hold); then every held member is queued
  together. `PodGroupHandler` keeps the PodGroups and reports invalid ones (Event + log line).
- PriorityClasses and PodDisruptionBudgets have their own stores (reclaim policy,
  `scheduler.victims.pdb`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from scheduler.core.queue import IN_FLIGHT, UNSCHEDULABLE, SchedulingQueue
from scheduler.gangs.tracker import GangTracker, PodGroupInfo, gang_key, parse_pod_group
from scheduler.kube.events import WARNING, EventRecorder, ObjectRef
from scheduler.model.fields import sorted_errors
from scheduler.model.objects import NodeInfo, PodInfo, parse_node, parse_pod, pod_ref
from scheduler.state.cache import ClusterCache
from scheduler.state.context import SchedulerContext

log = structlog.get_logger("gpu-scheduler.core.handlers")


def _room_changed(old: NodeInfo | None, new: NodeInfo) -> bool:
    if old is None:
        return True
    return (
        old.unschedulable != new.unschedulable
        or old.taints != new.taints
        or old.labels != new.labels
        or old.mig != new.mig
        or old.topology != new.topology
        or bool((old.allocatable != new.allocatable).any())
    )


def _node_fields(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What scheduling reads from a Node; kubelet/kwok heartbeats change none of it."""
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        metadata.get("labels"),
        metadata.get("annotations"),
        obj.get("spec"),
        status.get("allocatable"),
    )


class NodeHandler:
    """Informer handler for Nodes."""

    def __init__(
        self,
        cache: ClusterCache,
        queue: SchedulingQueue[PodInfo],
        recorder: EventRecorder | None,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.recorder = recorder
        self._reported: dict[str, str] = {}

    def on_add(self, obj: Mapping[str, Any]) -> None:
        node = parse_node(obj)
        if not node.name:
            return
        old = self.cache.nodes.get(node.name)
        self.cache.add_or_update_node(node)
        self._report(node, obj)
        if _room_changed(old, node):
            self.queue.move_all_to_active_or_backoff("NodeAdd" if old is None else "NodeUpdate")

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if _node_fields(old) == _node_fields(new):
            return  # a heartbeat (conditions, images, ...): nothing the filters read changed
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self.cache.remove_node(name)
        self._reported.pop(name, None)

    def _report(self, node: NodeInfo, obj: Mapping[str, Any]) -> None:
        problems = sorted_errors(node.errors)
        if not problems:
            self._reported.pop(node.name, None)
            return
        if self._reported.get(node.name) == problems:
            return
        self._reported[node.name] = problems
        log.warning("node_invalid_fields", node=node.name, errors=problems)
        if self.recorder is not None:
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            ref = ObjectRef("Node", node.name, "", uid)
            self.recorder.emit(ref, WARNING, "InvalidNodeTopology", "Scheduling", problems)


def _finished(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _same_spec(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two versions of a pending pod differ only in status and bookkeeping metadata
    (resourceVersion, managedFields), as kube-scheduler's check for a real pod update; the
    claims the resourceclaim controller records in `status.resourceClaimStatuses` count as a
    change (kube-scheduler's UpdatePodGeneratedResourceClaim event)."""

    def relevant(obj: Mapping[str, Any]) -> tuple[Any, ...]:
        metadata = obj.get("metadata") or {}
        return (
            obj.get("spec"),
            metadata.get("labels"),
            metadata.get("annotations"),
            metadata.get("deletionTimestamp"),
            (obj.get("status") or {}).get("resourceClaimStatuses"),
        )

    return relevant(old) == relevant(new)


def waits_for_claims(pod: PodInfo) -> bool:
    """Whether a claim the pod's template makes is not created yet (`PodClaims.waiting`)."""
    return pod.resource_claims is not None and bool(pod.resource_claims.waiting)


def _shows_gated(obj: Mapping[str, Any]) -> bool:
    """Whether the pod already has PodScheduled=False, reason SchedulingGated (the API server
    sets it when a gated pod is created): then there is nothing to patch."""
    conditions = (obj.get("status") or {}).get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping)
        and c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "SchedulingGated"
        for c in conditions
    )


class PodHandler:
    """Informer handler for Pods of every namespace."""

    def __init__(
        self,
        context: SchedulerContext,
        queue: SchedulingQueue[PodInfo],
        gone: Callable[[str, str], None] | None = None,
        gated: Callable[[PodInfo], None] | None = None,
        gangs: GangTracker | None = None,
        gang_waiting: Callable[[PodInfo, str], None] | None = None,
    ) -> None:
        """Pods go into `context.cache` and, when pending for `context.scheduler_name`, into
        `queue`; `gone`, `gated` and `gang_waiting` are told as the module docstring says, and
        `gangs` (None: no gang scheduling) sees every pod."""
        self.cache = context.cache
        self.queue = queue
        self.scheduler_name = context.scheduler_name
        self.gone = gone
        self.affinity_waiters: set[str] = set()
        """Our pending pods with required pod affinity: a pod bound by anyone may be the one
        they wait for, so its arrival retries the unschedulable pods (see `_pod_arrived`)."""
        self.gated = gated
        self.gated_keys: set[str] = set()
        """Keys of our pending pods held back by scheduling gates (counted as pending pods in
        the `gated` queue)."""
        self.gangs = gangs
        self.gang_waiting = gang_waiting

    def _ours_and_pending(self, pod: PodInfo) -> bool:
        return (
            pod.scheduler_name == self.scheduler_name
            and not pod.bound
            and not pod.terminating
            and not pod.finished
        )

    def on_add(self, obj: Mapping[str, Any]) -> PodInfo:
        """Count, queue or hold the pod as the module docstring says; returns it parsed."""
        pod = parse_pod(obj)
        self.gated_keys.discard(pod.key)
        if self.gangs is not None:
            self.gangs.pod_seen(pod, self._ours_and_pending(pod) and not pod.scheduling_gates)
        if pod.bound:
            was_counted = pod.key in self.cache.pods
            was_assumed = self.cache.is_assumed(pod.key)
            self.cache.add_pod(pod)
            self.queue.delete(pod.key)
            self.affinity_waiters.discard(pod.key)
            if self.gone is not None:
                self.gone(pod.uid, pod.key)
            if was_counted and not pod.holds_resources:
                self.queue.move_all_to_active_or_backoff("PodFinished")
            elif pod.holds_resources and (not was_counted or was_assumed):
                self._pod_arrived()
        elif self._ours_and_pending(pod) and pod.scheduling_gates:
            # PreEnqueue: a gated pod is not queued; removing its last gate is an update that
            # queues it at once (below).
            self.queue.delete(pod.key)
            self.gated_keys.add(pod.key)
            if self.gated is not None and not _shows_gated(obj):
                self.gated(pod)
        elif self._ours_and_pending(pod) and self.gangs is not None and pod.pod_group:
            message = self.gangs.waiting(gang_key(pod))
            if message:  # PreEnqueue: held back like a gated pod until the gang may run
                self.queue.delete(pod.key)
                if pod.key not in self.gangs.held:
                    self.gangs.held.add(pod.key)
                    if self.gang_waiting is not None:
                        self.gang_waiting(pod, message)
            elif pod.key in self.gangs.held:
                self.gangs.held.discard(pod.key)
                self.queue.add(pod.key, pod.priority, pod)
            elif pod.key in self.queue:
                self.queue.update(pod.key, pod.priority, pod)
            else:
                self.queue.add(pod.key, pod.priority, pod)
        elif self._ours_and_pending(pod) and waits_for_claims(pod):
            # PreEnqueue (DynamicResources): the resourceclaim controller has not made the claim
            # of a template yet; writing its name into the pod's status is the update that
            # queues the pod. Not tried, no event, as kube-scheduler.
            self.queue.delete(pod.key)
        elif self._ours_and_pending(pod):
            if pod.pod_affinity is not None and pod.pod_affinity.required_affinity:
                self.affinity_waiters.add(pod.key)
            if pod.key in self.queue:
                self.queue.update(pod.key, pod.priority, pod)
            else:
                self.queue.add(pod.key, pod.priority, pod)
        else:
            self.queue.delete(pod.key)
            self.affinity_waiters.discard(pod.key)
        if self.gangs is not None and not self._ours_and_pending(pod):
            self.gangs.held.discard(pod.key)
        if pod.pod_group:
            self.release_gang(gang_key(pod))
        return pod

    def release_gang(self, gang: str) -> None:
        """Queue every held member of `gang` together once it may run (PreEnqueue passed)."""
        if self.gangs is None or self.gangs.waiting(gang):
            return
        for key, member in self.gangs.pending(gang).items():
            if key in self.gangs.held:
                self.gangs.held.discard(key)
                self.queue.add(key, member.priority, member)

    def hold_gang(self, gang: str) -> None:
        """Take the queued members of `gang` back out of the queue while it may not run (its
        PodGroup went away or became invalid); members in flight finish their cycle."""
        if self.gangs is None:
            return
        message = self.gangs.waiting(gang)
        if not message:
            return
        for key, member in self.gangs.pending(gang).items():
            if key in self.gangs.held or self.queue.where(key) in (None, IN_FLIGHT):
                continue
            self.queue.delete(key)
            self.gangs.held.add(key)
            if self.gang_waiting is not None:
                self.gang_waiting(member, message)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> PodInfo | None:
        """As `on_add` for a change that matters; None (nothing parsed) when only status or
        bookkeeping changed (our condition, the kubelet's status)."""
        if _same_spec(old, new) and _finished(old) == _finished(new):
            return None
        return self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        pod = pod_ref(obj)  # identity and gang only: a deleted pod is not parsed in full
        self.queue.delete(pod.key)
        self.affinity_waiters.discard(pod.key)
        self.gated_keys.discard(pod.key)
        if self.gangs is not None:
            self.gangs.pod_gone(pod.key, gang_key(pod))
        if self.gone is not None:
            self.gone(pod.uid, pod.key)
        if pod.key in self.cache.pods:
            self.cache.remove_pod(pod.key)
            self.queue.move_all_to_active_or_backoff("PodDelete")

    def _pod_arrived(self) -> None:
        """A pod showed up bound (bound by anyone, or our assumed pod confirmed): retry the
        unschedulable pods when one of them has required pod affinity, which that pod may
        satisfy (kube-scheduler's queueing hint for an assigned pod's add)."""
        if any(self.queue.where(k) == UNSCHEDULABLE for k in self.affinity_waiters):
            self.queue.move_all_to_active_or_backoff("PodAdd")


class PodGroupHandler:
    """Informer handler for PodGroups (scheduling.k8s.io/v1beta1): keeps `gangs` current, reports
    an invalid PodGroup (Event on it + log line, once per distinct problem) and releases the
    members a new or changed PodGroup lets run."""

    def __init__(
        self, gangs: GangTracker, pods: PodHandler, recorder: EventRecorder | None
    ) -> None:
        self.gangs = gangs
        self.pods = pods
        self.recorder = recorder
        self._reported: dict[str, str] = {}

    parse: Callable[[Mapping[str, Any]], PodGroupInfo] = staticmethod(parse_pod_group)
    """The parser of this handler's PodGroup API (a subclass serves another)."""
    api_version = "scheduling.k8s.io/v1beta1"
    """The apiVersion its Events name the PodGroup with."""

    def on_add(self, obj: Mapping[str, Any]) -> None:
        group = self.parse(obj)
        self.gangs.set_group(group)
        problems = sorted_errors(group.errors)
        if not problems:
            self._reported.pop(group.key, None)
        elif self._reported.get(group.key) != problems:
            self._reported[group.key] = problems
            log.warning("podgroup_invalid_fields", podgroup=group.key, errors=problems)
            if self.recorder is not None:
                ref = ObjectRef(
                    "PodGroup", group.name, group.namespace, group.uid, self.api_version
                )
                self.recorder.emit(ref, WARNING, "InvalidPodGroup", "Scheduling", problems)
        self.pods.release_gang(group.key)
        self.pods.hold_gang(group.key)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if old.get("spec") != new.get("spec"):
            self.on_add(new)
        else:  # status only (our own condition patches): keep the condition current
            self.gangs.set_group(self.parse(new))

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        group = self.parse(obj)
        self.gangs.remove_group(group.key)
        self._reported.pop(group.key, None)
        self.pods.hold_gang(group.key)
