"""Builders of the Node and Pod JSON the fake dcgm-exporter reads, shared by its unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hack.fake_dcgm.holders import is_fake_gpu_node

Json = dict[str, Any]
USAGE = "fake-dcgm.gpu-scheduler.io/usage"
FB = "fake-dcgm.gpu-scheduler.io/fb-used-mib"
GPUS = "gpu-scheduler.io/gpus"


def node(
    name: str = "g-0",
    gpus: int = 8,
    product: str | None = "NVIDIA-H200",
    mig: Mapping[str, int] | None = None,
    annotations: Mapping[str, str] | None = None,
    fake: bool = True,
) -> Json:
    """A kwok fake GPU node with ``gpus`` whole GPUs and the given MIG capacity."""
    capacity = {"cpu": "64", "nvidia.com/gpu": str(gpus)}
    capacity |= {f"nvidia.com/mig-{p}": str(n) for p, n in (mig or {}).items()}
    notes = {"kwok.x-k8s.io/node": "fake"} if fake else {}
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": product} if product else {},
            "annotations": notes | dict(annotations or {}),
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def pod(
    name: str,
    node_name: str | None = "g-0",
    gpus: int = 1,
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = "ns",
    annotations: Mapping[str, str] | None = None,
    phase: str = "Running",
    resource: str = "nvidia.com/gpu",
    started: str | None = None,
) -> Json:
    """A pod with one sidecar (no GPU) and one container ``main`` asking for ``gpus``."""
    spec: Json = {
        "containers": [
            {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
            {"name": "main", "resources": {"limits": {resource: str(gpus)}}},
        ]
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    status: Json = {"phase": phase}
    if started is not None:
        status["startTime"] = started
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": created,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": status,
    }


def test_builders_make_what_the_exporter_recognises() -> None:
    assert is_fake_gpu_node(node())
    assert is_fake_gpu_node(node(gpus=0, mig={"1g.18gb": 7}))
    assert not is_fake_gpu_node(node(fake=False))
    assert not is_fake_gpu_node(node(gpus=0) | {"status": {"capacity": {"cpu": "4"}}})
