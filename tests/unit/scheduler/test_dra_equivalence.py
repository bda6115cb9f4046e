"""Grouping nodes for the DRA allocator (`scheduler.dra.equivalence`): with random devices,
devices in use, taints, products and domains on many nodes, and random claims, the verdicts and
NVLink scores DynamicResources gives with grouping equal those of allocating on every node; the
chosen node's own allocations name its own pool; selectors that could read an identity attribute
turn grouping off."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from hack.localcluster import D4, D8
from hack.localcluster.dra import gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.dra import equivalence
from scheduler.dra.cel import CelSelectors
from scheduler.dra.equivalence import groupable
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.dynamic_resources import NAME, DynamicResources, PodClaimState, plan_claims
from scheduler.state.cache import ClusterCache
from scheduler.state.dra_handlers import ResourceClaimHandler, ResourceSliceHandler
from tests.dra_objects import (
    DRIVER,
    allocated,
    claim_spec,
    exact,
    pod_with_claims,
    request,
    resource_claim,
    result,
    taint,
)

SELECTORS = (
    f"device.attributes['{DRIVER}'].productName == 'NVIDIA H200'",
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('100Gi')) >= 0",
    "",
)


def cluster(rng: random.Random, nodes: int) -> ClusterCache:
    cache = ClusterCache()
    cache.dra.put_class(parse_device_class(gpu_device_class()))
    slices = ResourceSliceHandler(cache.dra)
    claims = ResourceClaimHandler(cache.dra)
    for index in range(nodes):
        spec = rng.choice((D8, D4))
        name = f"n-{index}"
        cache.add_or_update_node(parse_node(node_manifest(spec, name)))
        body = node_resource_slice(name, f"uid-{index}", spec.gpu_model(), spec.gpus)
        for device in body["spec"]["devices"]:
            if rng.random() < 0.1:
                device["taints"] = [taint("example.com/sick", "NoSchedule")]
        slices.on_add(body)
        taken = [g for g in range(spec.gpus) if rng.random() < 0.3]
        if taken:
            status = allocated(*(result("gpus", f"gpu-{g}", pool=name) for g in taken), node=name)
            claims.on_add(resource_claim(f"held-{index}", status=status))
    return cache


def claim_pod(cache: ClusterCache, rng: random.Random, k: int) -> Any:
    count = rng.choice((1, 2, 3, 4, 8))
    selector = rng.choice(SELECTORS)
    spec = claim_spec(
        request("gpus", exact(DRIVER, count=count, expressions=(selector,) if selector else ()))
    )
    body = resource_claim(f"c{k}", spec=spec, metadata={"uid": f"uid-c{k}"})
    cache.dra.put_claim(parse_resource_claim(body))
    return parse_pod(pod_with_claims(f"p{k}", [{"name": "gpus", "resourceClaimName": f"c{k}"}]))


def verdicts(
    plugin: DynamicResources, cache: ClusterCache, pod: Any
) -> tuple[dict[str, set[str]], list[float], CycleState]:
    snapshot = Snapshot(cache)
    state = CycleState()
    rejected: dict[str, set[str]] = {}
    for rejection in plugin.filter(pod, snapshot, state):
        rejected[rejection.reason] = {
            snapshot.names[row] for row in np.flatnonzero(rejection.failed)
        }
    feasible = snapshot.valid.copy()
    for names in rejected.values():
        for name in names:
            feasible[snapshot.names.index(name)] = False
    points = plugin.score(pod, snapshot, state, feasible)
    return rejected, ([] if points is None else [round(float(p), 6) for p in points]), state


@pytest.mark.parametrize("seed", range(12))
def test_grouped_verdicts_and_scores_equal_those_of_every_node_on_its_own(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    cache = cluster(rng, 40)
    matcher = CelSelectors()
    for k in range(4):
        pod = claim_pod(cache, rng, k)
        grouped = verdicts(DynamicResources(matcher), cache, pod)
        with monkeypatch.context() as patch:
            patch.setattr("scheduler.plugins.dynamic_resources.groupable", lambda *args: False)
            alone = verdicts(DynamicResources(matcher), cache, pod)
        assert grouped[0] == alone[0]
        assert grouped[1] == alone[1]
        claim_state = grouped[2].data[NAME]
        assert isinstance(claim_state, PodClaimState)
        snapshot = Snapshot(cache)
        for row in range(snapshot.rows):
            if row in claim_state.reasons:
                continue
            plan = plan_claims(grouped[2], row, pod)
            assert plan is not None
            for _, allocation in plan.allocate:
                assert {r.pool for r in allocation.results} == {snapshot.names[row]}
            expected = alone[2].data[NAME].allocations[row]
            assert [a.results for _, a in plan.allocate] == [a.results for a in expected]


def test_selectors_that_may_read_an_identity_attribute_turn_grouping_off() -> None:
    classes = {DRIVER: parse_device_class(gpu_device_class())}

    def claims(*expressions: str) -> list[Any]:
        spec = claim_spec(request("gpus", exact(DRIVER, count=1, expressions=expressions)))
        return [parse_resource_claim(resource_claim("c", spec=spec))]

    assert groupable(claims(f"device.attributes['{DRIVER}'].productName == 'x'"), classes)
    assert not groupable(claims(f"device.attributes['{DRIVER}'].uuid == 'GPU-1'"), classes)
    assert not groupable(claims(f"device.attributes['{DRIVER}'].exists(k, k == 'x')"), classes)
    assert not groupable(
        claims("cel.bind(a, device.attributes['gpu.nvidia.com'], a.productName == 'x')"),
        classes,
    )
    pci = "device.attributes['resource.kubernetes.io'].pciBusID == '0000:01:00.0'"
    assert not groupable(claims(pci), classes)
    assert equivalence.IDENTITY_ATTRIBUTES
