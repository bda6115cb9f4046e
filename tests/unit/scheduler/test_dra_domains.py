"""The device -> NVLink domain map of one DRA node: each rule, the order between them, and
annotations that do not fit the devices (reported, then the next rule)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from scheduler.dra.domains import DeviceDomains, device_domains
from scheduler.model.devices import AttributeValue, Device
from scheduler.model.pools import Pool, PoolDevice, PoolID
from topology.domain_ids import NVLINK_DOMAIN_IDS_ANNOTATION as IDS
from topology.domains import NVLINK_DOMAINS_ANNOTATION as INDEX

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
PARTITION = "gpu.nvidia.com/partition4"


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-7cf6-2002-ad86-7a8d1badd8{i:02x}"


def bus(i: int) -> str:
    """The bus ID of GPU i as the DRA attribute holds it; buses run backwards from GPU 0, so
    bus order is not name order."""
    return f"0000:{0x9F - 0x10 * i:02x}:00.0"


def gpu(
    i: int, *, name: str | None = None, extra: Mapping[str, AttributeValue] | None = None
) -> Device:
    """NVIDIA's whole GPU `gpu-<i>` with its uuid and bus ID (upper-case uuid, as some tools
    write it: compared case-insensitively)."""
    attributes: dict[str, AttributeValue] = {
        f"{DRIVER}/type": "gpu",
        f"{DRIVER}/uuid": uuid(i).upper().replace("GPU-", "GPU-", 1),
        "resource.kubernetes.io/pciBusID": bus(i),
        f"{DRIVER}/productName": "NVIDIA H200",
    }
    attributes.update(extra or {})
    return Device(name or f"gpu-{i}", attributes)


def mig(parent: int, profile: str) -> Device:
    return Device(
        f"gpu-{parent}-mig-{profile}-0",
        {
            f"{DRIVER}/type": "mig",
            f"{DRIVER}/uuid": f"MIG-{parent:08x}-0000-0000-0000-000000000000",
            f"{DRIVER}/parentUUID": uuid(parent),
        },
    )


def pool(*devices: Device, driver: str = DRIVER, name: str = NODE) -> Pool:
    return Pool(
        PoolID(driver, name), devices=tuple(PoolDevice(f"{name}-slice", d) for d in devices)
    )


def key(name: str, pool_name: str = NODE, driver: str = DRIVER) -> tuple[str, str, str]:
    return (driver, pool_name, name)


def eight() -> Pool:
    return pool(*(gpu(i) for i in range(8)))


def by_name(result: DeviceDomains) -> dict[str, int]:
    return {device: domain for (_, _, device), domain in result.domain_of.items()}


def ids_annotation(*domains: tuple[int, ...], spell: str = "uuid") -> str:
    def one(i: int) -> str:
        return uuid(i) if spell == "uuid" else bus(i).replace("0000:", "00000000:").upper()

    return ";".join(",".join(one(i) for i in domain) for domain in domains)


# --- (d) the default layout ----------------------------------------------------------------------


def test_default_orders_gpus_by_pci_bus_id() -> None:
    result = device_domains({}, [eight()])
    assert (result.source, result.problem, result.domain_size) == ("default", "", (4, 4))
    # buses run backwards, so the four highest-numbered GPUs come first
    assert by_name(result) == {f"gpu-{i}": 0 if i >= 4 else 1 for i in range(8)}


def test_default_orders_by_natural_name_when_a_bus_id_is_missing() -> None:
    devices = [gpu(i) for i in range(8)]
    devices[3] = Device("gpu-3", {f"{DRIVER}/type": "gpu"})
    result = device_domains({}, [pool(*reversed(devices))])
    assert by_name(result) == {f"gpu-{i}": 0 if i < 4 else 1 for i in range(8)}
    tens = [Device(f"gpu-{i}") for i in (10, 2, 1, 11)]
    result = device_domains({}, [pool(*tens)])
    assert by_name(result) == {"gpu-1": 0, "gpu-2": 0, "gpu-10": 1, "gpu-11": 1}


@pytest.mark.parametrize(
    ("count", "sizes"), [(0, ()), (1, (1,)), (2, (2,)), (4, (2, 2)), (6, (6,))]
)
def test_default_sizes_follow_the_gpu_count(count: int, sizes: tuple[int, ...]) -> None:
    result = device_domains({}, [pool(*(gpu(i) for i in range(count)))])
    assert result.domain_size == sizes and len(result.domain_of) == count


def test_only_the_drivers_whole_gpus_count_and_partitions_follow_their_parent() -> None:
    other = pool(Device("nic-0"), Device("nic-1"), driver="net.example.com")
    devices = [*(gpu(i) for i in range(4)), mig(0, "1g.18gb"), mig(3, "3g.71gb")]
    vfio = Device("gpu-vfio-0", {f"{DRIVER}/type": "vfio"})
    result = device_domains({}, [other, pool(*devices, vfio)])
    assert result.domain_size == (2, 2)  # four GPUs, not seven devices
    assert key("nic-0", driver="net.example.com") not in result.domain_of
    assert key("gpu-vfio-0") not in result.domain_of
    mapped = by_name(result)
    assert mapped["gpu-0-mig-1g.18gb-0"] == mapped["gpu-0"]
    assert mapped["gpu-3-mig-3g.71gb-0"] == mapped["gpu-3"]


def test_devices_of_two_pools_are_told_apart() -> None:
    first = pool(gpu(0), gpu(1), name="node-a-0")
    second = pool(gpu(2, name="gpu-0"), gpu(3, name="gpu-1"), name="node-a-1")
    result = device_domains({}, [first, second])
    assert len(result.domain_of) == 4 and result.domain_size == (2, 2)
    assert result.domain_of[key("gpu-0", "node-a-0")] != result.domain_of[key("gpu-0", "node-a-1")]


# --- (c) the index annotation --------------------------------------------------------------------


def test_index_annotation_names_gpu_n_by_index() -> None:
    result = device_domains({INDEX: "0-1,2-7"}, [eight()])
    assert (result.source, result.problem, result.domain_size) == ("index", "", (2, 6))
    assert by_name(result) == {f"gpu-{i}": 0 if i < 2 else 1 for i in range(8)}


@pytest.mark.parametrize(
    ("annotation", "devices", "problem"),
    [
        ("0-3,4", [gpu(i) for i in range(8)], "GPUs 5-7 are in no domain"),
        (
            "0-3,4-7",
            [gpu(i) for i in (0, 1, 2, 3, 4, 5, 6, 9)],
            "gpu-9 is not gpu-N with N below 8",
        ),
        ("0-1", [gpu(0), gpu(1, name="accel-1")], "accel-1 is not gpu-N"),
    ],
)
def test_index_annotation_that_does_not_fit_falls_back_to_the_default(
    annotation: str, devices: list[Device], problem: str
) -> None:
    result = device_domains({INDEX: annotation}, [pool(*devices)])
    assert result.source == "default"
    assert problem in result.problem, result.problem
    assert result.domain_size == device_domains({}, [pool(*devices)]).domain_size


def test_index_annotation_with_the_same_gpu_in_two_pools_is_a_misfit() -> None:
    pools = [pool(gpu(0), name="p0"), pool(gpu(1, name="gpu-0"), name="p1")]
    result = device_domains({INDEX: "0-1"}, pools)
    assert result.source == "default" and "are both GPU 0" in result.problem


# --- (b) the by-ID annotation --------------------------------------------------------------------


@pytest.mark.parametrize("spell", ["uuid", "pci"])
def test_ids_annotation_by_uuid_or_bus_id_wins_over_the_index_one(spell: str) -> None:
    annotations = {
        IDS: ids_annotation((1, 3, 5, 7), (0, 2, 4, 6), spell=spell),
        INDEX: "0-3,4-7",
    }
    result = device_domains(annotations, [eight()])
    assert (result.source, result.problem, result.domain_size) == ("ids", "", (4, 4))
    assert by_name(result) == {f"gpu-{i}": 0 if i % 2 else 1 for i in range(8)}


def test_ids_annotation_may_mix_uuids_and_bus_ids() -> None:
    text = f"{uuid(0)},{bus(1)};{bus(2)},{uuid(3)}"
    result = device_domains({IDS: text}, [pool(*(gpu(i) for i in range(4)))])
    assert result.source == "ids"
    assert by_name(result) == {"gpu-0": 0, "gpu-1": 0, "gpu-2": 1, "gpu-3": 1}


def test_a_uuid_no_device_has_is_reported_and_the_index_annotation_used() -> None:
    text = ids_annotation((0, 1, 2, 3), (4, 5, 6)) + f",{uuid(99)}"
    gpus = [gpu(i) for i in range(7)]
    result = device_domains({IDS: text, INDEX: "0-3,4-6"}, [pool(*gpus)])
    assert result.source == "index"
    assert f"no device has {uuid(99)}" in result.problem
    assert "gpu.nvidia.com/uuid and resource.kubernetes.io/pciBusID" in result.problem


def test_a_uuid_no_device_has_without_index_annotation_falls_back_to_the_default() -> None:
    text = ids_annotation((0, 1, 2, 3), (4, 5, 6, 7)).replace(uuid(7), uuid(99))
    result = device_domains({IDS: text}, [eight()])
    assert result.source == "default" and "no device has" in result.problem
    assert result.domain_size == (4, 4)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (ids_annotation((0, 1, 2, 3), (4, 5, 6)), "device node-a/gpu-7 is in no domain"),
        (f"{ids_annotation((0, 1, 2, 3), (4, 5, 6, 7))};{bus(0)}", "node-a/gpu-0 is named in two"),
        ("GPU-1234", "is neither a GPU UUID"),
        ("0-3,4-7", "is neither a GPU UUID"),
    ],
)
def test_ids_annotation_misfits_are_reported(text: str, problem: str) -> None:
    result = device_domains({IDS: text}, [eight()])
    assert result.source == "default"
    assert problem in result.problem, result.problem


def test_an_identifier_two_devices_share_is_a_misfit() -> None:
    twin = gpu(1, extra={f"{DRIVER}/uuid": uuid(0)})
    result = device_domains({IDS: f"{uuid(0)};{bus(1)}"}, [pool(gpu(0), twin)])
    assert result.source == "default" and "names two devices" in result.problem


def test_ids_are_matched_only_in_the_drivers_domain() -> None:
    stranger = Device("gpu-0", {"other.example.com/uuid": uuid(0)})
    result = device_domains({IDS: uuid(0)}, [pool(stranger)])
    assert result.source == "default" and "no device has" in result.problem


def test_a_blank_ids_annotation_is_absent() -> None:
    result = device_domains({IDS: "  ", INDEX: "0-7"}, [eight()])
    assert (result.source, result.problem) == ("index", "")


# --- (a) the attribute ---------------------------------------------------------------------------


def test_attribute_groups_equal_values_and_leaves_the_rest_unknown() -> None:
    devices = [gpu(i, extra={PARTITION: 7 + i // 4}) for i in range(6)]
    devices += [gpu(6), gpu(7)]  # no partition attribute
    annotations = {IDS: ids_annotation(tuple(range(8))), INDEX: "0-7"}
    result = device_domains(annotations, [pool(*devices)], PARTITION)
    assert (result.source, result.problem, result.domain_size) == ("attribute", "", (2, 4))
    mapped = by_name(result)
    assert "gpu-6" not in mapped and "gpu-7" not in mapped
    # domains numbered by their first GPU in bus order: the second partition's GPUs come first
    assert mapped == {f"gpu-{i}": 1 if i < 4 else 0 for i in range(6)}


def test_attribute_values_of_different_types_differ() -> None:
    devices = [gpu(0, extra={PARTITION: True}), gpu(1, extra={PARTITION: 1})]
    result = device_domains({}, [pool(*devices)], PARTITION)
    assert result.domain_size == (1, 1)


def test_an_attribute_no_device_has_falls_back_to_the_annotations() -> None:
    result = device_domains({INDEX: "0-3,4-7"}, [eight()], "gpu.nvidia.com/partition8")
    assert result.source == "index"
    assert result.problem == "no device has the attribute gpu.nvidia.com/partition8"


def test_every_misfit_is_reported_in_rule_order_and_bounded() -> None:
    result = device_domains({IDS: "x" * 5000, INDEX: "9"}, [eight()], PARTITION)
    assert result.source == "default"
    first, second, third = result.problem.split("; ")
    assert "attribute" in first and IDS in second and INDEX in third
    assert len(result.problem) <= 700


def test_empty_node() -> None:
    assert device_domains({}, []) == DeviceDomains({}, (), "default", "")
