"""PromQL escaping and the batched reclaim query, checked against a PromQL string-literal reader.

`read_literal` below follows the PromQL lexer's rules for a double-quoted string (Go escapes;
a raw newline or U+FFFD ends the query with an error; only the opening quote may be escaped),
independently of the code under test.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reclaim.promql import (
    GPU_UTIL,
    SIGNAL_LABEL,
    TOTAL_ENERGY,
    LabelNames,
    Signal,
    alternation_pattern,
    batch,
    duration,
    equal,
    escape_label_value,
    holders_query,
    one_of,
    pod_matchers,
    quote_regex,
    regex_alternation,
    usage_queries,
    usage_query,
)

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_HEX_DIGITS = {"u": 4, "U": 8}


class LiteralError(ValueError):
    """The text is not a valid double-quoted PromQL string literal."""


def read_literal(text: str, start: int) -> tuple[str, int]:
    """Decode the double-quoted literal opening at `text[start]`; return (value, index of the
    closing quote). Octal and ``\\x`` escapes (bytes, never produced by the code under test)
    are refused."""
    if text[start] != '"':
        raise LiteralError(f"no opening quote at {start}")
    out: list[str] = []
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == '"':
            return "".join(out), i
        if char in ("\n", "\ufffd"):
            raise LiteralError(f"raw {char!r} inside a quoted string at {i}")
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            raise LiteralError("escape sequence not terminated")
        code = text[i + 1]
        if code in _SIMPLE:
            out.append(_SIMPLE[code])
            i += 2
        elif code in ('"', "\\"):
            out.append(code)
            i += 2
        elif code in _HEX_DIGITS:
            digits = text[i + 2 : i + 2 + _HEX_DIGITS[code]]
            if len(digits) != _HEX_DIGITS[code] or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise LiteralError(f"bad \\{code} escape at {i}")
            value = int(digits, 16)
            if value > 0x10FFFF or 0xD800 <= value < 0xE000:
                raise LiteralError(f"invalid code point {value:#x}")
            out.append(chr(value))
            i += 2 + len(digits)
        else:
            raise LiteralError(f"unknown escape sequence \\{code} at {i}")
    raise LiteralError("unterminated quoted string")


_MATCHER_HEAD = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*$")


def matcher_literals(query: str) -> list[tuple[str, str]]:
    """Every string literal of `query`, in order, as (what precedes it, decoded value): the
    "label op" of a matcher (e.g. ``pod=~``), else "". Reads literal by literal, so text inside
    one literal never counts as PromQL."""
    found: list[tuple[str, str]] = []
    position = 0
    while (opening := query.find('"', position)) >= 0:
        head = _MATCHER_HEAD.search(query[position:opening])
        value, end = read_literal(query, opening)
        found.append((head.group(1) + head.group(2) if head else "", value))
        position = end + 1
    return found


TRICKY = "\"\\|.*}{)(][^$?+\n\r\t\x00\x7f\ufffd\u2028\u200b'`#, =~!"
# Any unicode text that can be a label value (valid UTF-8, so no lone surrogates).
alphabet = st.one_of(st.sampled_from(TRICKY), st.characters(exclude_categories=["Cs"]))
values = st.text(alphabet=alphabet, min_size=1)


@given(value=st.text(alphabet=alphabet))
@example(value='a"b\\c\nd')
@example(value="\ufffd")
@example(value="\\")
@example(value='\\"')
@example(value="\U0001f600\u2029")
def test_escaped_value_reads_back_exactly(value: str) -> None:
    escaped = escape_label_value(value)
    selector = f'{{pod="{escaped}"}}'
    decoded, end = read_literal(selector, len("{pod="))
    assert decoded == value
    # The literal ends at the quote the builder put there, not at one inside the value.
    assert end == len(selector) - 2
    assert "\n" not in escaped and "\ufffd" not in escaped


@settings(max_examples=300, deadline=None)
@given(chosen=st.lists(values, min_size=1, max_size=6), others=st.lists(values, max_size=6))
@example(chosen=["a", "b"], others=["a|b", "ab", ".*", "", "a\n"])
@example(chosen=[".*"], others=["x", "", "..", "\n"])
@example(chosen=["a\\"], others=["a", "a\\\\"])
def test_alternation_matches_exactly_the_chosen_values(
    chosen: list[str], others: list[str]
) -> None:
    body = regex_alternation(chosen)
    selector = f'{{pod=~"{body}"}}'
    pattern, end = read_literal(selector, len("{pod=~"))
    assert end == len(selector) - 2
    assert pattern == alternation_pattern(chosen)
    # Prometheus anchors regex matchers as ^(?:re)$; fullmatch does the same here.
    compiled = re.compile(f"(?:{pattern})")
    for value in chosen:
        assert compiled.fullmatch(value), (pattern, value)
    for value in others:
        if value not in chosen:
            assert not compiled.fullmatch(value), (pattern, value)


@given(value=values)
def test_quoted_regex_is_the_literal_text(value: str) -> None:
    assert re.fullmatch(quote_regex(value), value)
    assert re.fullmatch(quote_regex(value), value + "x") is None


def test_escapes_follow_go_rules() -> None:
    assert escape_label_value('say "hi"\\') == 'say \\"hi\\"\\\\'
    assert escape_label_value("a\nb\tc\x00") == "a\\nb\\tc\\u0000"
    assert escape_label_value("it's") == "it's"  # \' is not valid inside double quotes
    assert escape_label_value("\ufffd") == "\\ufffd"
    assert escape_label_value("日本") == "日本"
    with pytest.raises(ValueError, match="surrogate"):
        escape_label_value("a\ud800")


def test_alternation_refuses_what_would_match_missing_labels() -> None:
    with pytest.raises(ValueError, match="at least one"):
        regex_alternation([])
    with pytest.raises(ValueError, match="empty value"):
        regex_alternation(["a", ""])
    assert alternation_pattern(["b", "a", "b"]) == "a|b"


def test_matchers() -> None:
    assert equal("pod", 'x"y') == 'pod="x\\"y"'
    assert one_of("pod", ["a.b", "c"]) == 'pod=~"a\\\\.b|c"'
    assert pod_matchers([("ns", "a"), ("ns2", "b")]) == 'namespace=~"ns|ns2",pod=~"a|b"'
    exported = LabelNames.exported()
    assert pod_matchers([("ns", "a")], exported) == ('exported_namespace=~"ns",exported_pod=~"a"')


@pytest.mark.parametrize(
    ("window_s", "text"), [(15, "15s"), (3600, "3600s"), (1.5, "1500ms"), (0.001, "1ms")]
)
def test_duration(window_s: float, text: str) -> None:
    assert duration(window_s) == text


def test_duration_refuses_nothing() -> None:
    with pytest.raises(ValueError):
        duration(0)


def test_label_names_are_validated() -> None:
    with pytest.raises(ValueError, match="valid label name"):
        LabelNames(pod="pod name")
    with pytest.raises(ValueError, match="differ"):
        LabelNames(pod="namespace")
    with pytest.raises(ValueError, match="reserved"):
        LabelNames(model=SIGNAL_LABEL)


PEAKS = {Signal.UTIL_PEAK, Signal.POWER_PEAK, Signal.ENGINE_PEAK, Signal.ENERGY_PEAK}
KEYS = "by (namespace, pod, pod_uid, Hostname, gpu, GPU_I_ID, modelName)"


def test_usage_queries_cover_every_signal_over_the_window() -> None:
    queries = usage_queries([("team-a", "train-0")], 3600)
    assert set(queries) == {signal.value for signal in Signal}
    for signal, expr in queries.items():
        if signal in PEAKS:
            # 5-minute sub-windows (ten 30 s scrapes) every 150 s inside the hour, or the latest.
            assert expr.startswith(f"max {KEYS} (max_over_time("), signal
            assert "[300s])[3300s:150s]) or label_replace(" in expr, signal
            assert "[3600s]" not in expr
        elif signal == Signal.POWER_FLOOR:
            assert expr == (
                f"min {KEYS} (min_over_time(DCGM_FI_DEV_POWER_USAGE"
                '{namespace=~"team-a",pod=~"train-0"}[86400s]))'
            )
        else:
            assert "[3600s]" in expr, signal
        if signal not in PEAKS | {Signal.HOLDER, Signal.POWER_FLOOR}:
            assert expr.startswith(f"sum {KEYS}")
    assert f"rate({TOTAL_ENERGY}{{" in queries[Signal.ENERGY_PEAK]
    assert f"avg_over_time({GPU_UTIL}{{" in queries[Signal.UTIL_PEAK]
    assert f"increase({TOTAL_ENERGY}{{" in queries[Signal.ENERGY_INCREASE]
    assert f"sum_over_time({GPU_UTIL}{{" in queries[Signal.UTIL_SUM]
    assert "and on (Hostname, gpu, GPU_I_ID)" in queries[Signal.HOLDER]


def test_usage_queries_use_configured_label_names() -> None:
    labels = LabelNames.exported()
    query = usage_query([("ns", "p")], 60, labels)
    assert 'exported_namespace=~"ns",exported_pod=~"p"' in query
    assert 'exported_namespace!="",exported_pod!=""' in query
    assert "namespace=~" not in query.replace("exported_namespace=~", "")


def test_batch_tags_every_part_with_its_marker() -> None:
    query = batch({"one": "up", "two": 'vector(1) or up{job="x"}'})
    assert query == (
        f'label_replace(up, "{SIGNAL_LABEL}", "one", "", "")'
        f' or label_replace(vector(1) or up{{job="x"}}, "{SIGNAL_LABEL}", "two", "", "")'
    )
    with pytest.raises(ValueError):
        batch({})


@settings(max_examples=100, deadline=None)
@given(pods=st.lists(st.tuples(values, values), min_size=1, max_size=5))
def test_every_name_in_the_batched_query_reads_back_escaped(pods: list[tuple[str, str]]) -> None:
    """Whatever the names, each matcher's literal decodes to the alternation of exactly the
    names given: no name can end a literal early or add PromQL of its own."""
    query = usage_query(pods, 30)
    literals = matcher_literals(query)
    namespaces = [value for head, value in literals if head == "namespace=~"]
    names = [value for head, value in literals if head == "pod=~"]
    # 8 signal parts, 4 peaks (the 30 s window is one sub-window: its latest), the power floor
    # and the 2 candidate selectors of the holder part.
    assert len(namespaces) == len(names) == 15
    assert set(namespaces) == {alternation_pattern(ns for ns, _ in pods)}
    assert set(names) == {alternation_pattern(pod for _, pod in pods)}
    # Outside the candidate matchers, only the query's own literals: markers and `!=""`.
    others = {value for head, value in literals if head not in ("namespace=~", "pod=~")}
    assert others <= {"", SIGNAL_LABEL, "recent", *(signal.value for signal in Signal)}


def test_holders_query_reads_whole_gpus_with_pod_labels() -> None:
    assert holders_query() == (
        "group by (namespace, pod, Hostname, gpu) "
        f'({GPU_UTIL}{{namespace!="",pod!="",gpu!="",GPU_I_ID=""}})'
    )
