"""Fuzz the Prometheus answer parsing (reclaim.prometheus): an answer is either a list of
samples or a `PrometheusError` with a bounded message; samples always assemble into windows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.prometheus import PrometheusClient, PrometheusError, Sample, assemble_windows
from reclaim.promql import DEFAULT_LABELS, SIGNAL_LABEL, Signal
from tests.fuzzing import FUZZ, MAX_MESSAGE, bounded, huge, json_values

URL = "http://prometheus.test:9090"
LABELS = DEFAULT_LABELS
LABEL_NAMES = [
    SIGNAL_LABEL,
    LABELS.namespace,
    LABELS.pod,
    LABELS.node,
    LABELS.gpu,
    LABELS.gpu_instance,
    LABELS.model,
]
label_values = st.one_of(
    st.sampled_from([s.value for s in Signal]), st.sampled_from(["ns", "p", "n1", "0", "1"])
)
metrics = st.dictionaries(st.sampled_from(LABEL_NAMES), label_values, max_size=7)
timestamps = st.one_of(st.floats(), st.integers(), st.text(max_size=10))
number_texts = st.one_of(
    st.floats().map(repr), st.sampled_from(["NaN", "+Inf", "-Inf", "1e999"]), st.text(max_size=8)
)
elements = st.one_of(
    st.fixed_dictionaries({"metric": metrics, "value": st.tuples(timestamps, number_texts)}),
    json_values(huge_ints=False),
)


def envelope(result: Any, result_type: Any = "vector", status: Any = "success") -> str:
    return json.dumps({"status": status, "data": {"resultType": result_type, "result": result}})


# Huge integers and deep nesting have tests of their own below.
bodies = st.one_of(
    st.builds(envelope, st.lists(elements, max_size=6)),
    st.builds(envelope, json_values(huge_ints=False), json_values(huge_ints=False)),
    st.builds(  # short error texts: long ones are test_long_error_text_is_echoed_whole's
        lambda kind, error: json.dumps({"status": "error", "errorType": kind, "error": error}),
        st.one_of(st.none(), st.integers(), st.text(max_size=100)),
        st.one_of(st.none(), st.integers(), st.text(max_size=300)),
    ),
    json_values(huge_ints=False).map(json.dumps),
    st.text(max_size=200),
    huge(st.text(min_size=1, max_size=8)),
)
statuses = st.sampled_from([200, 400, 422, 500, 503])


def vector(status: int, text: str) -> list[Sample]:
    return PrometheusClient(URL)._vector(status, text)


@FUZZ
@given(statuses, bodies)
def test_fuzz_prometheus_answer(status: int, text: str) -> None:
    try:
        samples = vector(status, text)
    except PrometheusError as error:
        assert bounded(error), len(str(error))
        return
    pods = sorted(
        {(s.labels.get(LABELS.namespace, ""), s.labels.get(LABELS.pod, "")) for s in samples}
    )
    windows = assemble_windows(samples, pods, 600.0, LABELS)
    assert set(windows) == set(pods)


def test_long_error_text_is_echoed_whole() -> None:
    text = json.dumps({"status": "error", "errorType": "bad_data", "error": "x" * 100_000})
    with pytest.raises(PrometheusError) as caught:
        vector(400, text)
    assert len(str(caught.value)) <= MAX_MESSAGE


def test_sample_value_too_large_for_a_float() -> None:
    text = envelope([{"metric": {}, "value": [1, 10**400]}])
    with pytest.raises(PrometheusError):
        vector(200, text)


def test_deeply_nested_body() -> None:
    with pytest.raises(PrometheusError):
        vector(200, "[" * 100_000 + "]" * 100_000)
