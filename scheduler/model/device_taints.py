"""Device taints and the tolerations of requests (resource.k8s.io/v1): the records, their
readers, and whether a toleration tolerates a taint.

Taints come from a ResourceSlice's devices or from DeviceTaintRules
(`scheduler.model.device_classes`); tolerations from a claim's requests and are copied into its
allocation results. The readers check what `validateDeviceTaint` and `validateDeviceToleration`
(k8s.io/kubernetes@v1.37.2 pkg/apis/resource/validation/validation.go) check, and `tolerates` is
`ToleratesTaint` (k8s.io/dynamic-resource-allocation@v0.37.2 resourceclaim/devicetoleration.go).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.model.dra_fields import (
    echo,
    int_at,
    label_name_problem,
    label_value_problem,
    list_at,
    report,
    text_at,
)
from scheduler.model.fields import FieldError, object_at, parse_timestamp

TOLERATIONS_MAX = 16  # DeviceTolerationsMaxLength (k8s.io/api@v0.37.2 resource/v1/types.go)
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
"""Device taint effects of the API; a stored object may carry a newer one, which consumers treat
like None (types.go, DeviceTaint.Effect)."""


@dataclass(frozen=True)
class DeviceTaint:
    """A taint on a device (from its slice or a DeviceTaintRule)."""

    key: str
    value: str
    effect: str
    """None, NoSchedule or NoExecute; a newer effect is kept and means None."""
    time_added: datetime | None = None

    @property
    def blocks_allocation(self) -> bool:
        """Only NoSchedule and NoExecute keep a device from a claim that does not tolerate them
        (`taintPreventsAllocation`, structured/internal/incubating/allocator_incubating.go)."""
        return self.effect in ("NoSchedule", "NoExecute")


def taint_at(raw: object, where: str, errors: list[FieldError]) -> DeviceTaint | None:
    """A DeviceTaint (`validateDeviceTaint`): key a label name, value a label value, effect
    required; None when the key or the effect is missing or bad."""
    item = object_at(raw, where, errors)
    key = text_at(
        item.get("key"), f"{where}.key", errors, required=True, problem=label_name_problem
    )
    value = text_at(item.get("value"), f"{where}.value", errors, problem=label_value_problem)
    effect = text_at(item.get("effect"), f"{where}.effect", errors, required=True)
    added = item.get("timeAdded")
    time_added = parse_timestamp(added)
    if added is not None and time_added is None:
        report(errors, f"{where}.timeAdded", f"must be a timestamp, got {echo(added)}")
    if not key or not effect:
        return None
    return DeviceTaint(key, value, effect, time_added)


@dataclass(frozen=True)
class DeviceToleration:
    """A request's toleration of device taints."""

    key: str
    """"" with operator Exists tolerates every taint."""
    operator: str
    """Equal or Exists."""
    value: str
    effect: str
    """"" matches every effect."""
    toleration_seconds: int | None = None


def tolerations_at(
    raw: object, where: str, errors: list[FieldError]
) -> tuple[DeviceToleration, ...]:
    """A `tolerations` list (at most 16, `validateDeviceToleration`); a bad entry is left out."""
    found = []
    for index, item in enumerate(list_at(raw, where, errors, TOLERATIONS_MAX)):
        at = f"{where}[{index}]"
        before = len(errors)
        entry = object_at(item, at, errors)
        key = text_at(entry.get("key"), f"{at}.key", errors, problem=label_name_problem)
        operator = text_at(entry.get("operator"), f"{at}.operator", errors) or "Equal"
        value = text_at(entry.get("value"), f"{at}.value", errors, problem=label_value_problem)
        effect = text_at(entry.get("effect"), f"{at}.effect", errors)
        seconds = int_at(
            entry.get("tolerationSeconds"), f"{at}.tolerationSeconds", errors, minimum=-(2**63)
        )
        if operator not in ("Equal", "Exists"):
            report(errors, f"{at}.operator", f"must be Equal or Exists, got {echo(operator)}")
        elif operator == "Exists" and value:
            report(errors, f"{at}.value", "must be empty for operator Exists")
        if effect and effect not in TAINT_EFFECTS:
            report(
                errors,
                f"{at}.effect",
                f"must be one of {', '.join(TAINT_EFFECTS)}, got {echo(effect)}",
            )
        if len(errors) == before:
            found.append(DeviceToleration(key, operator, value, effect, seconds))
    return tuple(found)


def tolerates(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """`ToleratesTaint`: the effect (if set) and the key (if set) match, and the value equals
    the taint's (operator Equal) or does not matter (Exists)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"
