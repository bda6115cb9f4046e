"""The Kubernetes CEL functions a DRA selector may call, for `scheduler.dra.cel`'s evaluator.

kube-scheduler's CEL environment for device selectors (k8s.io/dynamic-resource-allocation@v0.37.2
cel/compile.go, on k8s.io/apiserver@v0.37.2 pkg/cel/environment/base.go) adds Kubernetes
libraries to cel-go. cel-cpp, which `scheduler.dra.cel` runs, has the CEL standard library and
cel-go's `strings`, `optional` and `bindings` extensions; this module declares the rest that
selectors plausibly use, with implementations in Python:

- quantities (pkg/cel/library/quantity.go): `quantity(s)`, `isQuantity(s)`, `sign(q)` (a global
  function upstream, not a method), and the methods `isGreaterThan`, `isLessThan`, `compareTo`,
  `asApproximateFloat`, `asInteger`, `isInteger`, `add`, `sub` (a quantity or an int);
- semantic versions (pkg/cel/library/semverlib.go, version 1): `semver(s[, normalize])`,
  `isSemver(s[, normalize])`, the methods `major`, `minor`, `patch`, `isGreaterThan`,
  `isLessThan`, `compareTo`;
- regular expressions (pkg/cel/library/regex.go): `s.find(re)`, `s.findAll(re[, n])`;
- sets (cel-go ext/sets.go): `sets.contains`, `sets.equivalent`, `sets.intersects`.

cel-cpp's Python binding cannot carry opaque Python objects through an evaluation, so the two
Kubernetes types travel as CEL values of distinct kinds, which keeps cel-cpp's runtime overload
dispatch apart: a Quantity is `bytes` (`QUANTITY_PREFIX` + the exact decimal in canonical form,
so equal quantities are equal bytes, as `Quantity.Equal` compares values), a Semver is a
`list(string)` `[SEMVER_TAG, version without build metadata]` (blang/semver's `EQ`, which
upstream's `==` uses, ignores build metadata too). What that encoding cannot reproduce is listed in
`scheduler.dra.cel`'s docstring. Quantity arithmetic is exact (`decimal`, `PRECISION` digits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped,import-not-found,unused-ignore]

from scheduler.model.semver import Version

QUANTITY_PREFIX = b"k8s.quantity:"
SEMVER_TAG = "k8s.semver"
QUANTITY_TYPE = cel.Type.BYTES
"""What a Quantity is to the type checker and at run time."""
SEMVER_TYPE = cel.Type.List(cel.Type.STRING)
"""What a Semver is to the type checker and at run time."""
PRECISION = 100
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# resource.ParseQuantity (k8s.io/apimachinery resource/quantity.go): a signed decimal with an
# optional fraction ("1.", ".5" allowed), then one suffix: binary, decimal SI or an exponent.
_QUANTITY_RE = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# blang/semver v4 Parse: no leading zeros in numbers or numeric pre-release identifiers.
_NUM = r"(0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER_RE = re.compile(
    rf"{_NUM}\.{_NUM}\.{_NUM}(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+(?P<build>[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)


class CelFunctionError(ValueError):
    """Raised inside a function implementation; cel-cpp turns it into an error value, which
    `scheduler.dra.cel` reports as a runtime error."""


# Quantities


def parse_quantity_text(text: str) -> Decimal:
    """The exact value of `text` as resource.ParseQuantity reads it; raises CelFunctionError."""
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise CelFunctionError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    with localcontext(prec=PRECISION):
        number = Decimal(match["number"])
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            return Decimal(number * (2 ** _BINARY[suffix]))
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
        if abs(exponent) > 1000:
            raise CelFunctionError("quantity exponent out of range")
        return Decimal(number.scaleb(exponent))


def encode_quantity(value: Decimal) -> bytes:
    """The CEL value of a quantity: equal numbers give equal bytes."""
    if value.is_zero():
        return QUANTITY_PREFIX + b"0"
    return QUANTITY_PREFIX + format(value.normalize(), "f").encode()


def decode_quantity(value: bytes | bytearray) -> Decimal:
    raw = bytes(value)
    if not raw.startswith(QUANTITY_PREFIX):
        raise CelFunctionError("no such overload: not a quantity")
    return Decimal(raw[len(QUANTITY_PREFIX) :].decode())


def _quantity(text: str) -> bytes:
    return encode_quantity(parse_quantity_text(text))


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity_text(text)
    except CelFunctionError:
        return False
    return True


def _compare(a: Decimal, b: Decimal) -> int:
    return (a > b) - (a < b)


def _as_int64(value: Decimal) -> int | None:
    if value != value.to_integral_value():
        return None
    number = int(value)
    return number if INT64_MIN <= number <= INT64_MAX else None


def _as_integer(q: bytes) -> int:
    number = _as_int64(decode_quantity(q))
    if number is None:
        raise CelFunctionError("cannot convert value to integer")
    return number


def _add(q: bytes, other: bytes | int, sign: int) -> bytes:
    right = Decimal(other) if isinstance(other, int) else decode_quantity(other)
    with localcontext(prec=PRECISION):
        return encode_quantity(decode_quantity(q) + sign * right)


def _approximate_float(q: bytes) -> float:
    number = float(decode_quantity(q))
    return number if math.isfinite(number) else math.copysign(math.inf, number)


# Semantic versions


def encode_version(version: Version) -> list[str]:
    """The CEL value of a version attribute (its text without build metadata)."""
    return [SEMVER_TAG, version.text.split("+", 1)[0]]


@lru_cache(maxsize=4096)
def _parse_semver(text: str) -> tuple[int, int, int, tuple[tuple[int, int, str], ...], bool]:
    """(major, minor, patch, pre-release key, is a release) of a semver 2.0.0 text."""
    match = _SEMVER_RE.fullmatch(text)
    if match is None:
        raise CelFunctionError(f"invalid semantic version {text[:80]!r}")
    pre = match["pre"]
    identifiers = (
        tuple(
            (0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in (pre or "").split(".")
        )
        if pre
        else ()
    )
    return int(match[1]), int(match[2]), int(match[3]), identifiers, not pre


def _normalize(text: str) -> str:
    """semverlib.go's normalizeAndParse: drop a leading v, leading zeros, fill up x or x.y."""
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or not part[0].isdigit():
                part = "0" + part
            parts[index] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise CelFunctionError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver(text: str, normalize: bool = False) -> list[str]:
    if normalize:
        text = _normalize(text)
    _parse_semver(text)
    return [SEMVER_TAG, text.split("+", 1)[0]]


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except CelFunctionError:
        return False
    return True


def _semver_key(value: Sequence[str]) -> tuple[Any, ...]:
    if len(value) != 2 or value[0] != SEMVER_TAG:
        raise CelFunctionError("no such overload: not a semver")
    major, minor, patch, pre, release = _parse_semver(value[1])
    return (major, minor, patch, release, pre)


def _semver_compare(a: Sequence[str], b: Sequence[str]) -> int:
    left, right = _semver_key(a), _semver_key(b)
    return (left > right) - (left < right)


def _semver_part(index: int) -> Callable[[Sequence[str]], int]:
    def part(value: Sequence[str]) -> int:
        return int(_semver_key(value)[index])

    return part


# Regular expressions and sets


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise CelFunctionError(f"error parsing regexp: {error}") from error


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [match.group(0) for match in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _contains_all(container: Sequence[Any], items: Sequence[Any]) -> bool:
    return all(any(_equal(item, have) for have in container) for item in items)


def _equal(a: Any, b: Any) -> bool:
    """CEL equality for plain values: bool never equals a number."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


@dataclass(frozen=True)
class Overload:
    """One overload of a Kubernetes function: its id (upstream's), result and parameter types
    (the receiver first for a method) and its implementation over plain Python values."""

    name: str
    id: str
    result: cel.Type
    parameters: tuple[cel.Type, ...]
    impl: Callable[..., Any]
    member: bool = False


def _overload(
    name: str,
    result: cel.Type,
    parameters: Sequence[cel.Type],
    impl: Callable[..., Any],
    *,
    member: bool = False,
) -> tuple[str, cel.Type, tuple[cel.Type, ...], Callable[..., Any], bool]:
    return name, result, tuple(parameters), impl, member


def overloads() -> list[Overload]:
    """Every overload this module declares."""
    q, s, string, boolean = QUANTITY_TYPE, SEMVER_TYPE, cel.Type.STRING, cel.Type.BOOL
    integer, dyn_list = cel.Type.INT, cel.Type.List(cel.Type.DYN)

    def compare(a: bytes, b: bytes) -> int:
        return _compare(decode_quantity(a), decode_quantity(b))

    declared: dict[
        str, list[tuple[str, cel.Type, tuple[cel.Type, ...], Callable[..., Any], bool]]
    ] = {
        "quantity": [_overload("string_to_quantity", q, [string], _quantity)],
        "isQuantity": [_overload("is_quantity_string", boolean, [string], _is_quantity)],
        "sign": [
            _overload(
                "quantity_sign", integer, [q], lambda a: _compare(decode_quantity(a), Decimal(0))
            )
        ],
        "asApproximateFloat": [
            _overload("quantity_get_float", cel.Type.DOUBLE, [q], _approximate_float, member=True)
        ],
        "asInteger": [_overload("quantity_get_int", integer, [q], _as_integer, member=True)],
        "isInteger": [
            _overload(
                "quantity_is_integer",
                boolean,
                [q],
                lambda a: _as_int64(decode_quantity(a)) is not None,
                member=True,
            )
        ],
        "add": [
            _overload("quantity_add", q, [q, q], lambda a, b: _add(a, b, 1), member=True),
            _overload("quantity_add_int", q, [q, integer], lambda a, b: _add(a, b, 1), member=True),
        ],
        "sub": [
            _overload("quantity_sub", q, [q, q], lambda a, b: _add(a, b, -1), member=True),
            _overload(
                "quantity_sub_int", q, [q, integer], lambda a, b: _add(a, b, -1), member=True
            ),
        ],
        "compareTo": [
            _overload("quantity_compare_to", integer, [q, q], compare, member=True),
            _overload("semver_compare_to", integer, [s, s], _semver_compare, member=True),
        ],
        "isGreaterThan": [
            _overload(
                "quantity_is_greater_than",
                boolean,
                [q, q],
                lambda a, b: compare(a, b) == 1,
                member=True,
            ),
            _overload(
                "semver_is_greater_than",
                boolean,
                [s, s],
                lambda a, b: _semver_compare(a, b) == 1,
                member=True,
            ),
        ],
        "isLessThan": [
            _overload(
                "quantity_is_less_than",
                boolean,
                [q, q],
                lambda a, b: compare(a, b) == -1,
                member=True,
            ),
            _overload(
                "semver_is_less_than",
                boolean,
                [s, s],
                lambda a, b: _semver_compare(a, b) == -1,
                member=True,
            ),
        ],
        "semver": [
            _overload("string_to_semver", s, [string], _semver),
            _overload("string_bool_to_semver", s, [string, boolean], _semver),
        ],
        "isSemver": [
            _overload("is_semver_string", boolean, [string], _is_semver),
            _overload("is_semver_string_bool", boolean, [string, boolean], _is_semver),
        ],
        "major": [_overload("semver_major", integer, [s], _semver_part(0), member=True)],
        "minor": [_overload("semver_minor", integer, [s], _semver_part(1), member=True)],
        "patch": [_overload("semver_patch", integer, [s], _semver_part(2), member=True)],
        "find": [_overload("string_find_string", string, [string, string], _find, member=True)],
        "findAll": [
            _overload(
                "string_find_all_string",
                cel.Type.List(string),
                [string, string],
                _find_all,
                member=True,
            ),
            _overload(
                "string_find_all_string_int",
                cel.Type.List(string),
                [string, string, integer],
                _find_all,
                member=True,
            ),
        ],
        "sets.contains": [
            _overload("list_sets_contains_list", boolean, [dyn_list, dyn_list], _contains_all)
        ],
        "sets.equivalent": [
            _overload(
                "list_sets_equivalent_list",
                boolean,
                [dyn_list, dyn_list],
                lambda a, b: _contains_all(a, b) and _contains_all(b, a),
            )
        ],
        "sets.intersects": [
            _overload(
                "list_sets_intersects_list",
                boolean,
                [dyn_list, dyn_list],
                lambda a, b: any(_equal(x, y) for x in a for y in b),
            )
        ],
    }
    return [
        Overload(name, overload_id, result, parameters, impl, member)
        for name, entries in declared.items()
        for overload_id, result, parameters, impl, member in entries
    ]


def kubernetes_functions() -> list[cel.FunctionDecl]:
    """The declarations (with implementations) to pass to `cel.NewEnv(functions=...)`."""
    grouped: dict[str, list[cel.Overload]] = {}
    for entry in overloads():
        grouped.setdefault(entry.name, []).append(
            cel.Overload(
                entry.id,
                entry.result,
                list(entry.parameters),
                is_member=entry.member,
                impl=entry.impl,
            )
        )
    return [cel.FunctionDecl(name, entries) for name, entries in grouped.items()]


def _accepts(parameter: cel.Type, value: Any) -> bool:
    if parameter == QUANTITY_TYPE:
        return isinstance(value, bytes | bytearray)
    if parameter == cel.Type.STRING:
        return isinstance(value, str)
    if parameter == cel.Type.BOOL:
        return isinstance(value, bool)
    if parameter == cel.Type.INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, list)


def function_table() -> dict[str, Callable[..., Any]]:
    """One callable per function name, choosing the overload by the Python types of its
    arguments (the receiver first): for evaluators that take untyped Python functions."""
    grouped: dict[str, list[Overload]] = {}
    for entry in overloads():
        grouped.setdefault(entry.name, []).append(entry)

    def dispatcher(name: str, entries: list[Overload]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            for entry in entries:
                if len(args) == len(entry.parameters) and all(
                    _accepts(p, a) for p, a in zip(entry.parameters, args, strict=True)
                ):
                    return entry.impl(*args)
            raise CelFunctionError(f"no such overload: {name}")

        return call

    return {name: dispatcher(name, entries) for name, entries in grouped.items()}
