"""Injected GPU faults of the fake exporter: Xid and ECC annotations become dcgm-exporter's
series on the named GPU only, with its usual labels; DRA nodes get series for annotated GPUs."""

from __future__ import annotations

from hack.fake_dcgm.faults import ECC_DBE_ANNOTATION, XID_ANNOTATION, GpuFaults, node_faults
from hack.fake_dcgm.identity import gpu_uuid
from tests.unit.test_fake_dcgm_builders import node, pod
from tests.unit.test_fake_dcgm_render import keys, scrape

XID = "DCGM_FI_DEV_XID_ERRORS"
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


def test_annotations_parse_index_value_pairs_and_report_bad_entries() -> None:
    problems: list[str] = []
    faults = node_faults(
        "n", {XID_ANNOTATION: "3=79, 5=48", ECC_DBE_ANNOTATION: "5=2,x=1,7=-1"}, problems
    )
    assert faults == {3: GpuFaults(79, 0), 5: GpuFaults(48, 2)}
    assert len(problems) == 2 and all("ecc-dbe" in p for p in problems)


def test_xid_and_dbe_are_zero_except_on_the_annotated_gpu() -> None:
    out = scrape(
        [node(gpus=4, annotations={XID_ANNOTATION: "3=79", ECC_DBE_ANNOTATION: "1=2"})], []
    )
    xid = {s.get("gpu"): s.value for s in out.family(XID)}
    dbe = {s.get("gpu"): s.value for s in out.family(DBE)}
    assert xid == {"0": 0.0, "1": 0.0, "2": 0.0, "3": 79.0}
    assert dbe == {"0": 0.0, "1": 2.0, "2": 0.0, "3": 0.0}
    assert [s.get("UUID") for s in out.family(XID)][3] == gpu_uuid("g-0", 3)


def test_held_gpu_fault_series_carry_the_pod_labels() -> None:
    annotations = {XID_ANNOTATION: "0=48"}
    out = scrape([node(gpus=2, annotations=annotations)], [pod("p", gpus=1)])
    held = [s for s in out.family(XID) if s.get("gpu") == "0"]
    assert len(held) == 1 and held[0].value == 48.0
    assert keys(held[0])[-3:] == ("container", "namespace", "pod")


def test_a_fault_on_an_index_the_node_lacks_is_ignored() -> None:
    out = scrape([node(gpus=2, annotations={XID_ANNOTATION: "5=79"})], [])
    assert {s.value for s in out.family(XID)} == {0.0}
    assert len(out.family(XID)) == 2


def test_removing_the_annotation_clears_the_fault() -> None:
    out = scrape([node(gpus=2)], [])
    assert {s.value for s in out.family(XID)} == {0.0}
