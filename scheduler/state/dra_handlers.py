"""Informer handlers that feed DeviceClasses, ResourceSlices, ResourceClaims and
DeviceTaintRules into the `DraStore`, and retry the unschedulable pods when something the
DynamicResources plugin reads changed (kube-scheduler's events for these kinds: class and slice
added or updated, claim added, updated or deleted, taint rule changed).

An object with malformed fields is logged once per distinct problem; a claim with errors is kept
(the pods using it are told, `scheduler.plugins.dynamic_resources`), a slice with errors makes
its pool invalid (`scheduler.model.pools`), a class with errors is kept and its selectors fail
like any other (they are checked when used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class, parse_device_taint_rule
from scheduler.model.devices import parse_resource_slice
from scheduler.model.fields import FieldError
from scheduler.state.dra import DraStore

log = structlog.get_logger("gpu-scheduler.state.dra")

CLASS_EVENT = "DeviceClassChange"
SLICE_EVENT = "ResourceSliceChange"
CLAIM_EVENT = "ResourceClaimChange"
TAINT_RULE_EVENT = "DeviceTaintRuleChange"


class Requeue(Protocol):
    def move_all_to_active_or_backoff(self, event: str) -> int: ...


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
    event = CLAIM_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        claim = parse_resource_claim(obj)
        self._report(claim.key, claim.errors)
        return self.store.put_claim(claim)

    def _drop(self, key: str) -> bool:
        return self.store.drop_claim(key)


class DeviceTaintRuleHandler(_DraHandler):
    event = TAINT_RULE_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        rule = parse_device_taint_rule(obj)
        self._report(rule.name, rule.errors)
        return self.store.put_taint_rule(rule.name, rule)

    def _drop(self, key: str) -> bool:
        return self.store.drop_taint_rule(key)
