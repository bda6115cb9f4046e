"""Fuzz `parse_pod` and `parse_node` with random JSON-like objects: they never raise, every
field error is bounded, and the records keep their invariants."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scheduler.model.fields import MAX_ERRORS_TEXT, sorted_errors
from scheduler.model.objects import MAX_NODE_GPUS, parse_node, parse_pod
from scheduler.model.resources import GPU
from tests.fuzzing import FUZZ, MAX_MESSAGE, json_values, nodes, pods


def check_errors(errors: tuple[Any, ...]) -> None:
    for error in errors:
        assert len(str(error)) <= MAX_MESSAGE, len(str(error))
    assert len(sorted_errors(errors)) <= MAX_ERRORS_TEXT


@FUZZ
@given(st.one_of(pods(), st.dictionaries(st.text(max_size=10), json_values(), max_size=4)))
def test_fuzz_parse_pod(obj: dict[str, Any]) -> None:
    pod = parse_pod(obj)
    check_errors(pod.errors)
    assert pod.requests.dtype == np.int64 and pod.requests.shape == (5,)
    assert (pod.requests >= 0).all()
    assert pod.gpus == int(pod.requests[GPU])
    assert all(amount > 0 for amount in pod.mig.values())


@FUZZ
@given(st.one_of(nodes(), st.dictionaries(st.text(max_size=10), json_values(), max_size=4)))
def test_fuzz_parse_node(obj: dict[str, Any]) -> None:
    node = parse_node(obj)
    check_errors(node.errors)
    assert node.allocatable.dtype == np.int64 and (node.allocatable >= 0).all()
    assert 0 <= node.topology.gpu_count == int(node.allocatable[GPU]) <= MAX_NODE_GPUS
