"""The claim for a pod's extended resources (nvidia.com/gpu served by a DeviceClass on a node
without GPU allocatable) in the binding cycle: created, allocated and reserved, the pod's status
written, bound; when a later step fails, the claim is released and deleted, so nothing holds
devices for a pod that was not bound."""

from __future__ import annotations

from typing import Any

from scheduler.model.device_classes import parse_device_class
from scheduler.model.objects import parse_pod
from tests.dra_objects import device_class
from tests.unit.scheduler.claim_api_double import DraHarness, dra_harness

POD = "default/trainer"
GPU = "nvidia.com/gpu"


def extended_harness() -> DraHarness:
    d = dra_harness()
    d.h.cache.dra.put_class(parse_device_class(device_class(extended_resource_name=GPU)))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default", "uid": "uid-trainer",
                     "resourceVersion": "1"},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "containers": [{"name": "main", "resources": {"limits": {GPU: "2"}}}],
        },
        "status": {"phase": "Pending"},
    }  # fmt: skip
    d.h.add(parse_pod(pod))
    return d


def created_keys(d: DraHarness) -> list[str]:
    return [key for kind, key, _ in d.resource.writes if kind == "create"]


def extended_status(patches: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        body["status"]["extendedResourceClaimStatus"]
        for _, _, body in patches
        if "extendedResourceClaimStatus" in body.get("status", {})
    ]


async def test_the_claim_is_created_allocated_reserved_and_named_in_the_pod_status() -> None:
    d = extended_harness()
    await d.h.cycle()
    [key] = created_keys(d)
    claim = d.resource.claim(key)
    assert key.startswith("default/trainer-extended-resources-")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == ["uid-trainer"]
    [status] = extended_status(d.h.core.patches)
    assert status["resourceClaimName"] == key.partition("/")[2]
    assert [b["metadata"]["name"] for b in d.h.core.bindings] == ["trainer"]


async def test_a_refused_pod_status_write_deletes_the_created_claim() -> None:
    d = extended_harness()
    d.h.core.patch_outcomes.append((403, "forbidden"))
    await d.h.cycle()
    [key] = created_keys(d)
    assert d.resource.deleted == [key]
    assert d.h.core.bindings == []
    assert d.h.queue.where(POD) == "backoff"
    assert d.h.cache.dra.in_flight_for(POD) == {}
    assert d.h.cache.dra.in_use() == frozenset()


async def test_a_refused_binding_deletes_the_created_claim() -> None:
    d = extended_harness()
    d.h.core.bind_outcomes.append((409, "conflict"))
    await d.h.cycle()
    [key] = created_keys(d)
    assert d.resource.deleted == [key]
    assert d.h.queue.where(POD) == "backoff"
    assert d.h.cache.dra.in_flight_for(POD) == {}


async def test_a_refused_create_writes_nothing_else() -> None:
    d = extended_harness()
    d.resource.create_outcomes.append((403, "forbidden"))
    await d.h.cycle()
    assert created_keys(d) == [] and d.resource.deleted == []
    assert extended_status(d.h.core.patches) == [] and d.h.core.bindings == []
    assert d.h.queue.where(POD) == "backoff"
