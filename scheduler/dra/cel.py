"""DRA device selectors in CEL: `CelSelectors`, the `SelectorMatcher` the allocator asks.

The environment is kube-scheduler's (k8s.io/dynamic-resource-allocation@v0.37.2 cel/compile.go,
with consumable capacity on and list-type attributes off, as in Kubernetes 1.37): one variable,
`device`, with

- `device.driver` (string) and `device.allowMultipleAllocations` (bool);
- `device.attributes`: domain -> name -> bool, int, string or Semver; an unqualified attribute
  name lives in the driver's domain (`parseQualifiedName`);
- `device.capacity`: domain -> name -> Quantity.

Indexing either map with a domain the device does not have gives an empty map (upstream's
`mapper.Find`); a missing name inside a map is a "no such key" runtime error. An expression must
have type bool, or the attributes' unknown type, which must then hold a bool when evaluated;
otherwise "must evaluate to bool or the unknown type, not T" (`validateOutputType`) or "CEL result
of type T could not be converted to bool" (`DeviceMatches`).

Evaluator: cel-cpp through `cel-expr-python`, chosen by measurement (`python -m hack.bench.cel`,
docs/benchmarks.md "CEL"). Of the three CEL libraries for Python it is the only one that type
checks expressions as cel-go does (`device.driver == 1` fails to compile, as upstream; the Rust
binding answers false) and ships the `bindings` (`cel.bind`), `optional` (`m[?k]`, `.?f`,
`orValue`) and `strings` extensions, which neither the Rust binding (`common-expression-language`)
nor the pure-Python `cel-python` has: it gave kube-scheduler's verdict on all 117 cases of the
corpus against 104 and 107, and was the fastest to evaluate (a median of about 20 us per
evaluation, activation included, against about 70-110 and 500).
The Kubernetes functions come from `scheduler.dra.cel_library`.

Known gaps against upstream (found by tests/integration/test_dra_cel_exact.py or by reading):

- the empty map for an unknown domain is given for domains written as a literal index or field
  of `device.attributes`/`device.capacity` (`device.attributes['x.com']`, `[?'x.com']`,
  `.x`); a computed domain (`device.attributes['x.' + 'com']`) that the device lacks is a
  "no such key" error here, not an empty map. Those domains then appear as keys (`in`,
  `size()`, `exists` over the outer map see them) only when indexed by the same expression.
- `device` alone is not a value (`device.driver` and the other three are declared as qualified
  names): `has(device.driver)` and `device == ...` fail to compile here.
- a Quantity is `bytes` and a Semver a `list(string)` underneath (see cel_library): comparing a
  Semver attribute with `==` to a non-Semver gives false here where upstream errors, and an
  expression treating them as bytes or lists (`size(quantity('1'))`) compiles here, not upstream.
- attribute values are `dyn`, not `any`: `dyn(x)` is accepted as a result here, refused upstream.
- `find`/`findAll` use Python's `re`, upstream RE2 (`matches` is RE2 in both); the Kubernetes
  lists (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf` on lists), URL, IP, CIDR,
  format and authorization libraries and cel-go's two-variable comprehensions and lists
  extension are not declared: an expression using them fails to compile (an error, never a
  wrong match). `asApproximateFloat` rounds once (float of the exact decimal).
- cost: cel-cpp's Python binding offers no cost or step limit. Expressions longer than
  `MAX_EXPRESSION_LENGTH` bytes are refused (CELSelectorExpressionMaxLength); the API server
  refuses, when a claim or class is written, any selector whose estimated cost exceeds
  CELSelectorExpressionMaxCost (1,000,000, k8s.io/api@v0.37.2 resource/v1/types.go), which is
  what bounds the work of a stored selector here.

Caches: compiled programs in an LRU of `program_cache_size` (compile errors too, so a bad
selector is not recompiled per device); verdicts in an LRU of `memo_size` keyed by
(expression, memo_key), errors included. `counters` reports compilations, evaluations and memo
hits. Not thread-safe: the scheduler calls it from its one event loop.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cel_expr_python import cel  # type: ignore[import-untyped,import-not-found,unused-ignore]
from cel_expr_python.ext import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
    ext_bindings,
    ext_optional,
    ext_strings,
)

from scheduler.dra.cel_library import (
    QUANTITY_TYPE,
    encode_quantity,
    encode_version,
    kubernetes_functions,
)
from scheduler.dra.selectors import SelectorError
from scheduler.model.devices import AttributeValue, Device
from scheduler.model.semver import Version
from topology.text import clip, quote

MAX_EXPRESSION_LENGTH = 10 * 1024
"""CELSelectorExpressionMaxLength (k8s.io/api@v0.37.2 resource/v1/types.go), in bytes."""
MAX_MESSAGE = 1024
_EXPRESSION_ECHO = 200
_DEVICE_VARIABLES = {
    "device.driver": cel.Type.STRING,
    "device.allowMultipleAllocations": cel.Type.BOOL,
    "device.attributes": cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, cel.Type.DYN)),
    "device.capacity": cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, QUANTITY_TYPE)),
}
_MISSING_KEY_RE = re.compile(r'Key not found in map : "(?P<key>[^"]*)"')
_NO_SUCH_KEY_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
    "with has() for optional fields"
)
_LITERAL = r"""(?:'(?P<single>[^'\\\n]*)'|"(?P<double>[^"\\\n]*)")"""
_DOMAIN_INDEX_RE = re.compile(
    rf"device\s*\.\s*(?:attributes|capacity)\s*(?:\[\s*\??\s*{_LITERAL}\s*\]"
    r"|\.\s*\??\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_]|\s*\())"
)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class CelCounters:
    """What a `CelSelectors` did since it was built: `matches` calls, programs compiled, CEL
    evaluations run and answers served from the memo."""

    calls: int = 0
    compilations: int = 0
    evaluations: int = 0
    memo_hits: int = 0


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = max(1, size)
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class CompiledSelector:
    """A compiled selector (a cel-cpp `Expression`), or why it does not compile (`error`);
    `domains` are the literal domains read as empty maps when the device lacks them."""

    expression: Any = None
    domains: tuple[str, ...] = ()
    returns_bool: bool = True
    error: str = ""


@dataclass(frozen=True)
class _Verdict:
    matches: bool = False
    error: str = ""


def selector_error(stage: str, expression: str, detail: str) -> SelectorError:
    """A `SelectorError` naming the expression (quoted, cut) and the detail, at most
    `MAX_MESSAGE` characters in all."""
    head = f"CEL {stage} error in {quote(expression, _EXPRESSION_ECHO)}: "
    # clip adds at most 40 characters ("... (N characters)") to what it keeps
    return SelectorError(head + clip(detail, MAX_MESSAGE - len(head) - 40))


def literal_domains(expression: str) -> tuple[str, ...]:
    """The domains `expression` indexes `device.attributes`/`device.capacity` with literally."""
    found = {
        match["single"] if match["single"] is not None else match["double"] or match["field"] or ""
        for match in _DOMAIN_INDEX_RE.finditer(expression)
    }
    return tuple(sorted(found))


def runtime_detail(message: str) -> str:
    """cel-cpp's error text in upstream's words where they differ: a missing map key is
    "no such key: k" with the hint `EnhanceRuntimeError` (cel/errors.go) adds."""
    missing = _MISSING_KEY_RE.search(message)
    if missing is not None:
        return f"no such key: {missing['key']}{_NO_SUCH_KEY_HINT}"
    return message


def attribute_value(value: AttributeValue) -> Any:
    """The CEL value of one attribute (a Version as the library's Semver encoding)."""
    return encode_version(value) if isinstance(value, Version) else value


def device_variables(driver: str, device: Device, domains: tuple[str, ...] = ()) -> dict[str, Any]:
    """The activation of one device: qualified names split into domain -> name, unknown
    `domains` present as empty maps."""
    attributes: dict[str, dict[str, Any]] = {domain: {} for domain in domains}
    for name, value in device.attributes.items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[ident] = attribute_value(value)
    capacity: dict[str, dict[str, bytes]] = {domain: {} for domain in domains}
    for name, entry in device.capacity.items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[ident] = encode_quantity(entry.value)
    return {
        "device.driver": driver,
        "device.allowMultipleAllocations": device.allow_multiple_allocations,
        "device.attributes": attributes,
        "device.capacity": capacity,
    }


def _type_name(value_type: Any) -> str:
    name = str(value_type.name())
    return name.lower() if name.isupper() else name


class CelSelectors:
    """`SelectorMatcher` over cel-cpp with the DRA environment; see the module docstring."""

    def __init__(self, program_cache_size: int = 256, memo_size: int = 65536) -> None:
        self._env = cel.NewEnv(
            variables=_DEVICE_VARIABLES,
            extensions=[
                ext_bindings.ExtBindings(),
                ext_optional.ExtOptional(),
                ext_strings.ExtStrings(),
            ],
            functions=kubernetes_functions(),
        )
        self._programs: _Lru[str, CompiledSelector] = _Lru(program_cache_size)
        self._memo: _Lru[tuple[str, Hashable], _Verdict] = _Lru(memo_size)
        self.counters = CelCounters()

    def matches(self, expression: str, driver: str, device: Device, memo_key: Hashable) -> bool:
        self.counters.calls += 1
        key = (expression, memo_key)
        verdict = self._memo.get(key)
        if verdict is not None:
            self.counters.memo_hits += 1
        else:
            verdict = self._evaluate(expression, driver, device)
            self._memo.put(key, verdict)
        if verdict.error:
            stage, _, detail = verdict.error.partition(":")
            raise selector_error(stage, expression, detail.lstrip())
        return verdict.matches

    def evaluate(self, expression: str, driver: str, device: Device) -> bool:
        """`matches` without the memo (the program cache still applies)."""
        verdict = self._evaluate(expression, driver, device)
        if verdict.error:
            stage, _, detail = verdict.error.partition(":")
            raise selector_error(stage, expression, detail.lstrip())
        return verdict.matches

    def _evaluate(self, expression: str, driver: str, device: Device) -> _Verdict:
        program = self.compile(expression)
        if program.error:
            return _Verdict(error="compile:" + program.error)
        self.counters.evaluations += 1
        try:
            result = program.expression.eval(data=device_variables(driver, device, program.domains))
        except RuntimeError as error:
            return _Verdict(error=f"runtime:{error}")
        result_type = result.type()
        if result_type == cel.Type.ERROR:
            return _Verdict(error=f"runtime:{runtime_detail(str(result.value()))}")
        value = result.value()
        if not isinstance(value, bool):
            return _Verdict(
                error=f"runtime:CEL result of type {_type_name(result_type)} could not be "
                "converted to bool"
            )
        return _Verdict(matches=value)

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled program of `expression` from the cache, compiled on a miss."""
        program = self._programs.get(expression)
        if program is None:
            program = self._compile(expression)
            self._programs.put(expression, program)
        return program

    def _compile(self, expression: str) -> CompiledSelector:
        self.counters.compilations += 1
        size = len(expression.encode())
        if size > MAX_EXPRESSION_LENGTH:
            return CompiledSelector(
                error=f"expression is {size} bytes long, at most {MAX_EXPRESSION_LENGTH} allowed"
            )
        try:
            compiled = self._env.compile(expression)
        except RuntimeError as error:
            return CompiledSelector(error=f"compilation failed: {error}")
        output = compiled.return_type()
        if output != cel.Type.BOOL and output != cel.Type.DYN:
            return CompiledSelector(
                error=f"must evaluate to bool or the unknown type, not {_type_name(output)}"
            )
        return CompiledSelector(expression=compiled, domains=literal_domains(expression))

    @property
    def cached_programs(self) -> int:
        return len(self._programs)

    @property
    def memo_entries(self) -> int:
        return len(self._memo)
