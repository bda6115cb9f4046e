"""Pod topology spread constraints (`spec.topologySpreadConstraints`), parsed and validated.

`parse_spread_constraints(spec, labels, errors)` turns the pod's list into `SpreadConstraint`s
with Kubernetes' defaults (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore, minDomains 1) and
`matchLabelKeys` already merged into the selector from the pod's own labels (a key the pod does
not carry adds nothing), as kube-scheduler does. Invalid entries are left out and reported as a
`FieldError` naming the field, e.g. `spec.topologySpreadConstraints[0].maxSkew`; the pod then
is not scheduled until fixed (see `scheduler.model.objects`).

A `PodSelector` is a Kubernetes label selector over pod labels: matchLabels and matchExpressions
(In, NotIn, Exists, DoesNotExist) ANDed. A constraint without labelSelector selects no pod; an
empty selector (`{}`) selects every pod.

This module imports nothing from the rest of the scheduler (`scheduler.model.objects` imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
FIELD = "spec.topologySpreadConstraints"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_ECHO = 64
"""Longest echo of a user's value in an error message."""


E = TypeVar("E")
"""The caller's error type (`scheduler.model.objects.FieldError`), built by `make_error(field,
msg)`."""


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        inside = self.key in labels and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class PodSelector:
    """A label selector; `nothing` is the absent selector, which selects no pod."""

    requirements: tuple[LabelRequirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """`{}`: selects every pod (kube-scheduler then counts no existing pod; see plugin)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(requirement.matches(labels) for requirement in self.requirements)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule or ScheduleAnyway
    selector: PodSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    @property
    def hard(self) -> bool:
        return self.when_unsatisfiable == DO_NOT_SCHEDULE


def _echo(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 3] + "..."


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _selector(
    raw: object, where: str, errors: list[E], make_error: Callable[[str, str], E]
) -> PodSelector | None:
    """The selector at `where`; None (and an error) when malformed."""
    if raw is None:
        return PodSelector(nothing=True)
    if not isinstance(raw, Mapping):
        errors.append(make_error(where, f"must be an object, got {type(raw).__name__}"))
        return None
    requirements: list[LabelRequirement] = []
    match_labels = raw.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, Mapping):
            errors.append(make_error(f"{where}.matchLabels", "must be an object"))
            return None
        for key, value in sorted(match_labels.items()):
            requirements.append(LabelRequirement(str(key), "In", (str(value),)))
    expressions = raw.get("matchExpressions")
    if expressions is not None and not isinstance(expressions, list):
        errors.append(make_error(f"{where}.matchExpressions", "must be a list"))
        return None
    for index, item in enumerate(expressions or []):
        item_where = f"{where}.matchExpressions[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            errors.append(make_error(item_where, "needs a key and an operator"))
            return None
        operator = item.get("operator")
        values = item.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            errors.append(
                make_error(f"{item_where}.operator", f"unknown operator {_echo(operator)}")
            )
            return None
        if not isinstance(values, list):
            errors.append(make_error(f"{item_where}.values", "must be a list"))
            return None
        if operator in ("In", "NotIn") and not values:
            errors.append(make_error(f"{item_where}.values", f"{operator} needs values"))
            return None
        if operator in ("Exists", "DoesNotExist") and values:
            errors.append(make_error(f"{item_where}.values", f"{operator} takes no values"))
            return None
        requirements.append(
            LabelRequirement(item["key"], str(operator), tuple(str(v) for v in values))
        )
    return PodSelector(tuple(requirements))


def _constraint(
    raw: object,
    where: str,
    labels: Mapping[str, str],
    errors: list[E],
    make_error: Callable[[str, str], E],
) -> SpreadConstraint | None:
    if not isinstance(raw, Mapping):
        errors.append(make_error(where, f"must be an object, got {type(raw).__name__}"))
        return None
    found = len(errors)
    max_skew = raw.get("maxSkew")
    if not _is_int(max_skew) or max_skew <= 0:
        errors.append(make_error(f"{where}.maxSkew", f"must be > 0, got {_echo(max_skew)}"))
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        errors.append(make_error(f"{where}.topologyKey", f"must be a label key, got {_echo(key)}"))
    when = raw.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        errors.append(
            make_error(
                f"{where}.whenUnsatisfiable",
                f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}, got {_echo(when)}",
            )
        )
    min_domains = raw.get("minDomains")
    if min_domains is not None:
        if not _is_int(min_domains) or min_domains <= 0:
            errors.append(
                make_error(f"{where}.minDomains", f"must be > 0, got {_echo(min_domains)}")
            )
        elif when != DO_NOT_SCHEDULE:
            errors.append(
                make_error(f"{where}.minDomains", f"may only be set with {DO_NOT_SCHEDULE}")
            )
    policies: dict[str, str] = {}
    for name, default in (("nodeAffinityPolicy", HONOR), ("nodeTaintsPolicy", IGNORE)):
        value = raw.get(name)
        if value is None:
            policies[name] = default
        elif value in (HONOR, IGNORE):
            policies[name] = str(value)
        else:
            errors.append(
                make_error(f"{where}.{name}", f"must be {HONOR} or {IGNORE}, got {_echo(value)}")
            )
    selector = _selector(raw.get("labelSelector"), f"{where}.labelSelector", errors, make_error)
    keys = raw.get("matchLabelKeys")
    if keys is not None and (
        not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)
    ):
        errors.append(make_error(f"{where}.matchLabelKeys", "must be a list of label keys"))
    elif keys and selector is not None and selector.nothing:
        errors.append(make_error(f"{where}.matchLabelKeys", "needs a labelSelector"))
    if len(errors) > found or selector is None:
        return None
    assert isinstance(max_skew, int) and isinstance(key, str)  # checked above
    merged = [LabelRequirement(k, "In", (labels[k],)) for k in keys or [] if k in labels]
    if merged:
        selector = PodSelector(selector.requirements + tuple(merged))
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=str(when),
        selector=selector,
        min_domains=int(min_domains) if min_domains is not None else 1,
        node_affinity_policy=policies["nodeAffinityPolicy"],
        node_taints_policy=policies["nodeTaintsPolicy"],
    )


def parse_spread_constraints(
    spec: Mapping[str, Any],
    labels: Mapping[str, str],
    errors: list[E],
    make_error: Callable[[str, str], E],
) -> tuple[SpreadConstraint, ...]:
    """The valid constraints of `spec`; each invalid one adds `make_error(field, message)` to
    `errors`. Two constraints with the same topologyKey and whenUnsatisfiable are invalid, as
    the API server rules."""
    raw = spec.get("topologySpreadConstraints")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errors.append(make_error(FIELD, f"must be a list, got {type(raw).__name__}"))
        return ()
    found: list[SpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(raw):
        where = f"{FIELD}[{index}]"
        constraint = _constraint(item, where, labels, errors, make_error)
        if constraint is None:
            continue
        pair = (constraint.topology_key, constraint.when_unsatisfiable)
        if pair in seen:
            errors.append(
                make_error(
                    f"{where}.topologyKey",
                    f"duplicate {{{constraint.topology_key}, {constraint.when_unsatisfiable}}}",
                )
            )
            continue
        seen.add(pair)
        found.append(constraint)
    return tuple(found)
