"""What the allocator writes for a claim: result fields, configs (class configs first, claim
configs for the requests and chosen entries, "all" when they cover every request), the node
selector from nodeName / nodeSelector / allNodes / per-device selection / bindsToNode; shared
counters of partitionable devices."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.dra.allocator import CANNOT_ALLOCATE, NodeAllocation
from scheduler.dra.allocator_results import node_local
from scheduler.model.fields import NodeSelectorTerm, SelectorRequirement
from scheduler.model.node_selection import NodeSelector
from tests.dra_objects import (
    DRIVER,
    exact,
    gpu_device,
    node_selector,
    opaque,
    request,
    requirement,
    toleration,
)
from tests.unit.scheduler.test_dra_alloc_support import (
    NODE,
    allocate,
    device_names,
    gpu_id,
    gpus,
    make_claim,
    make_class,
    node_slice,
    pools_of,
)

EIGHT_SLICE = node_slice()


def kinds(allocation: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    """(kind parameter, source, requests) of each config."""
    return [
        (json.loads(config.parameters)["kind"], config.source, config.requests)
        for config in allocation.config
    ]


def test_result_fields() -> None:
    claim = make_claim(
        "c",
        request("gpus", exact(count=2, adminAccess=True, tolerations=[toleration("k", "Exists")])),
    )
    result = allocate([claim], pools_of(EIGHT_SLICE), slices=[EIGHT_SLICE])
    assert result.allocations is not None
    [allocation] = result.allocations
    first = allocation.results[0]
    assert (first.request, first.driver, first.pool, first.device) == (
        "gpus",
        DRIVER,
        NODE,
        "gpu-0",
    )
    assert first.admin_access and first.share_id == "" and dict(first.consumed_capacity) == {}
    assert [t.key for t in first.tolerations] == ["k"]
    assert allocation.node_selector == node_local(NODE)


def test_configs_follow_upstreams_order_and_request_names() -> None:
    classes = {
        DRIVER: make_class(config=[opaque({"kind": "C1"})]),
        "other": make_class("other", config=[opaque({"kind": "C2"}), opaque({"kind": "C3"})]),
    }
    claim = make_claim(
        "c",
        request("a", exact()),
        request("b", None, exact("other", count=9, name="x"), exact("other", name="y")),
        config=[
            opaque({"kind": "K1"}),
            opaque({"kind": "K2"}, requests=["a"]),
            opaque({"kind": "K3"}, requests=["b/x"]),
            opaque({"kind": "K4"}, requests=["b/y"]),
            opaque({"kind": "K5"}, requests=["a", "b"]),
        ],
    )
    result = allocate([claim], pools_of(EIGHT_SLICE), classes=classes)
    assert result.allocations is not None
    assert kinds(result.allocations[0]) == [
        ("C1", "FromClass", ("a",)),
        ("C2", "FromClass", ("b/y",)),
        ("C3", "FromClass", ("b/y",)),
        ("K1", "FromClaim", ()),
        ("K2", "FromClaim", ("a",)),
        ("K4", "FromClaim", ("b/y",)),
        ("K5", "FromClaim", ()),
    ]


def test_a_class_config_used_by_every_request_applies_to_all() -> None:
    classes = {DRIVER: make_class(config=[opaque({"kind": "C1"})])}
    claim = make_claim("c", request("a", exact()), request("b", exact()))
    result = allocate([claim], pools_of(EIGHT_SLICE), classes=classes)
    assert result.allocations is not None
    assert kinds(result.allocations[0]) == [("C1", "FromClass", ())]
    one = make_claim("c", request("a", exact()), request("b", exact("other")))
    classes["other"] = make_class("other")
    result = allocate([one], pools_of(EIGHT_SLICE), classes=classes)
    assert result.allocations is not None
    assert kinds(result.allocations[0]) == [("C1", "FromClass", ("a",))]


ZONE = requirement("zone", "In", "z1")
RACK = requirement("zone", "NotIn", "z9")


def term(*expressions: dict[str, Any]) -> NodeSelector:
    return NodeSelector(
        (
            NodeSelectorTerm(
                tuple(
                    SelectorRequirement(e["key"], e["operator"], tuple(e.get("values", ())))
                    for e in expressions
                ),
                (),
            ),
        )
    )


@pytest.mark.parametrize(
    ("slices", "count", "expected"),
    [
        ([{"node": NODE}], 1, node_local(NODE)),
        ([{"node": None, "allNodes": True}], 1, None),
        ([{"node": None, "nodeSelector": node_selector(ZONE)}], 1, term(ZONE)),
        (
            [
                {"node": None, "nodeSelector": node_selector(ZONE)},
                {"node": None, "nodeSelector": node_selector(ZONE, RACK)},
            ],
            2,
            term(ZONE, RACK),
        ),
        (
            [{"node": None, "allNodes": True}, {"node": NODE}],
            2,
            node_local(NODE),
        ),
    ],
    ids=["node-name", "all-nodes", "selector", "union-of-selectors", "one-local-device"],
)
def test_node_selector(
    slices: list[dict[str, Any]], count: int, expected: NodeSelector | None
) -> None:
    parsed = [
        node_slice(f"s{index}", pool=f"p{index}", devices=gpus(index), **spec)
        for index, spec in enumerate(slices)
    ]
    claim = make_claim("c", request("gpus", exact(count=count)))
    result = allocate([claim], pools_of(*parsed), slices=parsed)
    assert result.allocations is not None
    assert result.allocations[0].node_selector == expected


def test_node_selector_of_per_device_selection_binding_and_unknown_slices() -> None:
    devices = [gpu_device(0, allNodes=True), gpu_device(1, nodeName=NODE)]
    per_device = node_slice(
        "s", node=None, pool="fabric", perDeviceNodeSelection=True, devices=devices
    )
    one = make_claim("c", request("gpus", exact()))
    two = make_claim("c", request("gpus", exact(count=2)))
    pools = pools_of(per_device)
    assert selector_of(allocate([one], pools, slices=[per_device])) is None
    assert selector_of(allocate([two], pools, slices=[per_device])) == node_local(NODE)
    binds = node_slice("b", node=None, allNodes=True, pool="b", devices=gpus(0, bindsToNode=True))
    assert selector_of(allocate([one], pools_of(binds), slices=[binds])) == node_local(NODE)
    # A slice the caller did not pass: local to the node, the narrowest true answer.
    shared = node_slice("n", node=None, allNodes=True, pool="n", devices=gpus(0))
    assert selector_of(allocate([one], pools_of(shared))) == node_local(NODE)


def selector_of(result: NodeAllocation) -> NodeSelector | None:
    assert result.allocations is not None, result.reason
    return result.allocations[0].node_selector


def partition(index: int, memory: str) -> dict[str, Any]:
    return gpu_device(
        index,
        name=f"gpu-{index}",
        consumesCounters=[{"counterSet": "gpu-0-set", "counters": {"memory": {"value": memory}}}],
    )


def test_shared_counters_limit_partitions() -> None:
    counters = node_slice(
        "a",
        devices=[],
        slice_count=2,
        sharedCounters=[{"name": "gpu-0-set", "counters": {"memory": {"value": "100Gi"}}}],
    )
    parts = node_slice(
        "b",
        slice_count=2,
        devices=[partition(0, "60Gi"), partition(1, "60Gi"), partition(2, "40Gi")],
    )
    pools = pools_of(counters, parts)
    assert pools[0].usable
    two = make_claim("c", request("gpus", exact(count=2)))
    assert device_names(allocate([two], pools)) == ["gpu-0", "gpu-2"]
    three = make_claim("c", request("gpus", exact(count=3)))
    assert allocate([three], pools).reason == CANNOT_ALLOCATE
    # gpu-0 allocated elsewhere holds 60Gi: gpu-1 no longer fits, gpu-2 does.
    one_each = [make_claim(n, request("gpus", exact())) for n in ("x", "y")]
    result = allocate(one_each, pools, in_use=frozenset({gpu_id(0)}))
    assert result.reason == CANNOT_ALLOCATE
    assert device_names(allocate(one_each[:1], pools, in_use=frozenset({gpu_id(0)}))) == ["gpu-2"]
