"""Opaque sharing configuration (the NVIDIA DRA driver's GpuConfig with time-slicing or MPS)
passes through the allocation untouched: `status.allocation.devices.config` carries the class's
configs (FromClass) and then the claim's (FromClaim), each `opaque.parameters` exactly as
written, as upstream's allocator copies `DeviceConfiguration`
(`k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/incubating/allocator_incubating.go`, "Populate configs"). One difference
from upstream, in `scheduler.dra.allocator_results`: a config that covers every request of the
claim is written without `requests` (empty means all), where upstream lists the request
names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scheduler.kube.claims import allocation_json
from tests.dra_objects import DRIVER, exact, opaque, request
from tests.unit.scheduler.test_dra_alloc_support import (
    allocate,
    make_claim,
    make_class,
    node_slice,
    pools_of,
)

TIME_SLICING = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}
MPS = {
    "kind": "GpuConfig",
    "apiVersion": "resource.nvidia.com/v1beta1",
    "sharing": {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
            "defaultPerDevicePinnedMemoryLimit": {"0": "5Gi"},
        },
    },
    "unknownField": [1.5, None, True, "ü"],
}


def written(claim_config: list[dict[str, Any]], class_config: list[dict[str, Any]]) -> Any:
    """`status.allocation.devices.config` the scheduler would write for a two-GPU claim."""
    classes = {DRIVER: make_class(config=class_config)}
    claim = make_claim("c", request("gpus", exact(count=2)), config=claim_config)
    result = allocate([claim], pools_of(node_slice()), classes=classes)
    assert result.allocations is not None
    body = allocation_json(result.allocations[0], datetime(2026, 1, 1, tzinfo=UTC))
    return body["devices"].get("config")


def test_sharing_configs_are_copied_untouched_class_first() -> None:
    config = written([opaque(MPS, requests=["gpus"])], [opaque(TIME_SLICING)])
    assert config == [
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": TIME_SLICING}},
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": MPS}},
    ]


def test_no_config_writes_none() -> None:
    assert written([], []) is None
