"""DynamicResources' filter with plain objects: the order of its per-node verdicts follows
kube-scheduler's Filter (the allocator runs first, "resourceclaim not available on the node"
only where allocation succeeds)."""

from __future__ import annotations

import numpy as np

from hack.localcluster import D8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.dra.cel import CelSelectors
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.dynamic_resources import (
    CANNOT_ALLOCATE,
    NOT_AVAILABLE,
    DynamicResources,
)
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


def test_the_allocator_verdict_comes_before_an_unavailable_allocated_claim() -> None:
    cache = ClusterCache()
    cache.dra.put_class(parse_device_class(gpu_device_class()))
    slices = ResourceSliceHandler(cache.dra)
    for node in ("a", "b", "c"):
        cache.add_or_update_node(parse_node(node_manifest(D8, node)))
        slices.on_add(node_resource_slice(node, f"uid-{node}", D8.gpu_model(), 8))
    # Node b has every GPU taken: nothing can be allocated there.
    taken = [result("gpus", f"gpu-{g}", pool="b") for g in range(8)]
    cache.dra.put_claim(
        parse_resource_claim(resource_claim("full", status=allocated(*taken, node="b")))
    )
    # The pod's first claim is allocated on node a only.
    shared = allocated(result("gpus", "gpu-0", pool="a"), node="a")
    cache.dra.put_claim(parse_resource_claim(resource_claim("on-a", status=shared)))
    spec = claim_spec(request("gpus", exact(DRIVER, count=2)))
    cache.dra.put_claim(parse_resource_claim(resource_claim("more", spec=spec)))
    pod = parse_pod(
        pod_with_claims(
            "p",
            [
                {"name": "first", "resourceClaimName": "on-a"},
                {"name": "second", "resourceClaimName": "more"},
            ],
        )
    )
    snapshot = Snapshot(cache)
    rejections = DynamicResources(CelSelectors()).filter(pod, snapshot, CycleState())
    verdicts = {
        r.reason: {snapshot.names[row] for row in np.flatnonzero(r.failed)} for r in rejections
    }
    assert verdicts == {CANNOT_ALLOCATE: {"b"}, NOT_AVAILABLE: {"c"}}
