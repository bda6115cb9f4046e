"""Informer handler for scheduler-plugins' coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1).

They feed the same gang model as the v1beta1 PodGroups (`scheduler.gangs.tracker`): a pod labelled
`scheduling.x-k8s.io/pod-group: <name>` is a member, `spec.minMember` is the gang's minCount. Their
keys carry the `scheduling.x-k8s.io/` prefix, so they never collide with v1beta1 gangs. The status
of these PodGroups is not written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.core.handlers import PodGroupHandler
from scheduler.gangs.tracker import COSCHEDULING_SOURCE, PodGroupInfo, parse_coscheduling_group


class CoschedulingGroupHandler(PodGroupHandler):
    """`PodGroupHandler` for the v1alpha1 PodGroups: same bookkeeping, own parser; a change of
    status alone is ignored (their status is not ours to track)."""

    parse: Callable[[Mapping[str, Any]], PodGroupInfo] = staticmethod(parse_coscheduling_group)
    api_version = COSCHEDULING_SOURCE

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if old.get("spec") != new.get("spec"):
            self.on_add(new)
