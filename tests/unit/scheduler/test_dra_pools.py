"""Resource pools as one node sees them, gathered from parsed ResourceSlices as kube-scheduler's
allocator does (GatherPools): newest generation, incomplete and obsolete pools, invalid pools,
node visibility by nodeName, nodeSelector, allNodes and per-device selection."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.devices import ResourceSlice, parse_resource_slice
from scheduler.model.pools import Pool, PoolID, gather_pools, slice_matches_node
from tests.dra_objects import (
    DRIVER,
    gpu_device,
    node_selector,
    requirement,
    resource_slice,
)

NODE = "node-a"
LABELS = {"topology.kubernetes.io/zone": "z1", "nvidia.com/gpu.clique": "c1"}


def parsed(name: str, **kwargs: Any) -> ResourceSlice:
    found = parse_resource_slice(resource_slice(name, **kwargs))
    return found


def gpus(*indices: int, node: str = NODE, **fields: Any) -> list[dict[str, Any]]:
    return [gpu_device(i, node=node, **fields) for i in indices]


def device_names(pool: Pool) -> list[str]:
    return [entry.device.name for entry in pool.devices]


def test_one_complete_node_local_pool() -> None:
    [pool] = gather_pools([parsed("s")], NODE, LABELS)
    assert pool.id == PoolID(DRIVER, NODE) and str(pool.id) == f"{DRIVER}/{NODE}"
    assert pool.usable and pool.problem == "" and pool.generation == 1
    assert device_names(pool) == [f"gpu-{i}" for i in range(8)]
    assert {entry.slice_name for entry in pool.devices} == {"s"}
    assert pool.devices_elsewhere == ()


def test_the_newest_generation_wins_in_any_order() -> None:
    old = parsed("old", generation=1, devices=gpus(0, 1, 2, 3, 4, 5, 6, 7))
    new = parsed("new", generation=2, devices=gpus(0, 1, 2, 3))
    for order in ([old, new], [new, old]):
        [pool] = gather_pools(order, NODE, LABELS)
        assert pool.generation == 2 and device_names(pool) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_a_pool_missing_a_slice_is_incomplete_and_says_so() -> None:
    first = parsed("half-1", slice_count=2, devices=gpus(0, 1, 2, 3))
    [pool] = gather_pools([first], NODE, LABELS)
    assert pool.incomplete and not pool.usable and pool.devices == ()
    assert pool.problem == f"resource pool {DRIVER}/{NODE} is currently being updated"
    second = parsed("half-2", slice_count=2, devices=gpus(4, 5, 6, 7))
    [whole] = gather_pools([first, second], NODE, LABELS)
    assert whole.usable and device_names(whole) == [f"gpu-{i}" for i in range(8)]


def test_too_many_slices_at_one_generation_is_incomplete_too() -> None:
    slices = [parsed(f"s{i}", devices=gpus(i)) for i in range(2)]
    [pool] = gather_pools(slices, NODE, LABELS)
    assert pool.incomplete


def test_slices_the_node_does_not_see_complete_the_pool() -> None:
    here = parsed("here", pool="rack-1", slice_count=2, devices=gpus(0, 1))
    there = parsed("there", node="node-b", pool="rack-1", slice_count=2, devices=gpus(2, 3))
    [pool] = gather_pools([here, there], NODE, LABELS)
    assert pool.usable and device_names(pool) == ["gpu-0", "gpu-1"]
    assert [entry.device.name for entry in pool.devices_elsewhere] == ["gpu-2", "gpu-3"]
    assert [str(p.id) for p in gather_pools([there], NODE, LABELS)] == []


def test_a_pool_being_replaced_elsewhere_is_left_out() -> None:
    here = parsed("here", pool="rack-1", generation=1, slice_count=2, devices=gpus(0, 1))
    newer = parsed("newer", node="node-b", pool="rack-1", generation=2, devices=gpus(2, 3))
    assert gather_pools([here, newer], NODE, LABELS) == ()


def test_a_device_name_repeated_across_the_nodes_slices_makes_the_pool_invalid() -> None:
    one = parsed("s1", slice_count=2, devices=gpus(0, 1))
    two = parsed("s2", slice_count=2, devices=gpus(1, 2))
    [pool] = gather_pools([one, two], NODE, LABELS)
    assert pool.invalid == "duplicate device name gpu-1" and pool.devices == ()
    assert pool.problem == (
        f"resource pool {DRIVER}/{NODE} is currently invalid: duplicate device name gpu-1"
    )


def test_a_slice_with_errors_makes_its_pool_invalid() -> None:
    body = resource_slice("broken", devices=gpus(0))
    body["spec"]["devices"][0]["attributes"]["uuid"] = {"string": 7}
    broken = parse_resource_slice(body)
    assert broken.errors
    [pool] = gather_pools([broken], NODE, LABELS)
    assert pool.invalid.startswith("ResourceSlice broken: spec.devices[0].attributes[uuid]")


COUNTERS = [
    {"name": "gpu-0-counter-set", "counters": {"memory": {"value": "143771Mi"}}},
]


def partition(memory: str, counter_set: str = "gpu-0-counter-set", counter: str = "memory") -> Any:
    return gpu_device(
        0,
        name=f"gpu-0-part-{memory.lower()}",
        consumesCounters=[{"counterSet": counter_set, "counters": {counter: {"value": memory}}}],
    )


@pytest.mark.parametrize(
    ("counter_sets", "device", "reason"),
    [
        (COUNTERS, partition("18Gi"), ""),
        (
            COUNTERS,
            partition("18Gi", counter_set="gpu-9-counter-set"),
            "counter set gpu-9-counter-set not found",
        ),
        (
            COUNTERS,
            partition("18Gi", counter="decoders"),
            "counter decoders not found in counter set gpu-0-counter-set",
        ),
    ],
    ids=["consumes-what-exists", "unknown-set", "unknown-counter"],
)
def test_counters_a_device_consumes_must_exist_in_the_pool(
    counter_sets: list[Any], device: Any, reason: str
) -> None:
    shared = parsed("a-counters", devices=[], slice_count=2, sharedCounters=counter_sets)
    partitions = parsed("b-partitions", devices=[device], slice_count=2)
    [pool] = gather_pools([shared, partitions], NODE, LABELS)
    assert pool.invalid == reason
    if not reason:
        assert list(pool.counter_sets) == ["gpu-0-counter-set"]
        assert device_names(pool) == ["gpu-0-part-18gi"]


def test_a_counter_set_defined_twice_makes_the_pool_invalid() -> None:
    one = parsed("c1", devices=[], slice_count=2, sharedCounters=COUNTERS)
    two = parsed("c2", devices=[], slice_count=2, sharedCounters=COUNTERS)
    [pool] = gather_pools([one, two], NODE, LABELS)
    assert pool.invalid == "duplicate counter set name gpu-0-counter-set"


@pytest.mark.parametrize(
    ("spec", "sees"),
    [
        ({"node": NODE}, True),
        ({"node": "node-b"}, False),
        ({"node": None, "allNodes": True}, True),
        (
            {
                "node": None,
                "nodeSelector": node_selector(requirement("nvidia.com/gpu.clique", "In", "c1")),
            },
            True,
        ),
        (
            {
                "node": None,
                "nodeSelector": node_selector(requirement("nvidia.com/gpu.clique", "In", "c2")),
            },
            False,
        ),
        (
            {
                "node": None,
                "nodeSelector": node_selector(fields=[requirement("metadata.name", "In", NODE)]),
            },
            True,
        ),
        ({"node": None}, False),
    ],
    ids=[
        "nodeName",
        "other-nodeName",
        "allNodes",
        "selector",
        "other-selector",
        "field",
        "nothing",
    ],
)
def test_node_visibility(spec: dict[str, Any], sees: bool) -> None:
    resource_slice_ = parsed("s", pool="p", **spec)
    assert slice_matches_node(resource_slice_, NODE, LABELS) is sees
    assert bool(gather_pools([resource_slice_], NODE, LABELS)) is sees


def test_per_device_node_selection() -> None:
    devices = [
        gpu_device(0, nodeName=NODE),
        gpu_device(1, nodeName="node-b"),
        gpu_device(2, allNodes=True),
        gpu_device(
            3, nodeSelector=node_selector(requirement("topology.kubernetes.io/zone", "In", "z1"))
        ),
    ]
    mixed = parsed("s", node=None, pool="fabric", perDeviceNodeSelection=True, devices=devices)
    assert mixed.errors == ()
    [pool] = gather_pools([mixed], NODE, LABELS)
    assert device_names(pool) == ["gpu-0", "gpu-2", "gpu-3"]
    assert [entry.device.name for entry in pool.devices_elsewhere] == ["gpu-1"]
    only_b = parsed(
        "t", node=None, pool="fabric", perDeviceNodeSelection=True, devices=devices[1:2]
    )
    assert gather_pools([only_b], NODE, LABELS) == ()


def test_pools_are_sorted_with_binding_conditions_last() -> None:
    waiting = gpu_device(
        0, bindsToNode=True, bindingConditions=["Attached"], bindingFailureConditions=["Failed"]
    )
    slices = [
        parsed("z", pool="zz"),
        parsed("w", pool="aa-waits", devices=[waiting]),
        parsed("a", pool="aa"),
        parsed("n", pool="aa", driver="nic.example.com", devices=gpus(0)),
    ]
    assert all(s.errors == () for s in slices)
    order = [str(pool.id) for pool in gather_pools(slices, NODE, LABELS)]
    assert order == [f"{DRIVER}/aa", f"{DRIVER}/zz", "nic.example.com/aa", f"{DRIVER}/aa-waits"]


def test_unparseable_slices_belong_to_no_pool() -> None:
    body = resource_slice("s")
    del body["spec"]["driver"]
    assert gather_pools([parse_resource_slice(body)], NODE, LABELS) == ()
