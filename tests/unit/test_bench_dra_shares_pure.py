"""The shared-GPU pod set of the control-plane benchmark (`--dra --shared`): share sizes from the
openb trace, the templates and pods (parsed as the scheduler parses them), the read-back of the
claims' shares and the count of partly used GPUs, and the table's columns."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from hack.bench.control_plane import main
from hack.bench.control_plane_model import Options
from hack.bench.control_plane_report import print_table
from hack.bench.dra_shares import (
    GIB,
    OPENB_SHARE_MILLI,
    SHARE_HEADER,
    WHOLE_GIB,
    DraPods,
    Share,
    ShareUse,
    first_fit_decreasing,
    parse_share_sizes,
    share_cells,
    share_gib,
    share_pod_manifest,
    share_requests,
    share_template_manifest,
    share_template_name,
    share_use,
    shared_sizes,
)
from hack.bench.dra_workload import AllocatedClaims, dra_node_specs, template_name
from scheduler.model.claims import parse_resource_claim_template
from scheduler.model.objects import parse_pod
from scheduler.tools.simulate_trace import read_pods_csv
from tests.datasets import external_dataset
from tests.unit.test_bench_control_plane_pure import result as run_result

SHARE_ID = "0f3e9a52-6c1d-4b8e-9d7a-2a4b6c8d0e1f"


def test_a_trace_fraction_becomes_whole_gi_of_an_h200_rounded_up() -> None:
    assert WHOLE_GIB == 140
    assert [share_gib(m) for m in (50, 470, 810, 1000)] == [7, 66, 114, 140]
    assert share_gib(1) == 1  # never 0: a share asks for something
    assert share_gib(500, whole_gib=80) == 40


def test_share_requests_are_seeded_about_the_share_and_follow_the_trace() -> None:
    requests = share_requests(4000, 0.5, seed=1)
    assert requests == share_requests(4000, 0.5, seed=1)
    assert requests != share_requests(4000, 0.5, seed=2)
    assert 1800 < len(requests) < 2200
    assert set(requests.values()) <= {share_gib(m) for m, _ in OPENB_SHARE_MILLI}
    # the trace's most common fraction, 810 milli, is 2,436 of its 7,064 pods (34.5 %)
    largest = Counter(requests.values())[share_gib(810)] / len(requests)
    assert 0.30 < largest < 0.39
    assert share_requests(50, 0.0, seed=1) == {}
    assert sorted(share_requests(50, 1.0, seed=1)) == list(range(50))


def test_share_pods_ask_for_no_whole_gpu() -> None:
    assert shared_sizes([1, 2, 4, 8], {1: 10, 3: 66}) == [1, 0, 4, 0]
    options = Options(pods=300, dra=True, shared=0.5)
    sizes, shares = options.sizes(), options.dra_pods().shares
    assert [i for i, gpus in enumerate(sizes) if gpus == 0] == sorted(shares)
    assert Options(pods=300, dra=True).dra_pods().shares == {}


def test_the_share_template_and_pod_parse_as_a_claim_for_part_of_one_gpu() -> None:
    manifest = share_template_manifest(66)
    assert manifest["metadata"]["name"] == share_template_name(66) == "share-66gi"
    template = parse_resource_claim_template(
        {**manifest, "metadata": {"name": "share-66gi", "namespace": "ns"}}
    )
    assert not template.errors
    [request] = template.spec.requests
    [(_, spec)] = request.alternatives
    assert (spec.device_class_name, spec.count) == ("gpu.nvidia.com", 1)
    assert spec.capacity_requests == {"memory": Decimal(66 * GIB)}
    pod_manifest = share_pod_manifest("p", 66, "gpu-scheduler", {"type": "kwok"})
    pod_manifest["metadata"]["namespace"] = "ns"
    pod = parse_pod(pod_manifest)
    assert not pod.errors and pod.gpus == 0
    [claim] = pod_manifest["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == "share-66gi"


def test_dra_pods_name_a_share_template_a_whole_gpu_template_or_ask_for_the_resource() -> None:
    pods = DraPods(shares={0: 114, 2: 7, 3: 114}, extended=frozenset({1, 2}))

    def asks(index: int) -> Any:
        spec = pods.manifest(index, f"p{index}", 2, "gpu-scheduler", {})["spec"]
        claims = spec.get("resourceClaims") or [{}]
        return claims[0].get("resourceClaimTemplateName") or spec["containers"][0]["resources"]

    assert asks(0) == "share-114gi"
    assert asks(1)["limits"] == {"nvidia.com/gpu": "2"}
    assert asks(2) == "share-7gi"  # a share pod asks for its share even if drawn for both
    assert asks(4) == template_name(2)
    assert [t["metadata"]["name"] for t in pods.templates()] == ["share-7gi", "share-114gi"]


def test_shared_node_specs_are_s8() -> None:
    [spec] = dra_node_specs(5, prefix="x-", shared=True)
    assert (spec.type_name, spec.count, spec.shared_gpus, spec.is_dra) == ("x-S8", 5, True, True)
    [plain] = dra_node_specs(5)
    assert (plain.type_name, plain.shared_gpus) == ("D8", False)
    assert [s.type_name for s in Options(dra=True, shared=0.5).cluster_nodes(5)] == ["S8"]
    assert [s.type_name for s in Options(dra=True).cluster_nodes(5)] == ["D8"]
    assert len(Options().cluster_nodes(5)) == 3  # the seed types


def result(device: str, share_id: str | None = SHARE_ID, memory: str | None = "10Gi") -> Any:
    found: dict[str, Any] = {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n"}
    found["device"] = device
    if share_id is not None:
        found["shareID"] = share_id
    if memory is not None:
        found["consumedCapacity"] = {"memory": memory}
    return found


def test_a_result_reads_as_a_share_when_it_has_a_share_id_and_the_memory_asked() -> None:
    share = Share.of(result("gpu-3", memory="66Gi"))
    assert share == Share("n", "gpu-3", SHARE_ID, Decimal(66 * GIB))
    assert share.records(66) and not share.records(10)
    whole = Share.of(result("gpu-3", share_id=None, memory=None))
    assert (whole.share_id, whole.consumed_memory) == (None, None)
    assert not whole.records(66)
    assert Share.of(result("gpu-3", memory="lots")).consumed_memory is None
    assert not Share.of(result("gpu-3", share_id=None, memory="66Gi")).records(66)


def test_share_use_counts_the_gpus_holding_a_share_at_the_end() -> None:
    """a and b share gpu-0, c has gpu-1, d (released, deleted under churn) had gpu-2, e asked
    but holds nothing, f's result has no shareID (the device allocated whole), w is a whole-GPU
    pod (not a share pod: not counted)."""
    results = {
        "a": [result("gpu-0", memory="10Gi")],
        "b": [result("gpu-0", memory="114Gi")],
        "c": [result("gpu-1", memory="66Gi")],
        "d": [result("gpu-2", memory="66Gi")],
        "f": [result("gpu-4", share_id=None, memory=None)],
        "w": [result("gpu-5", memory="140Gi")],
    }
    asked = {"a": 10, "b": 114, "c": 66, "d": 66, "e": 7, "f": 10}
    results["g"] = [{**result("gpu-0", memory="7Gi"), "pool": "m"}]  # another node's gpu-0
    use = share_use(results, {**asked, "g": 7}, released={"d": 3.0})
    # 10 + 114 + 66 + 10 + 7 = 207 Gi held: at least two GPUs of 140Gi, and first-fit
    # decreasing needs two as well (114 + 10 + 10, 66 + 7)
    assert use == ShareUse(
        share_pods=5, recorded=4, shared_gpus=4, shared_nodes=2, fewest_gpus=2, packed_gpus=2
    )
    assert share_use({}, asked) == ShareUse(0, 0, 0, 0, 0, 0)


def test_first_fit_decreasing_places_the_largest_shares_first() -> None:
    # in arrival order first fit needs three (70+40, 80, 60+...): largest first needs two
    assert first_fit_decreasing([70, 40, 80, 60]) == 2
    assert first_fit_decreasing([114, 114, 26, 30]) == 3
    assert first_fit_decreasing([]) == 0
    assert first_fit_decreasing([5, 5, 5], whole=10) == 2


def test_share_sizes_given_are_drawn_with_equal_weights() -> None:
    requests = share_requests(4000, 1.0, seed=0, sizes=(10, 20, 40, 70))
    counts = Counter(requests.values())
    assert set(counts) == {10, 20, 40, 70}
    assert all(850 < n < 1150 for n in counts.values()), counts
    assert parse_share_sizes("10, 20,40") == (10, 20, 40)
    for bad in ("", "0", "141", "1.5", "10,x"):
        with pytest.raises(ValueError, match=r"share size|no share size"):
            parse_share_sizes(bad)


def test_allocated_claims_keep_the_results_as_written() -> None:
    seen = AllocatedClaims()
    owner = {"kind": "Pod", "name": "a", "uid": "u", "controller": True}
    written = [result("gpu-1", memory="7Gi")]
    claim = {
        "metadata": {"name": "a-gpus", "ownerReferences": [owner]},
        "status": {"allocation": {"devices": {"results": written}}},
    }
    seen.on_add(claim)
    assert seen.results == {"a": tuple(written)}
    assert seen.devices == {"a": (("n", "gpu-1"),)}
    assert share_use(seen.results, {"a": 7}) == ShareUse(1, 1, 1, 1, 1, 1)


def test_the_table_adds_the_share_columns_in_the_shared_mode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = Options(pods=300, dra=True, shared=0.5)
    base = replace(run_result("ceiling", "burst", 300.0, 10.0), nodes=3, cpu_s=None)
    runs = [
        base,
        replace(base, run="gpu-scheduler", shares=ShareUse(150, 150, 61, 20, 58, 60)),
        replace(base, run="kube-scheduler", shares=ShareUse(1500, 0, 1090, 900, 580, 600)),
    ]
    print_table(runs, options)
    lines = capsys.readouterr().out.splitlines()
    shares = len(options.dra_pods().shares)
    assert "S8 nodes" in lines[0] and f"{shares} of the pods asking for a share" in lines[0]
    assert "(openb sizes)" in lines[0]
    assert lines[1].endswith(SHARE_HEADER)
    assert lines[2].endswith(share_cells(None))
    assert lines[3].endswith("61 (60)       20     150/150")
    assert lines[4].endswith("1,090 (600)      900     0/1,500")
    print_table(runs, replace(options, share_sizes=(10, 20)))
    assert "(10/20Gi sizes)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--shared", "0.5"],
        ["--dra", "--shared", "1.5"],
        ["--dra", "--shared", "0.5", "--dra-extended", "0.2"],
        ["--dra", "--shared", "0.5", "--share-sizes", "10,200"],
        ["--dra", "--share-sizes", "10"],
    ],
)
def test_shared_needs_dra_a_share_no_extended_pods_and_sizes_in_range(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "--shared" in line or "--share-sizes" in line


def gpu_milli_counts(name: str) -> Counter[int]:
    folder = external_dataset("alibaba-gpu-v2023", name)
    return Counter(pod.gpu_milli for pod in read_pods_csv(folder / name) if pod.shares_gpu)


def test_the_share_sizes_are_the_gpushare_traces_and_the_default_traces_within_a_point() -> None:
    gpushare = gpu_milli_counts("openb_pod_list_gpushare100.csv")
    assert tuple(sorted(gpushare.items())) == OPENB_SHARE_MILLI
    default = gpu_milli_counts("openb_pod_list_default.csv")
    assert set(default) == set(gpushare)
    for milli, pods in OPENB_SHARE_MILLI:
        share = pods / gpushare.total()
        assert abs(default[milli] / default.total() - share) < 0.01, milli
