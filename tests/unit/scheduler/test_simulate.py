"""`gpu-scheduler simulate`: hand-made clusters with known answers, the openb inputs, the output."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_node, parse_pod
from scheduler.state.cache import ClusterCache
from scheduler.tools.simulate import add_simulate_parser, build_workload, simulate
from scheduler.tools.simulate_policies import POLICIES, BestFit, LeastAllocated, MostAllocated
from scheduler.tools.simulate_trace import (
    TraceError,
    TraceNode,
    TracePod,
    node_object,
    parse_domain_overrides,
    pod_object,
    read_nodes,
    read_pods,
)
from tests.datasets import SMALL_OPENB_DIR, external_dataset

OPENB = "alibaba-gpu-v2023"
REQUIRED_KEYS = {
    "policy",
    "gpus_total",
    "gpus_unallocated_pct",
    "pods_placed",
    "pods_skipped",
    "multi_gpu_pods",
    "single_domain_pct",
}


def node(name: str, gpus: int, cpu: str = "64", memory: str = "256Gi", **kw: str) -> TraceNode:
    return TraceNode(name, cpu, memory, gpus, kw.get("product", "GPU-X"), kw.get("domains"))


def pod(name: str, gpus: int, cpu: str = "2", memory: str = "8Gi", **kw: object) -> TracePod:
    products = kw.get("products", ())
    milli = kw.get("milli", 1000)
    assert isinstance(products, tuple) and isinstance(milli, int)
    return TracePod(name, cpu, memory, gpus, milli, products)


def by_policy(
    nodes: list[TraceNode], pods: list[TracePod], demand: float, **kw: object
) -> dict[str, dict[str, Any]]:
    _, results = simulate(nodes, pods, list(POLICIES), demand=demand, **kw)  # type: ignore[arg-type]
    return {r.policy: r.as_json() for r in results}


# -- hand-made clusters ------------------------------------------------------------------------


def test_small_pod_on_small_node_keeps_the_big_node_whole() -> None:
    nodes = [node("small", 2), node("big", 8)]
    pods = [pod("one", 1), pod("eight", 8)]
    results = by_policy(nodes, pods, demand=0.9)  # 9 of 10 GPUs requested: both pods arrive
    assert results["gpu-scheduler"]["pods_placed"] == 2
    assert results["gpu-scheduler"]["gpus_unallocated_pct"] == 10.0
    assert results["least-allocated"]["pods_placed"] == 1  # spreads the 1-GPU pod to "big"
    assert results["least-allocated"]["pods_skipped"] == 1
    assert results["least-allocated"]["skipped_by_gpus"] == {"8": 1}
    assert results["least-allocated"]["gpus_unallocated_pct"] == 90.0
    assert results["best-fit"]["pods_placed"] == 2
    assert results["most-allocated"]["pods_placed"] == 2


def test_baselines_report_best_and_naive_gpu_choice_inside_the_node() -> None:
    nodes = [node("quad", 4)]  # default layout: two NVLink domains of 2
    pods = [pod("one", 1), pod("two", 2)]
    results = by_policy(nodes, pods, demand=0.75)
    least = results["least-allocated"]
    assert least["multi_gpu_pods"] == 1
    assert least["single_domain_pct"] == 100.0  # GPU 0 taken, the pair 2-3 is free
    assert least["single_domain_naive_pct"] == 0.0  # lowest free GPUs 1, 2 span the domains
    assert least["single_domain_possible"] == 1
    ours = results["gpu-scheduler"]
    assert ours["single_domain_pct"] == ours["single_domain_naive_pct"] == 100.0


def test_gpu_scheduler_keeps_multi_gpu_pods_in_one_domain_whenever_possible() -> None:
    # A 2-GPU pod arrives when one node has a whole free domain and another only split GPUs.
    nodes = [node("a", 4, domains="0-1,2-3"), node("b", 4, domains="0-1,2-3")]
    pods = [pod("p1", 1), pod("p2", 1), pod("p3", 1), pod("pair", 2)]
    results = by_policy(nodes, pods, demand=0.6, seed=3)
    ours = results["gpu-scheduler"]
    assert ours["multi_gpu_pods"] == 1
    assert ours["single_domain_when_possible_pct"] == 100.0


def test_eight_gpu_pod_on_two_domains_of_four_is_never_in_one_domain() -> None:
    results = by_policy([node("big", 8)], [pod("eight", 8)], demand=1.0)
    ours = results["gpu-scheduler"]
    assert ours["pods_placed"] == 1
    assert ours["single_domain_pct"] == 0.0
    assert ours["single_domain_possible"] == 0
    assert ours["single_domain_when_possible_pct"] is None


def test_nvlink_override_changes_the_layout() -> None:
    layouts = parse_domain_overrides(["8=0-7"])
    results = by_policy([node("big", 8)], [pod("eight", 8)], demand=1.0, layouts=layouts)
    assert results["gpu-scheduler"]["single_domain_pct"] == 100.0


def test_gpu_type_constraint_is_required_affinity_on_the_product_label() -> None:
    nodes = [node("t4", 2, product="T4"), node("v100", 2, product="V100M32")]
    pods = [pod("picky", 2, products=("V100M16", "V100M32")), pod("late", 2, products=("A10",))]
    results = by_policy(nodes, pods, demand=1.0)
    for row in results.values():
        assert row["pods_placed"] == 1  # "picky" only fits the V100 node; no A10 anywhere
        assert row["pods_skipped"] == 1
        assert row["gpus_unallocated_pct"] == 50.0


def test_cpu_bound_node_strands_its_gpus() -> None:
    nodes = [node("cpu-poor", 8, cpu="8"), node("roomy", 8, cpu="128")]
    pods = [pod(f"p{i}", 1, cpu="4") for i in range(8)] + [pod("big", 8, cpu="8")]
    _, results = simulate(nodes, pods, ["best-fit"], demand=2.0)
    row = results[0].as_json()
    assert row["gpus_stranded"] >= 6  # the CPU-poor node holds free GPUs no 8-GPU pod can use


# -- baseline scores match kube-scheduler's formulas -------------------------------------------


def snapshot_with_usage() -> tuple[Snapshot, ClusterCache]:
    cache = ClusterCache()
    cache.add_or_update_node(parse_node(node_object(node("n", 4, cpu="4", memory="8Gi"), {})))
    used = parse_pod(pod_object(pod("used", 1, cpu="1", memory="2Gi")))
    cache.assume(used, "n", (0,))
    return Snapshot(cache), cache


def test_least_and_most_allocated_follow_kube_scheduler_integer_math() -> None:
    snapshot, _ = snapshot_with_usage()
    gpu_pod = parse_pod(pod_object(pod("p", 1, cpu="1", memory="1Gi")))
    feasible = np.ones(1, dtype=bool)
    least = LeastAllocated().score(gpu_pod, snapshot, CycleState(), feasible)
    most = MostAllocated().score(gpu_pod, snapshot, CycleState(), feasible)
    # cpu (4000-2000)*100//4000 = 50, memory (8-3)*100//8 = 62, gpu (4-2)*100//4 = 50 -> 162//3
    assert least[0] == 54.0
    # cpu 50, memory 3*100//8 = 37, gpu 50 -> 137//3
    assert most[0] == 45.0
    cpu_pod = parse_pod(pod_object(pod("c", 0, cpu="1", memory="1Gi")))
    # the pod does not request nvidia.com/gpu: only cpu and memory are scored, (50+62)//2
    assert LeastAllocated().score(cpu_pod, snapshot, CycleState(), feasible)[0] == 56.0


def test_best_fit_prefers_fewest_free_gpus_then_fewest_free_cpu() -> None:
    cache = ClusterCache()
    for name, gpus, cpu in (("a", 8, "64"), ("b", 2, "64"), ("c", 2, "32")):
        cache.add_or_update_node(parse_node(node_object(node(name, gpus, cpu=cpu), {})))
    gpu_pod = parse_pod(pod_object(pod("p", 1)))
    points = BestFit().score(gpu_pod, Snapshot(cache), CycleState(), np.ones(3, dtype=bool))
    assert points[2] > points[1] > points[0]
    assert np.all((points >= 0) & (points <= 100))


# -- inputs ------------------------------------------------------------------------------------


@pytest.fixture
def openb() -> Path:
    """The openb trace's directory (external: skipped or failed when absent, see tests.datasets)."""
    return external_dataset(
        OPENB,
        "openb_node_list_gpu_node.csv",
        "openb_node_list_all_node.csv",
        "openb_pod_list_default.csv",
        "openb_pod_list_gpuspec33.csv",
        "openb_pod_list_multigpu50.csv",
    )


@pytest.fixture(params=["small", "openb"])
def trace_dir(request: pytest.FixtureRequest) -> Path:
    """The small stand-in in the repository, then the real openb trace."""
    if request.param == "small":
        return SMALL_OPENB_DIR
    return Path(request.getfixturevalue("openb"))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_openb_node_lists(openb: Path) -> None:
    gpu_nodes = {n.name: n for n in read_nodes(openb / "openb_node_list_gpu_node.csv")}
    assert len(gpu_nodes) == 1213
    assert gpu_nodes["openb-node-0000"] == TraceNode(
        "openb-node-0000", "64000m", "262144Mi", 2, "P100"
    )
    all_nodes = read_nodes(openb / "openb_node_list_all_node.csv")
    assert len(all_nodes) == 1523
    assert sum(n.gpus for n in all_nodes) == 6212
    assert all_nodes[0] == TraceNode("openb-node-0000", "32000m", "262144Mi", 0, "")
    assert {n.gpu_product for n in all_nodes} >= {"G2", "G3", "T4", "P100", "V100M16", "A10"}
    labels = parse_node(node_object(gpu_nodes["openb-node-0000"], {})).labels
    assert labels["nvidia.com/gpu.product"] == "P100"


def test_openb_pod_lists(openb: Path) -> None:
    default = {p.name: p for p in read_pods(openb / "openb_pod_list_default.csv")}
    assert len(default) == 8152
    assert default["openb-pod-0000"] == TracePod("openb-pod-0000", "12000m", "16384Mi", 1, 1000, ())
    assert default["openb-pod-0001"].shares_gpu  # gpu_milli 460
    assert sum(p.shares_gpu for p in default.values()) == 3078
    spec = {p.name: p for p in read_pods(openb / "openb_pod_list_gpuspec33.csv")}
    assert spec["openb-pod-0009"].gpu_products == ("V100M16", "V100M32")
    info = parse_pod(pod_object(spec["openb-pod-0009"]))
    assert not info.errors
    (term,) = info.required_terms
    assert term.expressions[0].values == ("V100M16", "V100M32")
    assert all(len(set(p.gpu_products)) == len(p.gpu_products) for p in spec.values())
    multi = read_pods(openb / "openb_pod_list_multigpu50.csv")  # no gpu_spec column
    assert multi[0] == TracePod("openb-pod-0000", "12000m", "16384Mi", 1, 1000, ())
    assert max(p.gpus for p in multi) == 8


def test_small_openb_stand_in_reads_like_the_trace() -> None:
    """The same readers on the repository's stand-in (tests/data/make_small.py): every row, the
    units, the optional columns, and the GPU-type list as required node affinity."""
    nodes_csv = SMALL_OPENB_DIR / "openb_node_list_all_node.csv"
    nodes = read_nodes(nodes_csv)
    rows = csv_rows(nodes_csv)
    assert [n.name for n in nodes] == [row["sn"] for row in rows]
    assert nodes[0] == TraceNode(
        rows[0]["sn"],
        f"{rows[0]['cpu_milli']}m",
        f"{rows[0]['memory_mib']}Mi",
        int(rows[0]["gpu"]),
        rows[0]["model"],
    )
    assert any(n.gpus == 0 and n.gpu_product == "" for n in nodes)
    gpu_nodes = read_nodes(SMALL_OPENB_DIR / "openb_node_list_gpu_node.csv")
    assert gpu_nodes == [n for n in nodes if n.gpus]
    pods_csv = SMALL_OPENB_DIR / "openb_pod_list_default.csv"
    pods = read_pods(pods_csv)
    pod_rows = csv_rows(pods_csv)
    assert len(pods) == len(pod_rows)
    for parsed, row in zip(pods, pod_rows, strict=True):
        assert parsed.gpus == int(row["num_gpu"])
        assert parsed.shares_gpu == (parsed.gpus == 1 and int(row["gpu_milli"]) < 1000)
        assert parsed.gpu_products == tuple(p for p in row["gpu_spec"].split("|") if p)
    picky = next(p for p in pods if len(p.gpu_products) > 1)
    info = parse_pod(pod_object(picky))
    assert not info.errors
    (term,) = info.required_terms
    assert term.expressions[0].values == picky.gpu_products
    multi = read_pods(SMALL_OPENB_DIR / "openb_pod_list_multigpu50.csv")  # no gpu_spec column
    assert all(p.gpu_products == () for p in multi)
    assert max(p.gpus for p in multi) == 8


def test_yaml_inputs(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        """
nodes:
  - {name: g8, cpu: "128", memory: 1Ti, gpus: 8, gpu_product: H100, nvlink_domains: "0-7"}
  - {name: c0, cpu: 500m, memory: 1Gi}
pods:
  - {name: train, cpu: "16", memory: 64Gi, gpus: 8, gpu_products: [H100]}
  - {name: web, cpu: "1", memory: 1Gi}
"""
    )
    nodes = read_nodes(path)
    assert nodes[0] == TraceNode("g8", "128", "1Ti", 8, "H100", "0-7")
    assert nodes[1].gpus == 0 and nodes[1].gpu_product == ""
    pods = read_pods(path)
    assert pods[0].gpu_products == ("H100",) and pods[1].gpus == 0
    _, results = simulate(nodes, pods, ["gpu-scheduler"], demand=1.0)
    assert results[0].as_json()["single_domain_pct"] == 100.0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("nodes:\n  - {name: a, cpu: x, memory: 1Gi}\n", "cpu"),
        ("nodes:\n  - {name: a, cpu: 1, memory: 1Gi, gpus: -1}\n", "gpus"),
        ("nodes:\n  - {name: a, cpu: 1, memory: 1Gi, gpus: 2, nvlink_domains: 0-3}\n", "nvlink"),
        ("nodes:\n  - {cpu: 1, memory: 1Gi}\n", "name"),
        ("pods: []\n", "nodes"),
    ],
)
def test_bad_yaml_nodes_name_the_field(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TraceError, match=match):
        read_nodes(path)


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="unknown format"):
        read_nodes(tmp_path / "nodes.txt")
    csv_path = tmp_path / "nodes.csv"
    csv_path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,abc,1,0,\n")
    with pytest.raises(TraceError, match=r"nodes.csv:2: cpu_milli"):
        read_nodes(csv_path)
    csv_path.write_text("sn,cpu_milli\nn1,1\n")
    with pytest.raises(TraceError, match="missing column"):
        read_nodes(csv_path)
    with pytest.raises(TraceError, match="COUNT=LAYOUT"):
        parse_domain_overrides(["0-3,4-7"])
    with pytest.raises(TraceError, match="out of range"):
        parse_domain_overrides(["4=0-3,4-7"])


# -- the workload ------------------------------------------------------------------------------


def test_workload_repeats_trace_order_until_demand_and_leaves_sharing_pods_out() -> None:
    pods = [pod("a", 1), pod("shared", 1, milli=500), pod("cpu", 0), pod("b", 2)]
    workload = build_workload(pods, cluster_gpus=4, demand=1.5, sample=False, seed=0)
    names = [p.name.rsplit("-a", 1)[0] for p in workload.pods]
    assert names == ["a", "cpu", "b", "a", "cpu", "b"]  # 6 GPUs requested >= 1.5 * 4
    assert workload.gpu_sharing_excluded == 1
    assert workload.passes == 2
    assert len({p.key for p in workload.pods}) == len(workload.pods)
    assert workload.largest_gpus == 2
    only_gpu = build_workload(pods, 4, 1.5, sample=False, seed=0, cpu_pods=False)
    assert all(p.gpus for p in only_gpu.pods)
    with pytest.raises(ValueError, match="demand"):
        build_workload(pods, 4, 0.0, sample=False, seed=0)


def test_same_seed_same_results_and_sampling_depends_on_it(trace_dir: Path) -> None:
    nodes = read_nodes(trace_dir / "openb_node_list_gpu_node.csv")[:200]
    pods = read_pods(trace_dir / "openb_pod_list_default.csv")

    def run(seed: int) -> list[dict[str, Any]]:
        _, results = simulate(nodes, pods, list(POLICIES), demand=0.8, seed=seed, sample=True)
        rows = [r.as_json() for r in results]
        for row in rows:
            row.pop("wall_s"), row.pop("pods_per_s")
        return rows

    first = run(7)
    assert first == run(7)
    assert first != run(8)


# -- the command -------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="gpu-scheduler")
    add_simulate_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", *argv])
    code = args.handler(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_output_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "nodes:\n  - {name: n, cpu: 8, memory: 8Gi, gpus: 2}\n"
        "pods:\n  - {name: p, cpu: 1, memory: 1Gi, gpus: 1}\n"
    )
    code, out, _ = run_cli(["--nodes", str(path), "--pods", str(path), "-o", "json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert [r["policy"] for r in rows] == list(POLICIES)
    for row in rows:
        assert set(row) >= REQUIRED_KEYS
        assert row["gpus_total"] == 2


def test_cli_rejects_unknown_policy_and_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes: []\npods: []\n")
    code, _, err = run_cli(["--nodes", str(path), "--pods", str(path), "--policy", "fifo"], capsys)
    assert code == 2 and "unknown policy fifo" in err
    code, _, err = run_cli(["--nodes", str(tmp_path / "none.csv"), "--pods", str(path)], capsys)
    assert code == 2 and "none.csv" in err


def test_smoke_on_the_trace(trace_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes_csv = trace_dir / "openb_node_list_all_node.csv"
    pods_csv = trace_dir / "openb_pod_list_default.csv"
    argv = ["--nodes", str(nodes_csv), "--pods", str(pods_csv), "--demand", "0.3"]
    # the expected totals, counted straight from the CSVs
    gpus_total = sum(int(row["gpu"]) for row in csv_rows(nodes_csv))
    sharing = sum(
        int(row["num_gpu"]) == 1 and int(row["gpu_milli"]) < 1000 for row in csv_rows(pods_csv)
    )
    if trace_dir.name == OPENB:
        assert (gpus_total, sharing) == (6212, 3078)  # the trace's published size
    code, out, _ = run_cli([*argv, "-o", "json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert {r["policy"] for r in rows} == set(POLICIES)
    for row in rows:
        assert row["gpus_total"] == gpus_total
        assert row["gpu_sharing_excluded"] == sharing
        assert row["pods_placed"] + row["pods_skipped"] == row["pods_arrived"]
        assert 0.0 <= row["gpus_unallocated_pct"] <= 100.0
        assert row["gpus_stranded"] <= row["gpus_unallocated"]
    ours = next(r for r in rows if r["policy"] == "gpu-scheduler")
    assert ours["single_domain_when_possible_pct"] in (100.0, None)
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    assert f"{sharing} GPU-sharing left out" in out
    assert out.split("\n\ncolumns:")[0].splitlines()[-1].split()[0] == "random"
