"""GPU identities from `nvidia-smi -q -x`, and NVLink domains by identifier from it together with
`nvidia-smi topo -m`: the recorded H200 outputs, eight-GPU copies made from them, errors."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.datasets import H200_DIR
from tests.unit.topology.test_topology_discover import groups_matrix, matrix
from topology.discover import (
    discover_domain_ids,
    discover_domains,
    domain_ids_of,
    minors_off_index,
    parse_topology,
)
from topology.domain_ids import parse_domain_ids
from topology.domains import TopologyError
from topology.smi_query import GpuIdentity, parse_gpu_query

QUERY_XML = (H200_DIR / "nvidia-smi-q.xml").read_text()
TOPO_TEXT = (H200_DIR / "nvidia-smi-topo.txt").read_text()
H200 = GpuIdentity(0, "GPU-45548304-7cf6-2002-ad86-7a8d1badd8cb", "0000:00:06.0", 0)

_GPU_SECTION = re.compile(r"\t<gpu id=.*?\n\t</gpu>\n", re.S)


def node_query(count: int, minors: list[int] | None = None) -> str:
    """The recorded `-q -x` output with its GPU section copied `count` times, GPU i given its own
    UUID, bus 0x19 + i (written as nvidia-smi writes it) and minor `minors[i]` (default i)."""
    section = _GPU_SECTION.search(QUERY_XML)
    assert section is not None
    copies = []
    for i in range(count):
        bus = f"00000000:{0x19 + i:02X}:00.0"
        copy = section.group(0).replace("00000000:00:06.0", bus)
        copy = copy.replace("7a8d1badd8cb", f"7A8D1BADD8{i:02X}")
        copy = copy.replace(
            "<minor_number>0</minor_number>",
            f"<minor_number>{(minors or list(range(count)))[i]}</minor_number>",
        )
        copies.append(copy)
    text = QUERY_XML.replace(section.group(0), "".join(copies))
    return text.replace(
        "<attached_gpus>1</attached_gpus>", f"<attached_gpus>{count}</attached_gpus>"
    )


def uuid_of(i: int) -> str:
    return f"GPU-45548304-7cf6-2002-ad86-7a8d1badd8{i:02x}"


def test_the_recorded_h200() -> None:
    assert parse_gpu_query(QUERY_XML) == (H200,)
    assert discover_domain_ids(TOPO_TEXT, QUERY_XML) == H200.uuid
    assert discover_domain_ids(TOPO_TEXT, QUERY_XML, by="pci") == "0000:00:06.0"
    assert discover_domains(TOPO_TEXT) == "0"  # the index annotation is unchanged


def test_eight_gpus_in_two_quads_by_uuid_and_by_bus() -> None:
    topo = matrix(groups_matrix([[0, 1, 2, 3], [4, 5, 6, 7]], "NV18", "SYS"))
    query = node_query(8)
    gpus = parse_gpu_query(query)
    assert [gpu.uuid for gpu in gpus] == [uuid_of(i) for i in range(8)]
    assert [gpu.pci_bus_id for gpu in gpus] == [f"0000:{0x19 + i:02x}:00.0" for i in range(8)]
    by_uuid = discover_domain_ids(topo, query)
    assert by_uuid == ";".join(
        ",".join(uuid_of(i) for i in quad) for quad in ((0, 1, 2, 3), (4, 5, 6, 7))
    )
    by_bus = discover_domain_ids(topo, query, by="pci")
    assert by_bus.split(";")[1] == "0000:1d:00.0,0000:1e:00.0,0000:1f:00.0,0000:20:00.0"
    for text in (by_uuid, by_bus):
        ids = parse_domain_ids(text).ids
        assert ids is not None and ids.domain_sizes == (4, 4)


def test_domains_the_index_annotation_cannot_express_have_an_id_form() -> None:
    topo = matrix(groups_matrix([[0, 2], [1, 3]], "NV4", "PHB"))
    with pytest.raises(TopologyError, match="not a run of consecutive"):
        discover_domains(topo)
    text = discover_domain_ids(topo, node_query(4))
    assert text == f"{uuid_of(0)},{uuid_of(2)};{uuid_of(1)},{uuid_of(3)}"


def test_gpu_counts_must_agree() -> None:
    topo = matrix(groups_matrix([[0, 1]], "NV4", "PHB"))
    with pytest.raises(TopologyError, match="lists 2 GPUs but nvidia-smi -q -x lists 1"):
        discover_domain_ids(topo, QUERY_XML)
    with pytest.raises(TopologyError):
        domain_ids_of(parse_topology(topo), parse_gpu_query(node_query(3)))


def test_minor_numbers_that_differ_from_the_index_are_reported() -> None:
    assert minors_off_index(parse_gpu_query(node_query(4))) == ()
    off = minors_off_index(parse_gpu_query(node_query(4, minors=[0, 1, 3, 2])))
    assert [(gpu.index, gpu.minor) for gpu in off] == [(2, 3), (3, 2)]
    no_minor = QUERY_XML.replace(
        "<minor_number>0</minor_number>", "<minor_number>N/A</minor_number>"
    )
    assert parse_gpu_query(no_minor)[0].minor is None


def test_the_bus_id_falls_back_to_the_gpu_id_attribute() -> None:
    without = QUERY_XML.replace("<pci_bus_id>00000000:00:06.0</pci_bus_id>", "")
    assert parse_gpu_query(without)[0].pci_bus_id == "0000:00:06.0"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not XML"),
        ("<nvidia_smi_log><gpu>", "not XML"),
        ("<log/>", "root element is 'log'"),
        ("<nvidia_smi_log><driver_version>1</driver_version></nvidia_smi_log>", "no <gpu> element"),
        (QUERY_XML.replace("<uuid>GPU-45548304", "<uuid>MIG-45548304"), "GPU 0: uuid 'MIG-"),
        (
            QUERY_XML.replace("<uuid>GPU-45548304-7cf6-2002-ad86-7a8d1badd8cb</uuid>", ""),
            "uuid missing",
        ),
        (
            QUERY_XML.replace("00000000:00:06.0", "zz"),
            "GPU 0: pci_bus_id 'zz' is not a PCI bus ID",
        ),
        (
            node_query(2).replace(uuid_of(1).upper()[-12:], "7A8D1BADD800"),
            "GPUs 0 and 1 have the same uuid",
        ),
        (
            node_query(2).replace("00000000:1A:00.0", "00000000:19:00.0"),
            "GPUs 0 and 1 have the same pci_bus_id 0000:19:00.0",
        ),
    ],
)
def test_bad_query_output(text: str, problem: str) -> None:
    with pytest.raises(TopologyError) as raised:
        parse_gpu_query(text)
    assert str(raised.value).startswith("nvidia-smi -q -x: ")
    assert problem in str(raised.value), str(raised.value)


@given(st.text(max_size=300))
def test_fuzz_only_topology_errors(text: str) -> None:
    try:
        parse_gpu_query(text)
    except TopologyError as error:
        assert len(str(error)) < 400
