"""PromQL text for reclaim, built from untrusted names: escaping, selectors, the batched query.

Role: the only place where namespace and pod names become PromQL. Everything here is pure string
building; `reclaim.prometheus` sends the text and reads the answer back.

Escaping contract
-----------------
A label value goes into a double-quoted PromQL string literal. PromQL string literals follow Go's
escaping rules (prometheus.io/docs/prometheus/latest/querying/basics/#string-literals); the lexer
(prometheus/prometheus `promql/parser/lex.go`, `lexString` / `lexEscape`) accepts the escapes
``\\a \\b \\f \\n \\r \\t \\v \\\\``, the opening quote character, ``\\NNN`` (octal),
``\\xNN``, ``\\uNNNN`` and ``\\UNNNNNNNN`` (surrogate code points rejected), and rejects a raw
newline and the character U+FFFD (it reads it as an invalid UTF-8 rune) inside a quoted string.
`escape_label_value` therefore escapes the backslash, the double quote, the named control
characters, every other control, format or line/paragraph separator character and U+FFFD as
``\\uNNNN`` / ``\\UNNNNNNNN``, and leaves all other characters as they are (UTF-8 in the query).
A single quote is *not* escaped: inside a double-quoted literal the lexer accepts only ``\\"``.

Regex matchers (``=~``) are fully anchored by Prometheus (``^(?:re)$``) and use Go's RE2 syntax.
`quote_regex` backslash-escapes exactly the characters Go's ``regexp.QuoteMeta`` escapes
(``\\.+*?()|[]{}^$``), so each alternative matches only its literal value; the pattern is then
string-escaped like any other value. An empty alternative is refused: ``pod=~"a|"`` would also
match series that have no ``pod`` label at all (GPUs nobody holds).

The batched usage query
-----------------------
One reclaim attempt asks about every candidate victim at once, in ONE instant query (one HTTP
request), the `or` of a few sub-expressions, each tagged with a marker label
(`SIGNAL_LABEL`, set with ``label_replace(expr, "<marker>", "<signal>", "", "")``) so the answer
can be split again: `or` keeps every element of both sides whose label sets differ, and the marker
makes them differ.

Candidates are selected with one regex alternation per label (``namespace=~"ns1|ns2",
pod=~"p1|p2|p3"``) rather than the `or` of one exact selector per pod: the query grows linearly
with the candidates instead of (pods x sub-expressions) selectors, and Prometheus turns an
alternation of literals into a set lookup. The price is the cross product (``ns1/p3`` matches too
when it exists); the adapter drops every (namespace, pod) it did not ask for.

Per signal the query also returns its PEAK: the highest mean over any sub-window of the window,
``max_over_time(avg_over_time(m[sub])[window - sub : sub/2])`` (sub-windows every half
sub-window, each wholly inside the window) ``or`` the most recent one, ``avg_over_time(m[sub])``
evaluated now (subquery steps are aligned to multiples of the step, so the newest samples may fall
after the last aligned sub-window). For the energy counter the same with ``rate(m[sub])``, the
mean power of each sub-window in mJ/s. The sub-window length comes from the scrape interval
(`reclaim.signals.subwindow_length`). A last part per GPU is the power FLOOR,
``min_over_time(DCGM_FI_DEV_POWER_USAGE[lookback])`` over the pod's own series (24 h by default):
the lowest draw the GPU showed while the pod held it, which calibrates its idle draw.

Per signal the query returns per-GPU sums and counts (``sum by (...) (sum_over_time(...))`` and
``count_over_time``) rather than ``avg_over_time``: when one GPU of one pod has several series in
the window (exporter restart, relabelling) the mean is still sum / count over all its samples.
Elements are also split by pod UID where the series carry one (dcgm-exporter's
``--kubernetes-enable-pod-uid``), so the adapter can drop a predecessor's series that share the
pod's namespace and name.
The energy counter gives ``increase(...)`` (counter resets handled, extrapolated to the window
edges by Prometheus) beside its sample count. A last sub-expression lists every pod holding a GPU
(or MIG instance) that a candidate holds, so time-sliced sharing counts pods that are not
candidates too.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

from reclaim.signals import subwindow_length

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
TOTAL_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

DEFAULT_SCRAPE_INTERVAL_S = 30.0
"""dcgm-exporter's default collection interval, and the scheduler's default
`reclaim.scrapeIntervalSeconds`: sizes the sub-windows when the caller does not say."""
CALIBRATION_LOOKBACK_S = 24 * 3600.0
"""How far back the power floor that calibrates a GPU's idle draw looks."""

SIGNAL_LABEL = "gpu_scheduler_signal"
"""Marker label that says which sub-expression of a batched query an answer element came from."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_NAMED_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}
_CODE_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_REPLACEMENT_CHARACTER = "\ufffd"
_RE2_META = frozenset("\\.+*?()|[]{}^$")


class Signal(StrEnum):
    """Sub-expressions of the batched usage query, by their marker value."""

    UTIL_COUNT = "util_count"
    UTIL_SUM = "util_sum"
    POWER_COUNT = "power_count"
    POWER_SUM = "power_sum"
    ENGINE_COUNT = "engine_count"
    ENGINE_SUM = "engine_sum"
    ENERGY_COUNT = "energy_count"
    ENERGY_INCREASE = "energy_increase"
    UTIL_PEAK = "util_peak"
    POWER_PEAK = "power_peak"
    ENGINE_PEAK = "engine_peak"
    ENERGY_PEAK = "energy_peak"
    """Highest sub-window rate of the energy counter, mJ/s."""
    POWER_FLOOR = "power_floor"
    """Lowest power sample over the calibration lookback, W."""
    HOLDER = "holder"
    """One element per (pod, GPU[, MIG instance]) for every GPU a candidate holds; value 1."""


@dataclass(frozen=True)
class LabelNames:
    """Label names of dcgm-exporter series as the user's Prometheus stores them.

    dcgm-exporter labels a held GPU with ``namespace`` / ``pod``; a Prometheus that scrapes it
    through a ServiceMonitor without ``honorLabels`` renames those to ``exported_namespace`` /
    ``exported_pod`` (see `LabelNames.exported`). Every name must be a valid Prometheus label
    name and all must differ (ValueError otherwise).
    """

    namespace: str = "namespace"
    """The holding pod's namespace."""
    pod: str = "pod"
    """The holding pod's name."""
    node: str = "Hostname"
    """The node the GPU is on (dcgm-exporter's ``Hostname``)."""
    gpu: str = "gpu"
    """The GPU index on the node."""
    gpu_instance: str = "GPU_I_ID"
    """The MIG GPU instance id; absent on whole GPUs."""
    model: str = "modelName"
    """The GPU model name, e.g. "NVIDIA H200"."""
    pod_uid: str = "pod_uid"
    """The holding pod's UID; dcgm-exporter adds it only with ``--kubernetes-enable-pod-uid``.
    Series that carry it tell a pod from a predecessor with the same namespace and name."""
    uuid: str = "UUID"
    """The GPU's UUID (names the same GPU as a DRA device's ``uuid`` attribute)."""

    def __post_init__(self) -> None:
        names = [getattr(self, f.name) for f in fields(self)]
        for f, name in zip(fields(self), names, strict=True):
            if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
                raise ValueError(f"label name for {f.name} is not a valid label name: {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"label names must differ: {names}")
        if SIGNAL_LABEL in names:
            raise ValueError(f"{SIGNAL_LABEL!r} is reserved for the batched query's marker")

    @classmethod
    def exported(cls) -> LabelNames:
        """Names after Prometheus renamed the exporter's pod labels (``exported_*``)."""
        return cls(namespace="exported_namespace", pod="exported_pod")

    @property
    def gpu_key(self) -> tuple[str, str, str]:
        """The labels that name one GPU or MIG instance: node, gpu, gpu_instance."""
        return (self.node, self.gpu, self.gpu_instance)


DEFAULT_LABELS = LabelNames()


def escape_label_value(value: str) -> str:
    """The body of a double-quoted PromQL string literal whose value is exactly `value`.

    ``{label="<escape_label_value(v)>"}`` matches exactly the label value `v`, whatever
    characters `v` holds. Raises ValueError for a lone surrogate, which no label value (valid
    UTF-8) can contain and no PromQL escape can express.
    """
    out: list[str] = []
    for char in value:
        named = _NAMED_ESCAPES.get(char)
        if named is not None:
            out.append(named)
            continue
        category = unicodedata.category(char)
        if category == "Cs":
            raise ValueError(f"label value holds a lone surrogate {char!r}: {value!r}")
        if category in _CODE_ESCAPED_CATEGORIES or char == _REPLACEMENT_CHARACTER:
            code = ord(char)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def quote_regex(value: str) -> str:
    """An RE2 pattern matching exactly the text `value` (as Go's ``regexp.QuoteMeta``).

    Only ASCII punctuation is backslash-escaped, a subset that RE2 and Python's `re` read the
    same way, so tests can check the pattern with Python's `re`.
    """
    return "".join("\\" + char if char in _RE2_META else char for char in value)


def alternation_pattern(values: Iterable[str]) -> str:
    """An RE2 pattern that, fully anchored, matches exactly the given values and nothing else.

    Values are deduplicated and sorted, so the text does not depend on their order. Raises
    ValueError when there are no values or one is empty (an empty alternative would also match
    a missing label).
    """
    unique = sorted(set(values))
    if not unique:
        raise ValueError("an alternation needs at least one value")
    if "" in unique:
        raise ValueError("an empty value would also match series without the label")
    return "|".join(quote_regex(value) for value in unique)


def regex_alternation(values: Iterable[str]) -> str:
    """The body of a double-quoted literal for ``label=~"..."`` matching exactly `values`.

    `alternation_pattern` string-escaped with `escape_label_value`; same ValueErrors.
    """
    return escape_label_value(alternation_pattern(values))


def equal(label: str, value: str) -> str:
    """The matcher ``label="value"`` (exact, any value escaped)."""
    return f'{label}="{escape_label_value(value)}"'


def one_of(label: str, values: Iterable[str]) -> str:
    """The matcher ``label=~"v1|v2"`` matching exactly `values` (escaped, non-empty)."""
    return f'{label}=~"{regex_alternation(values)}"'


def duration(window_s: float) -> str:
    """A PromQL range duration for `window_s` seconds, to the millisecond ("15s", "1500ms").

    Raises ValueError when it rounds to less than one millisecond.
    """
    millis = round(window_s * 1000)
    if millis < 1:
        raise ValueError(f"window must be at least 1 ms, got {window_s!r} s")
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def pod_matchers(pods: Sequence[tuple[str, str]], labels: LabelNames = DEFAULT_LABELS) -> str:
    """Matchers (without braces) selecting the series of `pods`, (namespace, pod) pairs.

    One alternation per label: selects the cross product of the namespaces and names given,
    a superset of `pods` that the caller filters. ValueError on no pods or an empty name.
    """
    namespaces = [namespace for namespace, _ in pods]
    names = [pod for _, pod in pods]
    return f"{one_of(labels.namespace, namespaces)},{one_of(labels.pod, names)}"


def _by(labels: Sequence[str]) -> str:
    return f"by ({', '.join(labels)})"


def usage_queries(
    pods: Sequence[tuple[str, str]],
    window_s: float,
    labels: LabelNames = DEFAULT_LABELS,
    *,
    subwindow_s: float | None = None,
    calibration_s: float = CALIBRATION_LOOKBACK_S,
) -> dict[str, str]:
    """The sub-expressions of one reclaim attempt's usage query, keyed by `Signal` value.

    Every sub-expression is an instant vector whose elements carry the labels (namespace, pod,
    pod_uid, node, gpu, gpu_instance, model) of one GPU (or MIG instance) of one selected pod (and
    one pod UID, where the series carry it): sums and
    counts over the last `window_s` seconds, peaks over sub-windows of `subwindow_s` seconds
    inside it (default: `subwindow_length` at a `DEFAULT_SCRAPE_INTERVAL_S` scrape), and the power
    floor over the last `calibration_s` seconds; see the module docstring. `pods` must be
    non-empty and hold no empty names (ValueError).
    """
    window = duration(window_s)
    if subwindow_s is None:
        subwindow_s = subwindow_length(window_s, DEFAULT_SCRAPE_INTERVAL_S)
    sub_s = min(subwindow_s, window_s)
    sub = duration(sub_s)
    step = duration(sub_s / 2)
    earlier_s = window_s - sub_s
    selector = pod_matchers(pods, labels)
    keys = (labels.namespace, labels.pod, labels.pod_uid, *labels.gpu_key, labels.model)
    by = _by(keys)

    def over_time(function: str, metric: str) -> str:
        return f"sum {by} ({function}({metric}{{{selector}}}[{window}]))"

    def peak(function: str, metric: str) -> str:
        recent = f"{function}({metric}{{{selector}}}[{sub}])"
        if round(earlier_s * 1000) < 1:
            return f"max {by} ({recent})"
        earlier = f"max_over_time({recent}[{duration(earlier_s)}:{step}])"
        # The marker keeps the two parts apart under `or`; `max by` drops it again.
        tagged = f'label_replace({recent}, "{SIGNAL_LABEL}", "recent", "", "")'
        return f"max {by} ({earlier} or {tagged})"

    held = f'{labels.namespace}!="",{labels.pod}!=""'
    holder_keys = _by((labels.namespace, labels.pod, *labels.gpu_key))
    on_gpu = f"on ({', '.join(labels.gpu_key)})"
    holders = (
        f"group {holder_keys} ("
        f"count_over_time({GPU_UTIL}{{{held}}}[{window}])"
        f" or count_over_time({GR_ENGINE_ACTIVE}{{{held}}}[{window}]))"
        f" and {on_gpu} ("
        f"count_over_time({GPU_UTIL}{{{selector}}}[{window}])"
        f" or count_over_time({GR_ENGINE_ACTIVE}{{{selector}}}[{window}]))"
    )
    return {
        Signal.UTIL_COUNT: over_time("count_over_time", GPU_UTIL),
        Signal.UTIL_SUM: over_time("sum_over_time", GPU_UTIL),
        Signal.POWER_COUNT: over_time("count_over_time", POWER_USAGE),
        Signal.POWER_SUM: over_time("sum_over_time", POWER_USAGE),
        Signal.ENGINE_COUNT: over_time("count_over_time", GR_ENGINE_ACTIVE),
        Signal.ENGINE_SUM: over_time("sum_over_time", GR_ENGINE_ACTIVE),
        Signal.ENERGY_COUNT: over_time("count_over_time", TOTAL_ENERGY),
        Signal.ENERGY_INCREASE: over_time("increase", TOTAL_ENERGY),
        Signal.UTIL_PEAK: peak("avg_over_time", GPU_UTIL),
        Signal.POWER_PEAK: peak("avg_over_time", POWER_USAGE),
        Signal.ENGINE_PEAK: peak("avg_over_time", GR_ENGINE_ACTIVE),
        Signal.ENERGY_PEAK: peak("rate", TOTAL_ENERGY),
        Signal.POWER_FLOOR: (
            f"min {by} (min_over_time({POWER_USAGE}{{{selector}}}[{duration(calibration_s)}]))"
        ),
        Signal.HOLDER: holders,
    }


def batch(queries: Mapping[str, str], marker: str = SIGNAL_LABEL) -> str:
    """One expression evaluating every query of `queries`, each element tagged ``marker=<key>``.

    The queries must be instant-vector expressions; keys are escaped like label values.
    ValueError when `queries` is empty or `marker` is not a label name.
    """
    if not queries:
        raise ValueError("nothing to batch")
    if not _LABEL_NAME.fullmatch(marker):
        raise ValueError(f"marker is not a label name: {marker!r}")
    tagged = [
        f'label_replace({expr}, "{marker}", "{escape_label_value(key)}", "", "")'
        for key, expr in queries.items()
    ]
    return " or ".join(tagged)


def usage_query(
    pods: Sequence[tuple[str, str]],
    window_s: float,
    labels: LabelNames = DEFAULT_LABELS,
    *,
    subwindow_s: float | None = None,
    calibration_s: float = CALIBRATION_LOOKBACK_S,
) -> str:
    """`usage_queries` batched into the single expression one reclaim attempt sends."""
    return batch(
        usage_queries(pods, window_s, labels, subwindow_s=subwindow_s, calibration_s=calibration_s)
    )


def holders_query(labels: LabelNames = DEFAULT_LABELS) -> str:
    """Who holds which whole GPU now: one element per (namespace, pod, node, gpu), value 1.

    From the latest ``DCGM_FI_DEV_GPU_UTIL`` samples that carry pod labels (dcgm-exporter adds
    them from the kubelet's pod-resources API, so the ``gpu`` label is the index the device
    plugin really gave the pod). MIG instances (series with a ``gpu_instance`` label) are left
    out: they are not whole GPUs of an NVLink domain.
    """
    matchers = f'{labels.namespace}!="",{labels.pod}!="",{labels.gpu}!="",{labels.gpu_instance}=""'
    keys = _by((labels.namespace, labels.pod, labels.node, labels.gpu))
    return f"group {keys} ({GPU_UTIL}{{{matchers}}})"
