"""Fuzz the Dynamic Resource Allocation parsers: valid objects as the API serves them, with one
to three fields anywhere in them replaced by random JSON (huge strings and integers too), and
random objects. The parsers never raise, keep at most 32 errors of bounded size, and gathering
pools from what they return never raises either."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler.model.claims import (
    parse_resource_claim,
    parse_resource_claim_template,
    pod_claim_names,
)
from scheduler.model.device_classes import (
    parse_device_class,
    parse_device_taint_rule,
    with_taint_rules,
)
from scheduler.model.devices import parse_resource_slice
from scheduler.model.dra_fields import MAX_ERRORS
from scheduler.model.fields import MAX_ERRORS_TEXT, FieldError, sorted_errors
from scheduler.model.pools import gather_pools
from tests.dra_objects import (
    allocated,
    claim_template,
    device_class,
    gpu_device,
    node_selector,
    opaque,
    pod_ref,
    pod_with_claims,
    requirement,
    resource_claim,
    resource_slice,
    result,
    taint,
    taint_rule,
)
from tests.fuzzing import FUZZ, MAX_MESSAGE, json_values

SLICES = [
    resource_slice("s", devices=[gpu_device(0, taints=[taint("k")]), gpu_device(1)]),
    resource_slice(
        "p",
        node=None,
        pool="p",
        perDeviceNodeSelection=True,
        devices=[
            gpu_device(0, nodeSelector=node_selector(requirement("zone", "In", "z1"))),
            gpu_device(
                1,
                allNodes=True,
                allowMultipleAllocations=True,
                capacity={"memory": {"value": "1Gi", "requestPolicy": {"default": "1"}}},
                consumesCounters=[{"counterSet": "c", "counters": {"m": {"value": "1"}}}],
            ),
        ],
    ),
    resource_slice(
        "c",
        node=None,
        pool="p",
        allNodes=True,
        devices=[],
        sharedCounters=[{"name": "c", "counters": {"m": {"value": "2"}}}],
    ),
]
CLAIM = resource_claim(
    "c",
    status=allocated(
        result("gpus", "gpu-0"), result("gpus", "gpu-1"), reserved_for=[pod_ref("p", "u")]
    ),
)
OBJECTS: list[tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]] = [
    *[(body, parse_resource_slice) for body in SLICES],
    (CLAIM, parse_resource_claim),
    (claim_template("t"), parse_resource_claim_template),
    (device_class(extended_resource_name="example.com/gpu", config=[opaque()]), parse_device_class),
    (
        taint_rule("r", taint("k", timeAdded="2026-01-01T00:00:00Z"), driver="gpu.nvidia.com"),
        parse_device_taint_rule,
    ),
    (
        pod_with_claims(
            "p",
            [
                {"name": "a", "resourceClaimName": "c"},
                {"name": "b", "resourceClaimTemplateName": "t"},
            ],
            [{"name": "b", "resourceClaimName": "x"}],
        ),
        pod_claim_names,
    ),
]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indices)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replace(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    here: Any = obj
    for step in path[:-1]:
        here = here[step]
    here[path[-1]] = value


def check(errors: tuple[FieldError, ...]) -> None:
    assert len(errors) <= MAX_ERRORS
    assert all(len(str(error)) <= MAX_MESSAGE for error in errors)
    assert len(sorted_errors(errors)) <= MAX_ERRORS_TEXT


@FUZZ
@given(st.data())
def test_fuzz_dra_parsers_with_mutated_objects(data: st.DataObject) -> None:
    original, parse = data.draw(st.sampled_from(OBJECTS))
    body = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(1, 3))):
        candidates = paths(body)
        if not candidates:
            break
        replace(body, data.draw(st.sampled_from(candidates)), data.draw(json_values()))
    parsed = parse(body)
    check(parsed.errors)
    if parse is parse_resource_slice:
        rule = parse_device_taint_rule(taint_rule("r", taint("k")))
        tainted = with_taint_rules(parsed, [rule])
        for pool in gather_pools(
            [tainted, parse_resource_slice(SLICES[2])], "node-a", {"zone": "z1"}
        ):
            assert pool.usable or pool.problem


@FUZZ
@given(
    st.sampled_from([entry[1] for entry in OBJECTS[2:]] + [parse_resource_slice]),
    st.dictionaries(
        st.sampled_from(["metadata", "spec", "status", "x"]), json_values(), max_size=3
    ),
)
def test_fuzz_dra_parsers_with_random_objects(
    parse: Callable[[dict[str, Any]], Any], body: dict[str, Any]
) -> None:
    check(parse(body).errors)
