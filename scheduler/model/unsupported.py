"""Pod fields that kube-scheduler's default plugins act on and gpu-scheduler does not implement.

A pod that uses one is not scheduled: placing it while ignoring the field would silently drop a
constraint the user asked for. The cycle reports it like a PreFilter rejection of kube-scheduler
(FailedScheduling event and PodScheduled=False, reason Unschedulable):

    0/8 nodes are available: gpu-scheduler does not support generic ephemeral volumes
    (spec.volumes[*].ephemeral).

`UNSUPPORTED` is the one list of such fields (docs/compatibility.md explains each row); a plugin
that implements a field removes its row. A field counts as used when its value is present and
not empty (`{}`, `[]`, `null` and absent are unused, as the API treats them). Paths are dotted
JSON paths below the pod; `[*]` steps into every item of a list.

This module imports nothing from the scheduler: `scheduler.model.objects` calls `unsupported_fields`
while parsing (into `PodInfo.unsupported`), the cycle calls `unsupported_message` and the
explain tool `unsupported_reasons`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

NAME = "Unsupported"


@dataclass(frozen=True)
class UnsupportedField:
    path: str
    """Dotted path below the pod, e.g. "spec.volumes[*].ephemeral"."""
    feature: str
    """What users call it, e.g. "generic ephemeral volumes"."""
    plugin: str
    """The kube-scheduler plugin that acts on it."""


UNSUPPORTED: tuple[UnsupportedField, ...] = (
    UnsupportedField(
        "spec.volumes[*].ephemeral",
        "generic ephemeral volumes",
        "VolumeBinding, VolumeZone, NodeVolumeLimits",
    ),
    UnsupportedField(
        "spec.volumes[*].gcePersistentDisk", "GCE persistent disks", "VolumeRestrictions"
    ),
    UnsupportedField(
        "spec.volumes[*].awsElasticBlockStore", "AWS EBS volumes", "VolumeRestrictions"
    ),
    UnsupportedField("spec.volumes[*].rbd", "RBD volumes", "VolumeRestrictions"),
    UnsupportedField("spec.volumes[*].iscsi", "iSCSI volumes", "VolumeRestrictions"),
)


def _values(node: object, steps: list[str]) -> Iterator[object]:
    """Every value at `steps` below `node` (several when a step is a list wildcard)."""
    if not steps:
        yield node
        return
    step, rest = steps[0], steps[1:]
    wildcard = step.endswith("[*]")
    key = step[:-3] if wildcard else step
    if not isinstance(node, Mapping):
        return
    child = node.get(key)
    if wildcard:
        for item in child if isinstance(child, list) else ():
            yield from _values(item, rest)
    elif child is not None:
        yield from _values(child, rest)


def _used(value: object) -> bool:
    return value is not None and value != {} and value != [] and value is not False


def unsupported_fields(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths of `UNSUPPORTED` that the pod (its JSON) uses, in table order."""
    return tuple(
        row.path
        for row in UNSUPPORTED
        if any(_used(value) for value in _values(pod, row.path.split(".")))
    )


def unsupported_reasons(paths: tuple[str, ...]) -> list[str]:
    """One "gpu-scheduler does not support <feature> (<path>)" per path."""
    features = {row.path: row.feature for row in UNSUPPORTED}
    return [f"gpu-scheduler does not support {features.get(path, path)} ({path})" for path in paths]


def unsupported_message(paths: tuple[str, ...], node_count: int) -> str:
    """The FailedScheduling message for a pod using the fields at `paths` (non-empty)."""
    return f"0/{node_count} nodes are available: {'; '.join(unsupported_reasons(paths))}."
