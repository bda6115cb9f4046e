"""parse_node: allocatable vector, MIG capacity, NVLink domains (and their fallback), taints."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.model.fields import Taint
from scheduler.model.objects import parse_node
from scheduler.model.resources import CPU, GPU, MEMORY, PODS
from tests.unit.scheduler.builders import make_node, taint

DOMAINS_FIELD = "metadata.annotations[gpu-scheduler.io/nvlink-domains]"
MIG_1G = "nvidia.com/mig-1g.10gb"


def test_allocatable_vector() -> None:
    node = parse_node(make_node("n1", gpus=4, cpu="31500m", memory="250Gi", pods=64))
    assert node.errors == ()
    assert node.name == "n1"
    assert node.allocatable.dtype == np.int64
    assert [int(x) for x in node.allocatable] == [31500, 250 * 2**30, 0, 64, 4]
    assert (node.allocatable[CPU], node.allocatable[MEMORY]) == (31500, 250 * 2**30)
    assert (node.allocatable[PODS], node.allocatable[GPU]) == (64, 4)


def test_missing_resources_are_zero() -> None:
    node = parse_node({"metadata": {"name": "bare"}})
    assert node.errors == ()
    assert [int(x) for x in node.allocatable] == [0, 0, 0, 0, 0]
    assert node.topology.gpu_count == 0
    assert node.topology.domains == ()


@pytest.mark.parametrize(
    ("resource", "value"),
    [("cpu", "fast"), ("memory", "-1Gi"), ("pods", "1.5.1"), ("nvidia.com/gpu", "eight")],
)
def test_bad_allocatable_offers_zero_and_names_the_field(resource: str, value: str) -> None:
    raw = make_node(gpus=8)
    raw["status"]["allocatable"][resource] = value
    node = parse_node(raw)
    assert [error.field for error in node.errors] == [f"status.allocatable.{resource}"]
    index = ["cpu", "memory", "ephemeral-storage", "pods", "nvidia.com/gpu"].index(resource)
    assert node.allocatable[index] == 0


def test_gpu_allocatable_rounds_up() -> None:
    assert parse_node(make_node(gpus="1500m")).allocatable[GPU] == 2


def test_mig_capacity() -> None:
    node = parse_node(
        make_node(
            gpus=0, mig={MIG_1G: "7", "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 0}
        )
    )
    assert node.errors == ()
    assert dict(node.mig) == {MIG_1G: 7, "nvidia.com/mig-3g.40gb": 2}


def test_bad_mig_profile_is_reported_and_left_out() -> None:
    node = parse_node(make_node(gpus=0, mig={"nvidia.com/mig-5g.10gb": "1", MIG_1G: "2"}))
    assert [error.field for error in node.errors] == ["status.allocatable.nvidia.com/mig-5g.10gb"]
    assert dict(node.mig) == {MIG_1G: 2}


def test_bad_mig_quantity_is_reported() -> None:
    node = parse_node(make_node(gpus=0, mig={MIG_1G: "seven"}))
    assert [error.field for error in node.errors] == [f"status.allocatable.{MIG_1G}"]
    assert dict(node.mig) == {}


def test_extended_resources_are_read_as_scalars() -> None:
    node = parse_node(make_node(mig={"example.com/fpga": "2", "hugepages-2Mi": "4Mi"}))
    assert node.errors == ()
    assert node.scalar == {"example.com/fpga": 2, "hugepages-2Mi": 4 * 2**20}


def test_unparseable_extended_resource_is_reported_and_offers_nothing() -> None:
    node = parse_node(make_node(mig={"example.com/fpga": "nonsense"}))
    assert [e.field for e in node.errors] == ["status.allocatable.example.com/fpga"]
    assert "example.com/fpga" not in node.scalar


@pytest.mark.parametrize(
    ("gpus", "annotation", "domains"),
    [
        (8, None, ((0, 1, 2, 3), (4, 5, 6, 7))),
        (8, "0-3,4-7", ((0, 1, 2, 3), (4, 5, 6, 7))),
        (8, "0-1,2-3,4-5,6-7", ((0, 1), (2, 3), (4, 5), (6, 7))),
        (8, "4-7, 0-3", ((0, 1, 2, 3), (4, 5, 6, 7))),
        (8, "0-7", (tuple(range(8)),)),
        (2, "0-1", ((0, 1),)),
        (2, None, ((0, 1),)),
        (4, None, ((0, 1), (2, 3))),
        (2, "0,1", ((0,), (1,))),
    ],
)
def test_nvlink_domains(gpus: int, annotation: str | None, domains: tuple[tuple[int, ...]]) -> None:
    node = parse_node(make_node(gpus=gpus, domains=annotation))
    assert node.errors == ()
    assert node.topology.gpu_count == gpus
    assert node.topology.domains == domains


@pytest.mark.parametrize(
    ("gpus", "annotation", "problem"),
    [
        (8, "0-3,4-8", "out of range"),
        (8, "0-3", "in no domain"),
        (8, "0-4,4-7", "in two domains"),
        (8, "3-0,4-7", "descending"),
        (8, "a-b", "is not an index or a range"),
        (4, "0-1,,2-3", "empty group"),
    ],
)
def test_malformed_nvlink_annotation_falls_back_to_default_layout(
    gpus: int, annotation: str, problem: str
) -> None:
    node = parse_node(make_node(gpus=gpus, domains=annotation))
    default = parse_node(make_node(gpus=gpus)).topology
    assert node.topology == default
    assert [error.field for error in node.errors] == [DOMAINS_FIELD]
    message = node.errors[0].message
    assert problem in message
    assert f"using the default layout for {gpus} GPUs" in message


def test_nvlink_annotation_checked_against_parsed_gpu_count() -> None:
    node = parse_node(make_node(gpus=4, domains="0-3,4-7"))
    assert node.topology.domains == ((0, 1), (2, 3))
    assert [error.field for error in node.errors] == [DOMAINS_FIELD]


def test_taints_and_unschedulable() -> None:
    node = parse_node(
        make_node(
            taints=[
                taint("dedicated", "infra"),
                taint("gpu", effect="NoExecute"),
                {"key": "soft", "effect": "PreferNoSchedule"},
                "junk",
            ],
            unschedulable=True,
        )
    )
    assert node.taints == (
        Taint("dedicated", "infra", "NoSchedule"),
        Taint("gpu", "", "NoExecute"),
        Taint("soft", "", "PreferNoSchedule"),
    )
    assert str(node.taints[0]) == "{dedicated: infra}"
    assert str(node.taints[1]) == "{gpu: }"
    assert node.unschedulable


def test_labels() -> None:
    node = parse_node(make_node("n7", labels={"gpu": "a100"}))
    assert dict(node.labels) == {"kubernetes.io/hostname": "n7", "gpu": "a100"}
    assert not node.unschedulable
    assert node.taints == ()
