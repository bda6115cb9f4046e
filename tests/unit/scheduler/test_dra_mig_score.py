"""DynamicResources on nodes whose GPUs are published whole and as every MIG placement (the
local cluster's M8): a GPU counts once however many of its placements are taken, a placement on
a GPU already partitioned breaks no free GPU, and nodes are ranked by what the placement costs
its GPU (`scheduler.dra.node_score`): the least loss of the largest placement possible there,
then the most fragmented GPU."""

from __future__ import annotations

import numpy as np
import pytest

from hack.localcluster import M8
from hack.localcluster.dra import H200_GPU
from hack.localcluster.dra_mig import MIG_CLASS, mig_device_class, mig_resource_slices
from hack.localcluster.nodes import node_manifest
from scheduler.dra.cel import CelSelectors
from scheduler.dra.consumable import DeviceUse
from scheduler.dra.domains import device_domains
from scheduler.dra.node_score import (
    DomainOccupancy,
    domain_occupancy,
    occupancy_points,
    partition_points,
)
from scheduler.dra.partitions import PartitionCost, Partitions
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.allocations import Allocation, DeviceResult
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.objects import parse_node, parse_pod
from scheduler.model.pools import Pool, gather_pools
from scheduler.plugins.dynamic_resources import DynamicResources
from scheduler.state.cache import ClusterCache
from scheduler.state.dra_handlers import ResourceSliceHandler
from tests.dra_objects import (
    DRIVER,
    allocated,
    claim_spec,
    exact,
    pod_with_claims,
    request,
    resource_claim,
    result,
)
from topology.scoring import MAX_SCORE

GPUS = 8


def one_g() -> dict[str, object]:
    selector = f"device.attributes['{DRIVER}'].profile == '1g.18gb'"
    return claim_spec(request("gpus", exact(MIG_CLASS, count=1, expressions=[selector])))


def node_pools(node: str) -> tuple[Pool, ...]:
    slices = [parse_resource_slice(s) for s in mig_resource_slices(node, "uid", H200_GPU, GPUS)]
    return gather_pools(slices, node, {})


def taking(node: str, *devices: str) -> Allocation:
    return Allocation(tuple(DeviceResult("mig", DRIVER, node, device) for device in devices))


def test_a_gpu_counts_once_however_many_placements_are_taken() -> None:
    pools = node_pools("m")
    domains = device_domains({}, pools)
    held = frozenset({(DRIVER, "m", "gpu-0-mig-1g-18gb-5"), (DRIVER, "m", "gpu-0-mig-1g-18gb-6")})
    use = DeviceUse(taken=held)
    beside = domain_occupancy(domains, use, (taking("m", "gpu-0-mig-1g-18gb-4"),))
    assert beside is not None
    # before: two 1g devices were counted as two whole GPUs of domain 0 (free 2 of 4)
    assert beside.free == (3, 4)
    assert beside.wanted == 0  # gpu-0 is partitioned already: no free GPU broken
    breaking = domain_occupancy(domains, use, (taking("m", "gpu-1-mig-1g-18gb-6"),))
    assert breaking is not None and breaking.wanted == 1
    whole = domain_occupancy(domains, use, (taking("m", "gpu-4"),))
    assert whole is not None and whole.wanted == 1 and whole.cost is None


def test_partition_points_rank_loss_then_fragmentation_then_nvlink() -> None:
    none_lost = partition_points(PartitionCost(0.0, 0.5), MAX_SCORE)
    fragmented = partition_points(PartitionCost(0.0, 0.25), MAX_SCORE)
    slice_lost = partition_points(PartitionCost(1 / 8, 0.25), MAX_SCORE)
    assert fragmented > none_lost > slice_lost
    assert none_lost - slice_lost > MAX_SCORE / 8 - 1  # a slice lost outweighs the rest
    packed = partition_points(PartitionCost(0.5, 1.0), 90.0)
    spread = partition_points(PartitionCost(0.5, 1.0), 10.0)
    assert 0 < packed - spread < 0.1
    assert partition_points(PartitionCost(1.2, 1.0), 0.0) == 0.0


def test_occupancy_points_use_the_cost_where_there_is_one() -> None:
    whole = DomainOccupancy((4, 4), (4, 4), 1)
    shared = DomainOccupancy((3, 4), (4, 4), 0)
    mig = DomainOccupancy((3, 4), (4, 4), 0, PartitionCost(0.0, 0.5))
    points = occupancy_points([whole, shared, mig])
    assert points[1] == MAX_SCORE
    assert points[2] == pytest.approx(MAX_SCORE - 0.5)
    assert 0 < points[0] < points[2]


NODES = ("m-a", "m-b", "m-c")


def mig_cache() -> ClusterCache:
    """Three M8 nodes: m-a holds a 1g at slice 6 of gpu-0 (a 4g still possible there), m-b a
    1g at slice 0 of gpu-0 (a 3g still possible), m-c nothing."""
    cache = ClusterCache()
    cache.dra.put_class(parse_device_class(mig_device_class()))
    slices = ResourceSliceHandler(cache.dra)
    for node in NODES:
        cache.add_or_update_node(parse_node(node_manifest(M8, node)))
        for body in mig_resource_slices(node, f"uid-{node}", H200_GPU, GPUS):
            slices.on_add(body)
    for node, device in (("m-a", "gpu-0-mig-1g-18gb-6"), ("m-b", "gpu-0-mig-1g-18gb-0")):
        status = allocated(result("gpus", device, pool=node), node=node)
        body = resource_claim(f"held-{node}", spec=one_g(), status=status)
        claim = parse_resource_claim(body)
        assert not claim.errors, claim.errors
        cache.dra.put_claim(claim)
    return cache


def test_nodes_ranked_by_what_the_placement_costs_its_gpu() -> None:
    cache = mig_cache()
    cache.dra.put_claim(parse_resource_claim(resource_claim("mine", spec=one_g())))
    pod = parse_pod(pod_with_claims("p", [{"name": "g", "resourceClaimName": "mine"}]))
    snapshot = Snapshot(cache)
    state = CycleState()
    plugin = DynamicResources(CelSelectors())
    assert plugin.filter(pod, snapshot, state) == []
    points = plugin.score(pod, snapshot, state, np.ones(snapshot.rows, dtype=bool))
    assert points is not None
    by_node = {name: float(points[row]) for row, name in enumerate(snapshot.names)}
    # m-b: nothing lost, its GPU the most fragmented; m-a: nothing lost; m-c: a whole GPU broken
    assert by_node["m-b"] > by_node["m-a"] > MAX_SCORE - 1 > 60 > by_node["m-c"]


def test_nodes_with_shared_counters_are_each_allocated_on_their_own() -> None:
    """Regression: the verdict of a node the grouping of equal nodes does not cover (a pool
    with shared counters) was cached under one key for all such nodes, so a full M8 node was
    let through because the first M8 node had room."""
    cache = mig_cache()
    every = [result("gpus", f"gpu-{i}", pool="m-c") for i in range(GPUS)]
    status = allocated(*every, node="m-c")
    whole = claim_spec(request("gpus", exact(count=GPUS)))
    cache.dra.put_claim(parse_resource_claim(resource_claim("all", spec=whole, status=status)))
    cache.dra.put_claim(parse_resource_claim(resource_claim("mine", spec=one_g())))
    pod = parse_pod(pod_with_claims("p", [{"name": "g", "resourceClaimName": "mine"}]))
    snapshot = Snapshot(cache)
    [rejection] = DynamicResources(CelSelectors()).filter(pod, snapshot, CycleState())
    assert [snapshot.names[r] for r in np.flatnonzero(rejection.failed)] == ["m-c"]


def test_partitions_of_a_node_without_slotted_counters_are_empty() -> None:
    assert not Partitions.of_pools(())
