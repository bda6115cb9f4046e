"""Where Dynamic Resource Allocation objects are available: a v1 NodeSelector as a ResourceSlice,
one of its devices or a claim's allocation carries it, and a slice's or device's node selection
(`nodeName`, `nodeSelector`, `allNodes`), matched against one node by its name and labels.

Matching follows upstream, which the allocator uses to decide which slices a node sees:

- `NodeSelection.matches` is `NodeMatches` (k8s.io/dynamic-resource-allocation@v0.37.2
  structured/internal/incubating/pools_incubating.go): nodeName first, then allNodes, then the
  selector; nothing set matches no node.
- `NodeSelector.matches` is `NodeSelector.Match` (k8s.io/component-helpers@v0.37.2
  scheduling/corev1/nodeaffinity/nodeaffinity.go): terms ORed, a term's requirements ANDed, an
  empty term skipped (so no terms, or only empty ones, match no node); matchFields compare the
  field (only `metadata.name` has a value, any other field is "") and are ignored for a node
  without a name; Gt and Lt read the label as a base-10 int64, and a label that is not one does
  not match.
- What upstream refuses to parse (`nodeSelectorRequirementsAsSelector`,
  `nodeSelectorRequirementsAsFieldSelector`: an unknown operator, In or NotIn without values,
  Exists or DoesNotExist with values, Gt or Lt without exactly one integer, a matchFields
  requirement other than In or NotIn with exactly one value) is a `FieldError`, and the selector
  is kept with `valid` False: it matches no node (upstream fails the whole node's allocation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.model.fields import (
    FieldError,
    NodeSelectorTerm,
    SelectorRequirement,
    list_of,
    object_at,
    parse_node_selector_term,
    text_of,
)

MAX_TERMS = 32
"""Terms read from one selector (the API sets no limit; DRA objects use one term)."""

NODE_NAME_FIELD = "metadata.name"
"""The one node field a matchFields requirement can compare (`extractNodeFields`)."""

_INT64_RE = re.compile(r"[+-]?[0-9]{1,19}")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class NodeSelector:
    """A v1 NodeSelector: `terms` ORed. `valid` False: a requirement upstream refuses to parse
    was found (and reported); the selector matches no node."""

    terms: tuple[NodeSelectorTerm, ...]
    valid: bool = True

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node named `node_name` with `labels` is selected."""
        if not self.valid:
            return False
        return any(term_matches(term, node_name, labels) for term in self.terms)


@dataclass(frozen=True)
class NodeSelection:
    """A slice's or a device's node selection; a valid object sets exactly one field."""

    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False

    @property
    def is_set(self) -> bool:
        return bool(self.node_name) or self.all_nodes or self.node_selector is not None

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """`NodeMatches`: the named node only, else every node, else the selector's nodes."""
        if self.node_name:
            return node_name == self.node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(node_name, labels)
        return False


def term_matches(term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    """One term of a selector: every label requirement and (for a named node) every field
    requirement holds; an empty term matches nothing (upstream skips it)."""
    if not term.expressions and not term.fields:
        return False
    if not all(_label_matches(req, labels) for req in term.expressions):
        return False
    if not node_name:
        return True
    return all(_field_matches(req, node_name) for req in term.fields)


def _label_matches(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    have, bound = _int64(value), _int64(req.values[0] if req.values else None)
    if have is None or bound is None:
        return False
    return have > bound if req.operator == "Gt" else have < bound


def _field_matches(req: SelectorRequirement, node_name: str) -> bool:
    value = node_name if req.key == NODE_NAME_FIELD else ""
    wanted = req.values[0] if req.values else ""
    return value == wanted if req.operator == "In" else value != wanted


def _int64(text: str | None) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`, None where it fails."""
    if text is None or not _INT64_RE.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def parse_node_selector(raw: object, where: str, errors: list[FieldError]) -> NodeSelector | None:
    """The NodeSelector at `where` (None when absent). Problems are reported under `where`; a
    selector with any of them has `valid` False."""
    if raw is None:
        return None
    before = len(errors)
    selector = object_at(raw, where, errors)
    terms_raw = selector.get("nodeSelectorTerms")
    if terms_raw is not None and not isinstance(terms_raw, list):
        errors.append(FieldError(f"{where}.nodeSelectorTerms", "must be a list"))
    items = list_of(terms_raw)
    if len(items) > MAX_TERMS:
        errors.append(
            FieldError(
                f"{where}.nodeSelectorTerms",
                f"at most {MAX_TERMS} terms are read, got {len(items)}",
            )
        )
    terms = []
    for index, item in enumerate(items[:MAX_TERMS]):
        term_where = f"{where}.nodeSelectorTerms[{index}]"
        term = parse_node_selector_term(object_at(item, term_where, errors), term_where, errors)
        _check_term(term, term_where, errors)
        terms.append(term)
    return NodeSelector(tuple(terms), valid=len(errors) == before)


def _check_term(term: NodeSelectorTerm, where: str, errors: list[FieldError]) -> None:
    """What `parse_requirements` lets through but upstream's selector parsing refuses."""
    for index, req in enumerate(term.expressions):
        at = f"{where}.matchExpressions[{index}].values"
        if req.operator in ("In", "NotIn") and not req.values:
            errors.append(FieldError(at, f"{req.operator} needs at least one value"))
        elif req.operator in ("Exists", "DoesNotExist") and req.values:
            errors.append(FieldError(at, f"{req.operator} takes no values"))
    for index, req in enumerate(term.fields):
        at = f"{where}.matchFields[{index}]"
        if req.operator not in ("In", "NotIn"):
            errors.append(
                FieldError(f"{at}.operator", f"must be In or NotIn, got {text_of(req.operator)}")
            )
        elif len(req.values) != 1:
            errors.append(FieldError(f"{at}.values", "must have exactly one value"))
