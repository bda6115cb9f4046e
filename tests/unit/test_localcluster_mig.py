"""The slices of an M8 node (MIG placements as partitionable devices) keep the API's limits and
name what the allocator order relies on; M8 is a valid spec and bad MIG specs are refused."""

from __future__ import annotations

import re

import pytest

from hack.localcluster import M8, NodeSpec
from hack.localcluster.dra import DRIVER, H200_GPU
from hack.localcluster.dra_mig import (
    MIG_CLASS,
    mig_device_class,
    mig_device_name,
    mig_resource_slices,
    placement_of,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_m8_slices_respect_the_api_limits() -> None:
    slices = mig_resource_slices("m8-0", "uid", H200_GPU, 8)
    assert [s["metadata"]["name"] for s in slices] == [f"{i}-{DRIVER}-m8-0" for i in range(9)]
    counters, *device_slices = slices
    assert "devices" not in counters["spec"]
    assert len(counters["spec"]["sharedCounters"]) == 8
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 9 for s in slices)
    for gpu, body in enumerate(device_slices):
        devices = body["spec"]["devices"]
        assert "sharedCounters" not in body["spec"]
        assert len(devices) <= 64
        assert devices[0]["name"] == f"gpu-{gpu}"
        assert len(devices[0]["consumesCounters"][0]["counters"]) == 10
        for device in devices:
            assert DNS_LABEL.match(device["name"]), device["name"]
            [consumed] = device["consumesCounters"]
            assert consumed["counterSet"] == f"gpu-{gpu}-counter-set"
    assert len(device_slices[0]["spec"]["devices"]) == 19


def test_mig_device_names_and_attributes() -> None:
    assert mig_device_name(0, "1g.18gb", 3) == "gpu-0-mig-1g-18gb-3"
    assert placement_of("gpu-0-mig-1g-18gb-3") == (0, "1g.18gb", 3)
    assert placement_of("gpu-3") is None
    devices = mig_resource_slices("n", "uid", H200_GPU, 1)[1]["spec"]["devices"]
    by_name = {d["name"]: d for d in devices}
    four = by_name["gpu-0-mig-4g-71gb-0"]
    assert four["attributes"]["type"] == {"string": "mig"}
    assert four["attributes"]["profile"] == {"string": "4g.71gb"}
    counters = four["consumesCounters"][0]["counters"]
    assert sorted(k for k in counters if k.startswith("memory-slice")) == [
        f"memory-slice-{i}" for i in range(4)
    ]
    assert counters["multiprocessors"] == {"value": "64"}
    assert by_name["gpu-0-mig-3g-71gb-4"]["consumesCounters"][0]["counters"]["multiprocessors"] == {
        "value": "60"
    }
    assert mig_device_class()["metadata"]["name"] == MIG_CLASS


def test_m8_spec_and_refused_specs() -> None:
    assert M8.mig_partitions and M8.is_dra and M8.gpus == 8
    with pytest.raises(ValueError, match="mig_partitions"):
        NodeSpec("X", 1, 8, None, "NVIDIA-H200", mig_partitions=True)
    with pytest.raises(ValueError, match="mig_partitions"):
        NodeSpec("X", 1, 9, None, "NVIDIA-H200", gpu_api="dra", mig_partitions=True)
