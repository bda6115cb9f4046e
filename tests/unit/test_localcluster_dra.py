"""The local cluster's DRA nodes, pure parts: the ResourceSlice a node publishes, parsed by the
scheduler's own model; the GPU models against the recordings they come from; the node manifest
of a DRA node (no `nvidia.com/gpu`, NVLink domains by UUID); the DeviceClass."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from decimal import Decimal
from pathlib import Path

import pytest

from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster import (
    D4,
    D8,
    DRA_NODE_TYPES,
    G2_EXPANSION,
    S8,
    SEED_NODE_TYPES,
    dra,
    node_manifest,
)
from hack.localcluster.nodes import NodeSpec, spec_from_mapping
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.pools import gather_pools
from scheduler.model.semver import Version
from topology.domains import TopologyError

DATA = Path(__file__).resolve().parents[1] / "data"
UUID_FORM = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
BUS_ID_FORM = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def test_a_d8_slice_parses_into_one_complete_pool_of_typed_devices() -> None:
    body = dra.node_resource_slice("d8-0", "uid-1", dra.H200_GPU, 8)
    parsed = parse_resource_slice(body)
    assert parsed.errors == ()
    assert (parsed.name, parsed.driver) == ("0-gpu.nvidia.com-d8-0", "gpu.nvidia.com")
    assert (parsed.pool.name, parsed.pool.generation, parsed.pool.resource_slice_count) == (
        "d8-0",
        1,
        1,
    )
    assert parsed.node_selection.node_name == "d8-0"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "d8-0", "uid": "uid-1", "controller": True}
    ]
    [pool] = gather_pools([parsed], "d8-0", {})
    assert pool.usable
    assert [entry.device.name for entry in pool.devices] == [f"gpu-{i}" for i in range(8)]
    assert gather_pools([parsed], "d8-1", {}) == ()

    gpu3 = parsed.devices[3].attributes
    assert gpu3["gpu.nvidia.com/type"] == "gpu"
    assert gpu3["gpu.nvidia.com/uuid"] == gpu_uuid("d8-0", 3)
    assert gpu3["gpu.nvidia.com/productName"] == "NVIDIA H200"
    assert gpu3["gpu.nvidia.com/brand"] == "Nvidia"
    assert gpu3["gpu.nvidia.com/architecture"] == "Hopper"
    assert gpu3["gpu.nvidia.com/addressingMode"] == "None"
    assert gpu3["gpu.nvidia.com/cudaComputeCapability"] == Version("9.0.0", 9, 0, 0)
    assert gpu3["gpu.nvidia.com/driverVersion"] == Version("580.159.4", 580, 159, 4)
    assert gpu3["gpu.nvidia.com/cudaDriverVersion"] == Version("13.0.0", 13, 0, 0)
    assert gpu3["resource.kubernetes.io/numaNode"] == 0
    assert parsed.devices[4].attributes["resource.kubernetes.io/numaNode"] == 1
    assert parsed.devices[3].capacity["gpu.nvidia.com/memory"].value == Decimal(143771 * 2**20)


def test_uuids_are_stable_distinct_and_shaped_like_nvidia_uuids() -> None:
    first = dra.node_resource_slice("d8-0", "u", dra.H200_GPU, 8)
    again = dra.node_resource_slice("d8-0", "u", dra.H200_GPU, 8)
    other = dra.node_resource_slice("d8-1", "u", dra.H200_GPU, 8)
    uuids = [d["attributes"]["uuid"]["string"] for d in first["spec"]["devices"]]
    assert uuids == [d["attributes"]["uuid"]["string"] for d in again["spec"]["devices"]]
    others = [d["attributes"]["uuid"]["string"] for d in other["spec"]["devices"]]
    assert len(set(uuids) | set(others)) == 16
    assert all(UUID_FORM.fullmatch(uuid) for uuid in uuids)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8, 9, 16, 128])
def test_placements_are_plausible_and_distinct_on_a_node(count: int) -> None:
    placements = [dra.gpu_placement(i, count) for i in range(count)]
    assert len({p.pci_bus_id for p in placements}) == count
    for placement in placements:
        assert BUS_ID_FORM.fullmatch(placement.pci_bus_id)
        domain, bus = placement.pci_bus_id.split(":")[:2]
        root_domain, root_bus = placement.pcie_root.removeprefix("pci").split(":")
        assert root_domain == domain and int(root_bus, 16) <= int(bus, 16)
        assert placement.numa_node in (0, 1)


def test_a_four_gpu_board_spreads_over_roots_and_sockets() -> None:
    placements = [dra.gpu_placement(i, 4) for i in range(4)]
    assert [p.pci_bus_id for p in placements] == [
        "0000:18:00.0",
        "0000:3a:00.0",
        "0000:9a:00.0",
        "0000:ba:00.0",
    ]
    assert len({p.pcie_root for p in placements}) == 4
    assert [p.numa_node for p in placements] == [0, 0, 1, 1]
    eight = [dra.gpu_placement(i, 8) for i in range(8)]
    assert [p.pcie_root for p in eight].count("pci0000:15") == 2


@pytest.mark.parametrize(("index", "count"), [(0, 0), (2, 2), (-1, 4), (0, 129)])
def test_placement_refuses_an_index_outside_the_node(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="index"):
        dra.gpu_placement(index, count)


def test_the_device_class_is_the_drivers() -> None:
    body = dra.gpu_device_class()
    parsed = parse_device_class(body)
    assert parsed.errors == ()
    assert parsed.name == "gpu.nvidia.com"
    assert parsed.selectors == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    assert parsed.extended_resource_name == "nvidia.com/gpu"


def test_the_nvlink_domain_ids_name_each_domain_by_uuid() -> None:
    value = dra.nvlink_domain_ids("d8-0", "4-7,0-3", 8)
    domains = [group.split(",") for group in value.split(";")]
    assert domains == [
        [gpu_uuid("d8-0", i) for i in range(4)],
        [gpu_uuid("d8-0", i) for i in range(4, 8)],
    ]
    with pytest.raises(TopologyError):
        dra.nvlink_domain_ids("d8-0", "0-3", 8)


def test_a_dra_node_has_no_device_plugin_gpus_but_its_domains_by_uuid() -> None:
    manifest = node_manifest(D8, "d8-0")
    assert "nvidia.com/gpu" not in manifest["status"]["capacity"]
    assert "nvidia.com/gpu" not in manifest["status"]["allocatable"]
    annotations = manifest["metadata"]["annotations"]
    assert annotations["gpu-scheduler.io/nvlink-domains"] == "0-3,4-7"
    assert annotations["gpu-scheduler.io/nvlink-domain-ids"] == dra.nvlink_domain_ids(
        "d8-0", "0-3,4-7", 8
    )
    assert manifest["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    plugin = node_manifest(G2_EXPANSION, "g2-expansion-0")
    assert plugin["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert "gpu-scheduler.io/nvlink-domain-ids" not in plugin["metadata"]["annotations"]


def test_dra_node_types_are_defined_but_not_seeded() -> None:
    layout = {s.type_name: (s.gpus, s.nvlink_domains, s.gpu_model()) for s in DRA_NODE_TYPES}
    assert layout == {"D8": (8, "0-3,4-7", dra.H200_GPU), "D4": (4, "0-1,2-3", dra.H100_GPU)}
    assert all(spec.gpu_api == "device-plugin" for spec in SEED_NODE_TYPES)
    assert D4.is_dra and not any(spec.is_dra for spec in SEED_NODE_TYPES)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpu_api": "nvml"}, "gpu_api must be one of"),
        ({"gpu_api": "dra", "gpu_product": "NVIDIA-B200"}, "no DRA GPU model"),
        ({"gpu_api": "dra", "mig": {"1g.18gb": 7}}, "MIG is not modelled"),
        ({"gpu_api": "dra", "gpus": 0}, "1..128 GPUs"),
    ],
)
def test_a_bad_dra_spec_names_its_problem(fields: dict[str, object], message: str) -> None:
    raw = {"type_name": "X", "count": 1, "gpus": 2, "gpu_product": "NVIDIA-H200", **fields}
    with pytest.raises(ValueError, match=message):
        spec_from_mapping(raw)


def test_a_dra_spec_reads_from_yaml_shaped_data() -> None:
    raw = {"type_name": "D2", "count": 2, "gpus": 2, "gpu_product": "NVIDIA-H200"}
    spec = spec_from_mapping({**raw, "gpu_api": "dra", "nvlink_domains": "0-1"})
    assert spec == NodeSpec("D2", 2, 2, "0-1", "NVIDIA-H200", gpu_api="dra")


def test_the_h200_model_is_what_the_recording_reports() -> None:
    root = ElementTree.parse(DATA / "h200" / "nvidia-smi-q.xml").getroot()
    gpu = root.find("gpu")
    assert gpu is not None
    model = dra.H200_GPU
    assert gpu.findtext("product_name") == model.product_name
    assert gpu.findtext("product_architecture") == model.architecture
    assert gpu.findtext("product_brand", "").lower() == model.brand.lower()
    assert gpu.findtext("addressing_mode") == model.addressing_mode
    assert gpu.findtext("fb_memory_usage/total") == f"{model.memory_mib} MiB"
    assert semver(root.findtext("driver_version", "")) == model.driver_version
    assert semver(root.findtext("cuda_version", "")) == model.cuda_driver_version
    query = (DATA / "h200" / "nvidia-smi-query.csv").read_text().splitlines()[1]
    assert query.split(", ")[0] == model.product_name
    assert query.split(", ")[2] == f"{model.memory_mib} MiB"


def test_the_h100_model_is_what_the_recording_reports() -> None:
    text = (DATA / "h100" / "nvidia-smi.txt").read_text()

    def field(name: str) -> str:
        found = re.search(rf"^\s*{name}\s*:\s*(.+?)\s*$", text, re.MULTILINE)
        assert found is not None, name
        return found.group(1)

    model = dra.H100_GPU
    assert field("Product Name") == model.product_name
    assert field("Product Architecture") == model.architecture
    assert field("Product Brand").lower() == model.brand.lower()
    assert field("Addressing Mode") == model.addressing_mode
    assert semver(field("Driver Version")) == model.driver_version
    assert semver(field("CUDA Version")) == model.cuda_driver_version
    fb_total = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", text)
    assert fb_total is not None and int(fb_total.group(1)) == model.memory_mib


def semver(text: str) -> str:
    """A version as the driver publishes it (Masterminds semver: missing parts are 0, leading
    zeros dropped): "580.159.04" -> "580.159.4", "13.0" -> "13.0.0"."""
    parts = [str(int(part)) for part in text.split(".")]
    return ".".join([*parts, "0", "0"][:3])


def test_an_s8_slice_publishes_shared_gpus_with_memory_as_consumable_capacity() -> None:
    body = dra.node_resource_slice("s8-0", "uid-1", dra.H200_GPU, 8, shared=True)
    parsed = parse_resource_slice(body)
    assert parsed.errors == ()
    assert all(device.allow_multiple_allocations for device in parsed.devices)
    memory = parsed.devices[0].capacity["gpu.nvidia.com/memory"]
    assert memory.value == Decimal(143771 * 2**20)
    policy = memory.request_policy
    assert policy is not None and policy.valid_range is not None
    assert policy.default == Decimal(140 * 2**30)  # on the 1Gi grid from 1Gi, within memory
    assert policy.valid_range.minimum == policy.valid_range.step == Decimal(2**30)
    assert policy.default + policy.valid_range.step > memory.value
    assert S8.shared_gpus and S8.gpus == D8.gpus and S8 not in DRA_NODE_TYPES
    with pytest.raises(ValueError, match="shared_gpus needs gpu_api 'dra'"):
        NodeSpec("X", 1, gpus=8, nvlink_domains=None, gpu_product="NVIDIA-H200", shared_gpus=True)
