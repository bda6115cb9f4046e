"""DynamicResources on nodes whose GPUs allow multiple allocations (the local cluster's S8): a
fractional claim scores highest on a node where it fits a GPU already shared, above nodes where
it would break a whole GPU; the grouping of equal nodes tells nodes apart by their shares; a
whole-GPU claim is still scored by the NVLink rules."""

from __future__ import annotations

import numpy as np

from hack.localcluster import S8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.dra.cel import CelSelectors
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.dynamic_resources import DynamicResources, PodClaimState
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

NODES = ("s8-0", "s8-1", "s8-2")


def shared_cache() -> ClusterCache:
    """Three S8 nodes: s8-1 has a 10Gi share on gpu-6, s8-2 a whole GPU taken on gpu-0."""
    cache = ClusterCache()
    cache.dra.put_class(parse_device_class(gpu_device_class()))
    slices = ResourceSliceHandler(cache.dra)
    for node in NODES:
        cache.add_or_update_node(parse_node(node_manifest(S8, node)))
        slices.on_add(node_resource_slice(node, f"uid-{node}", S8.gpu_model(), 8, shared=True))
    partly = result(
        "gpus",
        "gpu-6",
        pool="s8-1",
        shareID="00000000-0000-4000-8000-000000000001",
        consumedCapacity={"memory": "10Gi"},
    )
    wholly = result(
        "gpus",
        "gpu-0",
        pool="s8-2",
        shareID="00000000-0000-4000-8000-000000000002",
        consumedCapacity={"memory": "140Gi"},
    )
    for name, node, entry in (("partly", "s8-1", partly), ("wholly", "s8-2", wholly)):
        claim = parse_resource_claim(resource_claim(name, status=allocated(entry, node=node)))
        assert not claim.errors, claim.errors
        cache.dra.put_claim(claim)
    return cache


def scores(
    cache: ClusterCache, spec_json: dict[str, object]
) -> tuple[dict[str, float], dict[str, list[str]]]:
    cache.dra.put_claim(parse_resource_claim(resource_claim("mine", spec=spec_json)))
    pod = parse_pod(pod_with_claims("p", [{"name": "g", "resourceClaimName": "mine"}]))
    snapshot = Snapshot(cache)
    state = CycleState()
    plugin = DynamicResources(CelSelectors())
    assert plugin.filter(pod, snapshot, state) == []
    feasible = np.ones(snapshot.rows, dtype=bool)  # feasible: (rows,)
    points = plugin.score(pod, snapshot, state, feasible)
    assert points is not None
    claim_state = state.data["DynamicResources"]
    assert isinstance(claim_state, PodClaimState)
    chosen = {
        snapshot.names[row]: [r.device for r in (claim_state.allocations_for(row) or ())[0].results]
        for row in range(snapshot.rows)
    }
    return {snapshot.names[row]: float(points[row]) for row in range(snapshot.rows)}, chosen


def test_a_fraction_scores_best_where_a_gpu_is_already_shared() -> None:
    spec = claim_spec(request("gpus", exact(DRIVER, capacity={"requests": {"memory": "10Gi"}})))
    points, chosen = scores(shared_cache(), spec)
    assert chosen == {"s8-0": ["gpu-0"], "s8-1": ["gpu-6"], "s8-2": ["gpu-1"]}
    assert points == {"s8-0": 31.0, "s8-1": MAX_SCORE, "s8-2": 31.0}


def test_a_whole_gpu_claim_breaks_the_broken_domain_and_scores_by_nvlink() -> None:
    spec = claim_spec(request("gpus", exact(DRIVER, count=4)))
    points, chosen = scores(shared_cache(), spec)
    assert chosen["s8-1"] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]  # domain 4-7 is broken
    assert chosen["s8-2"] == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    # Each node gives one whole domain: the NVLink rules score them alike, below a packed share.
    assert len(set(points.values())) == 1 and points["s8-0"] < MAX_SCORE
