"""`spec.preemptionPolicy` of a pod, read as kube-scheduler reads it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

PREEMPT_NEVER = "Never"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)


def read_preemption_policy(spec: Mapping[str, object], report: Callable[[str, str], None]) -> str:
    """`spec.preemptionPolicy` (PreemptLowerPriority when absent); an unknown value is reported
    through `report(path, message)` and read as Never, the cautious side: a pod whose policy
    cannot be read never evicts anyone (it is not scheduled either: its errors stop it)."""
    raw = spec.get("preemptionPolicy")
    if raw is None or raw == "":
        return PREEMPT_LOWER_PRIORITY
    if raw in PREEMPTION_POLICIES:
        return str(raw)
    shown = str(raw)
    shown = shown if len(shown) <= 64 else shown[:64] + "..."
    report(
        "spec.preemptionPolicy",
        f"must be one of {', '.join(PREEMPTION_POLICIES)}, got {shown!r}",
    )
    return PREEMPT_NEVER
