"""Usage shapes of the fake dcgm-exporter: annotation parsing, point values, trace replay."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hack.fake_dcgm.trace import Trace, TraceError, load_trace
from hack.fake_dcgm.usage import (
    FB_USED_ANNOTATION,
    IDLE,
    USAGE_ANNOTATION,
    Constant,
    Periodic,
    TraceReplay,
    UsageError,
    parse_fb_used,
    parse_usage,
)
from tests.datasets import H200_TRACE_CSV

TRACE_CSV = H200_TRACE_CSV


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_trace(TRACE_CSV)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, Constant(0.0)),
        ("constant:util=30", Constant(30.0)),
        (" constant : util = 0 ", Constant(0.0)),
        ("periodic:period=3,duty=0.1,level=100", Periodic(3.0, 0.1, 100.0, 0.0)),
        ("periodic:level=50,duty=0.5,period=10,phase=2", Periodic(10.0, 0.5, 50.0, 2.0)),
        ("periodic:period=3,duty=1,level=100,phase=-1", Periodic(3.0, 1.0, 100.0, 2.0)),
        ("periodic:period=3,duty=0,level=100,phase=7", Periodic(3.0, 0.0, 100.0, 1.0)),
    ],
)
def test_valid_annotations_parse(text: str | None, expected: object) -> None:
    assert parse_usage(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "missing ':'"),
        ("constant", "missing ':'"),
        ("square:util=1", "unknown kind 'square'"),
        ("constant:", "bad field ''"),
        ("constant:util", "bad field 'util'"),
        ("constant:util=", "bad field 'util='"),
        ("constant:util=abc", "util='abc' is not a number"),
        ("constant:util=101", "util='101' is outside [0, 100]"),
        ("constant:util=-1", "util='-1' is outside [0, 100]"),
        ("constant:util=nan", "util='nan' is outside"),
        ("constant:util=30,util=40", "'util' given twice"),
        ("constant:util=30,level=4", "unknown field(s) level"),
        ("periodic:period=3,duty=0.1", "missing field(s) level"),
        ("periodic:period=0,duty=0.1,level=100", "period='0' is outside [0.01, 86400]"),
        ("periodic:period=3,duty=1.5,level=100", "duty='1.5' is outside [0, 1]"),
        ("periodic:period=3,duty=0.5,level=100,phase=inf", "phase='inf' is outside"),
        ("trace:phase=steady_training", "need the exporter to run with --trace"),
    ],
)
def test_invalid_annotations_name_the_annotation_and_the_bad_part(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_usage(text)
    message = str(caught.value)
    assert message.startswith(f"annotation {USAGE_ANNOTATION}={text!r}: ")
    assert fragment in message


def test_unknown_trace_phase_lists_the_known_ones(trace: Trace) -> None:
    with pytest.raises(UsageError, match=r"phase 'warp' is not in the trace \(phases: after_exit"):
        parse_usage("trace:phase=warp", trace)


@given(st.text(max_size=80))
def test_no_text_crashes_the_parser_with_anything_but_usage_error(text: str) -> None:
    try:
        shape = parse_usage(text, {})
    except UsageError:
        return
    assert 0.0 <= shape.sample(1.5).util_pct <= 100.0


@given(
    st.sampled_from(["constant:", "periodic:", "trace:", "periodic:period=3,"]),
    st.lists(
        st.tuples(
            st.sampled_from(["util", "period", "duty", "level", "phase", "x", ""]),
            st.one_of(st.floats(allow_nan=True), st.text(max_size=8)).map(str),
        ),
        max_size=5,
    ),
)
def test_structured_fuzz_only_raises_usage_error(kind: str, fields: list[tuple[str, str]]) -> None:
    text = kind + ",".join(f"{k}={v}" for k, v in fields)
    try:
        shape = parse_usage(text, {})
    except UsageError:
        return
    for t in (0.0, 0.7, 3.3, 1e6):
        assert 0.0 <= shape.sample(t).util_pct <= 100.0


def test_periodic_values_at_given_times() -> None:
    shape = parse_usage("periodic:period=3,duty=0.1,level=100")
    busy = [0.0, 0.1, 0.29, 3.0, 3.2999, 300.1]
    idle = [0.3, 0.5, 1.0, 2.99, 3.3, 299.5, -0.5]
    assert [shape.sample(t).util_pct for t in busy] == [100.0] * len(busy)
    assert [shape.sample(t).util_pct for t in idle] == [0.0] * len(idle)
    shifted = parse_usage("periodic:period=10,duty=0.3,level=40,phase=5")
    assert shifted.sample(4.9).util_pct == 0.0
    assert shifted.sample(5.0).util_pct == 40.0
    assert shifted.sample(7.9).util_pct == 40.0
    assert shifted.sample(8.0).util_pct == 0.0


def test_periodic_breakpoints_are_the_edges_inside_the_interval() -> None:
    shape = Periodic(period=3.0, duty=0.1, level=100.0, phase=0.0)
    assert shape.breakpoints(0.0, 7.0) == pytest.approx([0.3, 3.0, 3.3, 6.0, 6.3])
    assert shape.breakpoints(0.3, 3.0) == []
    assert shape.breakpoints(5.0, 4.0) == []
    assert Constant(5.0).breakpoints(0.0, 100.0) == []


def test_trace_replay_matches_the_csv_rows(trace: Trace) -> None:
    with TRACE_CSV.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["phase"] == "dataloader_bound_10pct"]
    shape = parse_usage("trace:phase=dataloader_bound_10pct", trace)
    assert isinstance(shape, TraceReplay)
    assert len(rows) == 50
    for second in (0, 1, 2, 17, 49):
        sample = shape.sample(second + 0.5)
        row = rows[second]
        assert sample.util_pct == float(row["gpu_util_pct"])
        assert sample.power_w == float(row["power_w"])
        assert sample.fb_used_mib == float(row["fb_used_mib"])
    # Loops: second 50 is row 0 again; before the start it holds row 0.
    assert shape.sample(50.2).power_w == float(rows[0]["power_w"])
    assert shape.sample(-3.0).power_w == float(rows[0]["power_w"])
    assert shape.breakpoints(0.5, 3.5) == [1.0, 2.0, 3.0]
    assert shape.breakpoints(-2.0, 1.0) == []


def test_trace_phases_and_their_lengths(trace: Trace) -> None:
    assert {k: len(v) for k, v in trace.items()} == {
        "no_process": 15,
        "idle_holder_20GiB": 40,
        "steady_training": 35,
        "bursty_training_50pct": 50,
        "dataloader_bound_10pct": 50,
        "sporadic_inference_4pct": 50,
        "after_exit": 15,
    }


def test_bad_trace_files_raise_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="No such file"):
        load_trace(tmp_path / "absent.csv")
    missing = tmp_path / "missing.csv"
    missing.write_text("t_s,phase,gpu_util_pct\n1,a,2\n")
    with pytest.raises(TraceError, match="missing columns mem_copy_util_pct"):
        load_trace(missing)
    garbled = tmp_path / "garbled.csv"
    garbled.write_text(
        "t_s,phase,gpu_util_pct,mem_copy_util_pct,fb_used_mib,power_w,sm_clock_mhz\n"
        "1,a,2,0,10,watts,1980\n"
    )
    with pytest.raises(TraceError, match=r"garbled\.csv:2"):
        load_trace(garbled)


def test_fb_used_annotation() -> None:
    assert parse_fb_used(None) is None
    assert parse_fb_used("20480") == 20480.0
    for bad in ("20GiB", "-1", "inf", ""):
        with pytest.raises(UsageError, match=re.escape(FB_USED_ANNOTATION)):
            parse_fb_used(bad)


def test_idle_is_an_idle_holder() -> None:
    assert IDLE.sample(123.0).util_pct == 0.0
    assert IDLE.sample(123.0).power_w is None
