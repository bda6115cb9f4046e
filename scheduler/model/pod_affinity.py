"""Pod affinity and anti-affinity terms (spec.affinity.podAffinity / podAntiAffinity), parsed.

`parse_pod_affinity(spec, labels, errors)` returns None for a pod without pod (anti-)affinity
terms, so the InterPodAffinity plugin can skip it at once; otherwise a `PodAffinity` with the
four lists of terms. Semantics follow Kubernetes:

- a term matches a pod when the pod's namespace is one of the term's namespaces (`namespaces`,
  or the namespaces whose labels match `namespaceSelector`; an empty selector `{}` matches every
  namespace; neither given means the namespace of the pod that owns the term) AND its labels
  match `labelSelector` (a missing selector matches no pod, an empty one every pod);
- `matchLabelKeys` / `mismatchLabelKeys` add `key In (value)` / `key NotIn (value)` for the
  owning pod's value of each listed label (the API server usually merged them already; merging
  twice gives the same selector).

Invalid terms (an empty topologyKey, an unknown selector operator, In without values, a
preferred weight outside 1-100) become `FieldError`s naming the field; the pod is then reported
and not scheduled, like every pod with a field error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from scheduler.model.fields import FieldError, SelectorRequirement
from topology.text import quote


def _text(raw: object) -> str:
    """A string field as given; anything else (a number, a 5,000-digit integer) as a bounded
    description that matches no label."""
    return raw if isinstance(raw, str) else quote(raw)


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_ECHO = 64
"""Longest echoed value in an error message."""


def _echo(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 3] + "..."


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: every requirement must hold; no requirement matches everything."""

    requirements: tuple[SelectorRequirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        for req in self.requirements:
            value = labels.get(req.key)
            if req.operator == "In":
                if value is None or value not in req.values:
                    return False
            elif req.operator == "NotIn":
                if value is not None and value in req.values:
                    return False
            elif req.operator == "Exists":
                if value is None:
                    return False
            elif value is not None:  # DoesNotExist
                return False
        return True


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One term. `selector` None matches no pod; `namespace_selector` None selects no namespace
    by labels (then only `namespaces` count, already defaulted to the owner's namespace)."""

    selector: LabelSelector | None
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None

    def matches(
        self,
        namespace: str,
        labels: Mapping[str, str],
        namespace_labels: Mapping[str, Mapping[str, str]],
    ) -> bool:
        """Whether a pod in `namespace` with `labels` is one this term selects."""
        if self.selector is None:
            return False
        if namespace not in self.namespaces and (
            self.namespace_selector is None
            or not self.namespace_selector.matches(namespace_labels.get(namespace, {}))
        ):
            return False
        return self.selector.matches(labels)


REQUIRED_AFFINITY = "requiredAffinity"
REQUIRED_ANTI_AFFINITY = "requiredAntiAffinity"
PREFERRED_AFFINITY = "preferredAffinity"
PREFERRED_ANTI_AFFINITY = "preferredAntiAffinity"
"""The four roles of a term in a pod's `PodAffinity` (`PodAffinity.held_terms`)."""


@dataclass(frozen=True)
class PodAffinity:
    """The pod (anti-)affinity terms of one pod; weights are 1-100."""

    required_affinity: tuple[PodAffinityTerm, ...] = ()
    required_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    preferred_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()

    @property
    def has_required(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred_affinity or self.preferred_anti_affinity)

    @cached_property
    def held_terms(self) -> tuple[tuple[str, int, PodAffinityTerm], ...]:
        """Every term as (role, weight, term), weight 1 for a required one: what the pod, once
        counted on a node, holds toward pods that come later (`scheduler.state.pod_counts`)."""
        return (
            *((REQUIRED_AFFINITY, 1, term) for term in self.required_affinity),
            *((REQUIRED_ANTI_AFFINITY, 1, term) for term in self.required_anti_affinity),
            *((PREFERRED_AFFINITY, weight, term) for weight, term in self.preferred_affinity),
            *(
                (PREFERRED_ANTI_AFFINITY, weight, term)
                for weight, term in self.preferred_anti_affinity
            ),
        )


def _as_list(raw: object, where: str, errors: list[FieldError]) -> list[Any]:
    if raw is None:
        return []
    if isinstance(raw, list):
        return raw
    errors.append(FieldError(where, f"must be a list, got {type(raw).__name__}"))
    return []


def _as_map(raw: object, where: str, errors: list[FieldError]) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return raw
    errors.append(FieldError(where, f"must be an object, got {type(raw).__name__}"))
    return None


def parse_label_selector(raw: object, where: str, errors: list[FieldError]) -> LabelSelector | None:
    """A LabelSelector from its JSON; None when absent (or unusable, with an error)."""
    selector = _as_map(raw, where, errors)
    if selector is None:
        return None
    found: list[SelectorRequirement] = []
    match_labels = _as_map(selector.get("matchLabels"), f"{where}.matchLabels", errors) or {}
    for key, value in match_labels.items():
        found.append(SelectorRequirement(_text(key), "In", (_text(value),)))
    ok = True
    where_exprs = f"{where}.matchExpressions"
    for index, item in enumerate(_as_list(selector.get("matchExpressions"), where_exprs, errors)):
        item_where = f"{where_exprs}[{index}]"
        if not isinstance(item, Mapping) or not item.get("key"):
            errors.append(FieldError(f"{item_where}.key", "is required"))
            ok = False
            continue
        operator = item.get("operator")
        values = tuple(
            _text(v) for v in _as_list(item.get("values"), f"{item_where}.values", errors)
        )
        if operator not in SELECTOR_OPERATORS:
            errors.append(
                FieldError(
                    f"{item_where}.operator",
                    f"must be one of {', '.join(SELECTOR_OPERATORS)}, got {_echo(operator)}",
                )
            )
            ok = False
        elif operator in ("In", "NotIn") and not values:
            errors.append(FieldError(f"{item_where}.values", f"{operator} needs values"))
            ok = False
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(FieldError(f"{item_where}.values", f"{operator} takes no values"))
            ok = False
        else:
            found.append(SelectorRequirement(_text(item["key"]), _text(operator), values))
    return LabelSelector(tuple(found)) if ok else None


def _term(
    raw: object,
    where: str,
    namespace: str,
    labels: Mapping[str, str],
    errors: list[FieldError],
) -> PodAffinityTerm | None:
    term = _as_map(raw, where, errors)
    if term is None:
        errors.append(FieldError(where, "is required"))
        return None
    count = len(errors)
    topology_key = term.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        errors.append(FieldError(f"{where}.topologyKey", "must be a non-empty label key"))
    selector = parse_label_selector(term.get("labelSelector"), f"{where}.labelSelector", errors)
    if selector is not None:
        extra: list[SelectorRequirement] = []
        for field, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
            for key in _as_list(term.get(field), f"{where}.{field}", errors):
                name = _text(key)
                if name in labels:
                    extra.append(SelectorRequirement(name, operator, (labels[name],)))
        if extra:
            selector = LabelSelector(selector.requirements + tuple(extra))
    namespaces = frozenset(
        _text(n) for n in _as_list(term.get("namespaces"), f"{where}.namespaces", errors)
    )
    namespace_selector = parse_label_selector(
        term.get("namespaceSelector"), f"{where}.namespaceSelector", errors
    )
    if not namespaces and term.get("namespaceSelector") is None:
        namespaces = frozenset((namespace,))
    if len(errors) > count:
        return None
    return PodAffinityTerm(selector, _text(topology_key), namespaces, namespace_selector)


def _terms(
    raw: Mapping[str, Any],
    where: str,
    namespace: str,
    labels: Mapping[str, str],
    errors: list[FieldError],
) -> tuple[tuple[PodAffinityTerm, ...], tuple[tuple[int, PodAffinityTerm], ...]]:
    required_where = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
    required = []
    for i, item in enumerate(
        _as_list(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), required_where, errors)
    ):
        term = _term(item, f"{required_where}[{i}]", namespace, labels, errors)
        if term is not None:
            required.append(term)
    preferred_where = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(
        _as_list(
            raw.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_where, errors
        )
    ):
        item_where = f"{preferred_where}[{i}]"
        weight = item.get("weight") if isinstance(item, Mapping) else None
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            errors.append(FieldError(f"{item_where}.weight", f"must be 1-100, got {_echo(weight)}"))
            continue
        term = _term(
            item.get("podAffinityTerm"), f"{item_where}.podAffinityTerm", namespace, labels, errors
        )
        if term is not None:
            preferred.append((weight, term))
    return tuple(required), tuple(preferred)


def parse_pod_affinity(
    spec: Mapping[str, Any],
    namespace: str,
    labels: Mapping[str, str],
    errors: list[FieldError],
) -> PodAffinity | None:
    """The pod (anti-)affinity of a pod spec; None when it has no such term."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return None  # a malformed spec.affinity is reported by the node affinity parser
    where = "spec.affinity"
    found = []
    for name in ("podAffinity", "podAntiAffinity"):
        raw = _as_map(affinity.get(name), f"{where}.{name}", errors) or {}
        found.append(_terms(raw, f"{where}.{name}", namespace, labels, errors))
    (required, preferred), (anti_required, anti_preferred) = found
    result = PodAffinity(required, anti_required, preferred, anti_preferred)
    return result if result.has_required or result.has_preferred else None
