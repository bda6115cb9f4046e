"""Field-level building blocks of the parsed API objects: the error type every parser reports
with, selector requirements and node selector terms, taints and tolerations, and the lenient
readers (`text_of`, `list_of`, `object_at`, ...) that never raise on malformed JSON.

The bottom of `scheduler.model`: it imports nothing from the scheduler, and every other parsing
module (pods and nodes, pod affinity, volumes, spread) builds on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from topology.text import clip, quote

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class FieldError:
    """A problem with one field of an object, worded for an Event."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" matches every effect


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """matchExpressions over labels and matchFields (only metadata.name exists) ANDed."""

    expressions: tuple[SelectorRequirement, ...]
    fields: tuple[SelectorRequirement, ...]


def parse_timestamp(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def text_of(raw: object) -> str:
    """`str(raw)`; for what `str` refuses (an integer of more than 4300 digits), a bounded
    description of it."""
    if isinstance(raw, str):
        return raw
    try:
        return str(raw)
    except (ValueError, RecursionError):
        return quote(raw)


def string_map(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {text_of(k): text_of(v) for k, v in raw.items()}


def list_of(raw: object) -> list[Any]:
    return list(raw) if isinstance(raw, list) else []


def object_at(raw: object, where: str, errors: list[FieldError]) -> Mapping[str, Any]:
    """`raw` if it is a JSON object; {} (absent) if None; otherwise an error naming `where`."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return raw
    errors.append(FieldError(where, f"must be an object, got {type(raw).__name__}"))
    return {}


INTEGER_RE = re.compile(r"^-?[0-9]{1,18}$")


def parse_requirements(
    raw: object, where: str, errors: list[FieldError]
) -> tuple[SelectorRequirement, ...]:
    found = []
    for index, item in enumerate(list_of(raw)):
        if not isinstance(item, Mapping) or "key" not in item or "operator" not in item:
            errors.append(FieldError(f"{where}[{index}]", "needs key and operator"))
            continue
        operator = text_of(item["operator"])
        values = tuple(text_of(v) for v in list_of(item.get("values")))
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            errors.append(
                FieldError(f"{where}[{index}].operator", f"unknown operator {quote(operator)}")
            )
            continue
        if operator in ("Gt", "Lt") and (len(values) != 1 or not INTEGER_RE.match(values[0])):
            errors.append(
                FieldError(f"{where}[{index}].values", f"{operator} needs one integer value")
            )
            continue
        found.append(SelectorRequirement(text_of(item["key"]), operator, values))
    return tuple(found)


def parse_node_selector_term(
    raw: Mapping[str, Any], where: str, errors: list[FieldError]
) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        parse_requirements(raw.get("matchExpressions"), f"{where}.matchExpressions", errors),
        parse_requirements(raw.get("matchFields"), f"{where}.matchFields", errors),
    )


def error_reporter(errors: list[FieldError]) -> Callable[[str, str], None]:
    def report(where: str, message: str) -> None:
        errors.append(FieldError(where, message))

    return report


MAX_ERRORS_TEXT = 1024


"""Longest text `sorted_errors` returns (an Event note holds at most 1 KiB)."""


def sorted_errors(errors: Sequence[FieldError]) -> str:
    """All errors of an object in one line, for an Event message and a log line; at most
    `MAX_ERRORS_TEXT` characters, ending in "(N more)" when some did not fit."""
    shown: list[str] = []
    used = 0
    for index, error in enumerate(errors):
        text = clip(str(error), MAX_ERRORS_TEXT - 80)  # the first always fits, with a note
        if shown and used + len(text) + 2 > MAX_ERRORS_TEXT - 20:
            shown.append(f"({len(errors) - index} more)")
            break
        shown.append(text)
        used += len(text) + 2
    return "; ".join(shown)
