"""PodDisruptionBudgets as reclaim reads them: which budgets guard a pod, and how many
disruptions each allows now.

The informer handler keeps, per budget, its namespace, its label selector, its
`status.disruptionsAllowed` and the pods it already counts as disrupted (`status.disruptedPods`).
A pod is guarded by a budget of its own namespace whose selector matches its labels, as
kube-scheduler's preemption reads them: a budget with an empty or missing selector, or one that
cannot be read, guards nothing; a pod the budget already lists as disrupted does not count
against it again. Reclaim then counts its victims against `allowed()` with
`reclaim.policy.budget_violations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger("gpu-scheduler.victims.pdb")

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class Requirement:
    """One `matchExpressions` entry of a label selector."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # NotIn


@dataclass(frozen=True)
class Budget:
    """One PodDisruptionBudget, parsed."""

    key: str
    """namespace/name."""
    namespace: str
    requirements: tuple[Requirement, ...]
    """ANDed; never empty (a budget with an empty selector is not kept)."""
    disruptions_allowed: int
    disrupted_pods: frozenset[str]
    """Names of pods the budget already counts as disrupted."""

    def guards(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        return (
            namespace == self.namespace
            and name not in self.disrupted_pods
            and all(r.matches(labels) for r in self.requirements)
        )


def parse_selector(selector: object) -> tuple[Requirement, ...] | None:
    """`matchLabels` and `matchExpressions` as requirements; None when the selector is missing,
    empty or malformed (such a budget is ignored, as kube-scheduler ignores it)."""
    if not isinstance(selector, Mapping):
        return None
    requirements: list[Requirement] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        return None
    for key, value in sorted(match_labels.items()):
        requirements.append(Requirement(str(key), "In", frozenset({str(value)})))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        return None
    for raw in expressions:
        if not isinstance(raw, Mapping) or raw.get("operator") not in _OPERATORS:
            return None
        values = raw.get("values") or []
        if not isinstance(values, list):
            return None
        requirements.append(
            Requirement(
                str(raw.get("key") or ""), str(raw["operator"]), frozenset(map(str, values))
            )
        )
    return tuple(requirements) or None


def parse_budget(obj: Mapping[str, Any]) -> Budget | None:
    """A PodDisruptionBudget's JSON as a Budget; None when it guards nothing."""
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    requirements = parse_selector((obj.get("spec") or {}).get("selector"))
    if requirements is None or not name:
        return None
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    disrupted = status.get("disruptedPods") or {}
    return Budget(
        key=f"{namespace}/{name}",
        namespace=namespace,
        requirements=requirements,
        disruptions_allowed=allowed if isinstance(allowed, int) and allowed > 0 else 0,
        disrupted_pods=frozenset(map(str, disrupted))
        if isinstance(disrupted, Mapping)
        else frozenset(),
    )


class PdbStore:
    """The PodDisruptionBudgets of every namespace; also their informer handler."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, Budget]] = {}

    def budgets_of(self, namespace: str, name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """Keys of the budgets guarding the pod `namespace/name` with `labels`, sorted."""
        budgets = self._by_namespace.get(namespace, {})
        return tuple(sorted(k for k, b in budgets.items() if b.guards(namespace, name, labels)))

    def allowed(self) -> dict[str, int]:
        """Disruptions each budget allows now (`status.disruptionsAllowed`), by key."""
        return {
            key: budget.disruptions_allowed
            for budgets in self._by_namespace.values()
            for key, budget in budgets.items()
        }

    def __len__(self) -> int:
        return sum(len(budgets) for budgets in self._by_namespace.values())

    # informer handler
    def on_add(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        key = f"{namespace}/{metadata.get('name') or ''}"
        budget = parse_budget(obj)
        budgets = self._by_namespace.setdefault(namespace, {})
        if budget is None:
            budgets.pop(key, None)
            log.debug("pdb_ignored", pdb=key, reason="empty or unreadable selector")
        else:
            budgets[key] = budget
        if not budgets:
            del self._by_namespace[namespace]

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        budgets = self._by_namespace.get(namespace)
        if budgets is not None:
            budgets.pop(f"{namespace}/{metadata.get('name') or ''}", None)
            if not budgets:
                del self._by_namespace[namespace]
