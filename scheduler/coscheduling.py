"""Informer handler for scheduler-plugins' coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1).

They feed the same gang model as the v1beta1 PodGroups (`scheduler.gangs`): a pod labelled
`scheduling.x-k8s.io/pod-group: <name>` is a member, `spec.minMember` is the gang's minCount. Their
keys carry the `scheduling.x-k8s.io/` prefix, so they never collide with v1beta1 gangs. The status
of these PodGroups is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from scheduler.gangs import COSCHEDULING_SOURCE, parse_coscheduling_group
from scheduler.handlers import PodGroupHandler
from scheduler.kube.events import WARNING, ObjectRef
from scheduler.objects import sorted_errors

log = structlog.get_logger("gpu-scheduler.coscheduling")


class CoschedulingGroupHandler(PodGroupHandler):
    """`PodGroupHandler` for the v1alpha1 PodGroups: same bookkeeping, own parser."""

    def on_add(self, obj: Mapping[str, Any]) -> None:
        group = parse_coscheduling_group(obj)
        self.gangs.set_group(group)
        problems = sorted_errors(group.errors)
        if not problems:
            self._reported.pop(group.key, None)
        elif self._reported.get(group.key) != problems:
            self._reported[group.key] = problems
            log.warning("podgroup_invalid_fields", podgroup=group.key, errors=problems)
            if self.recorder is not None:
                ref = ObjectRef(
                    "PodGroup", group.name, group.namespace, group.uid, COSCHEDULING_SOURCE
                )
                self.recorder.emit(ref, WARNING, "InvalidPodGroup", "Scheduling", problems)
        self.pods.release_gang(group.key)
        self.pods.hold_gang(group.key)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if old.get("spec") != new.get("spec"):
            self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        group = parse_coscheduling_group(obj)
        self.gangs.remove_group(group.key)
        self._reported.pop(group.key, None)
        self.pods.hold_gang(group.key)
