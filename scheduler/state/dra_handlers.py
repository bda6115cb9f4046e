"""Informer handlers that feed DeviceClasses, ResourceSlices, ResourceClaims and
DeviceTaintRules into the `DraStore`, and retry the unschedulable pods when something the
DynamicResources plugin reads changed (kube-scheduler's events for these kinds: class and slice
added or updated, claim added, updated or deleted, taint rule changed). A claim change moves only
the pods it may help (`claim_hint`, kube-scheduler's queueing hint for claims): in a burst every
claim is written twice or three times, and moving every waiting pod on each write retried pods
that wait for their own claim to be created hundreds of times.

An object with malformed fields is logged once per distinct problem; a claim with errors is kept
(the pods using it are told, `scheduler.plugins.dynamic_resources`), a slice with errors makes
its pool invalid (`scheduler.model.pools`), a class with errors is kept and its selectors fail
like any other (they are checked when used).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from scheduler.model.claims import CLAIM_NOT_CREATED, ResourceClaim, parse_resource_claim
from scheduler.model.device_classes import parse_device_class, parse_device_taint_rule
from scheduler.model.devices import parse_resource_slice
from scheduler.model.fields import FieldError
from scheduler.model.objects import PodInfo
from scheduler.state.dra import DraStore

log = structlog.get_logger("gpu-scheduler.state.dra")

CLASS_EVENT = "DeviceClassChange"
SLICE_EVENT = "ResourceSliceChange"
CLAIM_EVENT = "ResourceClaimChange"
TAINT_RULE_EVENT = "DeviceTaintRuleChange"


class Queued(Protocol):
    """What a hint reads of a pod the queue holds (`scheduler.core.queue.QueuedPod`)."""

    @property
    def obj(self) -> PodInfo: ...
    @property
    def unschedulable_reasons(self) -> tuple[str, ...]: ...
    @property
    def unschedulable_plugins(self) -> frozenset[str]: ...


class Requeue(Protocol):
    def move_all_to_active_or_backoff(self, event: str) -> int: ...
    def move_matching(self, event: str, wanted: Callable[[Queued], bool]) -> int: ...


DYNAMIC_RESOURCES = "DynamicResources"
"""The plugin whose rejections claim events may lift (`scheduler.plugins.dynamic_resources`)."""


def claim_hint(old: ResourceClaim | None, new: ResourceClaim | None) -> Callable[[Queued], bool]:
    """Which unschedulable pods a claim change may help (kube-scheduler's
    `isSchedulableAfterClaimChange`, k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/
    dynamicresources/dynamicresources.go): only pods DynamicResources rejected; all of them when
    devices were freed (the claim deallocated, or deleted while allocated); else those that use
    the claim (by name, or as the claim made for their extended resources), unless they wait for
    a claim of a template to be created (their own update brings them back)."""
    freed = (
        old is not None and old.allocation is not None and (new is None or new.allocation is None)
    )
    claim = new or old
    assert claim is not None

    def wanted(queued: Queued) -> bool:
        if queued.unschedulable_plugins and DYNAMIC_RESOURCES not in queued.unschedulable_plugins:
            return False
        if freed:
            return True
        pod = queued.obj
        if any(CLAIM_NOT_CREATED in reason for reason in queued.unschedulable_reasons):
            return False
        if pod.namespace != claim.namespace:
            return False
        if claim.controller is not None and claim.extended and claim.controller.uid == pod.uid:
            return True
        return pod.resource_claims is not None and claim.name in pod.resource_claims.names

    return wanted


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    name = str(metadata.get("name") or "")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else name


class _DraHandler:
    event = ""

    def __init__(self, store: DraStore, queue: Requeue | None = None) -> None:
        self.store = store
        self.queue = queue
        self._reported: dict[str, tuple[FieldError, ...]] = {}

    def _put(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _drop(self, key: str) -> bool:
        raise NotImplementedError

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._changed(self._put(obj))

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._changed(self._put(new))

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        self._reported.pop(key, None)
        self._changed(self._drop(key))

    def _changed(self, changed: bool) -> None:
        if changed and self.queue is not None:
            self.queue.move_all_to_active_or_backoff(self.event)

    def _report(self, key: str, errors: tuple[FieldError, ...]) -> None:
        if errors and self._reported.get(key) != errors:
            log.warning(
                "dra_object_invalid",
                kind=self.event,
                object=key,
                errors=[str(e) for e in errors],
            )
        if errors:
            self._reported[key] = errors
        else:
            self._reported.pop(key, None)


class DeviceClassHandler(_DraHandler):
    event = CLASS_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        device_class = parse_device_class(obj)
        self._report(device_class.name, device_class.errors)
        return self.store.put_class(device_class)

    def _drop(self, key: str) -> bool:
        return self.store.drop_class(key)


class ResourceSliceHandler(_DraHandler):
    event = SLICE_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        resource_slice = parse_resource_slice(obj)
        self._report(resource_slice.name, resource_slice.errors)
        return self.store.put_slice(resource_slice)

    def _drop(self, key: str) -> bool:
        return self.store.drop_slice(key)


class ResourceClaimHandler(_DraHandler):
    """Claims: the pods a change may help move (`claim_hint`), not every unschedulable pod."""

    event = CLAIM_EVENT

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._claim_changed(self.store.claims.get(_key(obj)), obj)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._claim_changed(self.store.claims.get(_key(new)), new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        self._reported.pop(key, None)
        before = self.store.claims.get(key)
        if self.store.drop_claim(key) and self.queue is not None and before is not None:
            self.queue.move_matching(self.event, claim_hint(before, None))

    def _claim_changed(self, before: ResourceClaim | None, obj: Mapping[str, Any]) -> None:
        claim = parse_resource_claim(obj)
        self._report(claim.key, claim.errors)
        if self.store.put_claim(claim) and self.queue is not None:
            if (
                before is not None
                and before.allocation == claim.allocation
                and (before.reserved_for == claim.reserved_for)
            ):
                return  # the status is as before (a finalizer, an annotation): nobody helped
            self.queue.move_matching(self.event, claim_hint(before, claim))


class DeviceTaintRuleHandler(_DraHandler):
    event = TAINT_RULE_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        rule = parse_device_taint_rule(obj)
        self._report(rule.name, rule.errors)
        return self.store.put_taint_rule(rule.name, rule)

    def _drop(self, key: str) -> bool:
        return self.store.drop_taint_rule(key)
