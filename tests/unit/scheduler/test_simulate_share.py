"""`gpu-scheduler simulate --shares`: GPU-sharing pods placed with whole-GPU and CPU-only pods,
on hand-made clusters with known answers, on the small gpushare stand-in and on the openb
gpushare traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scheduler.cli import main
from scheduler.config import SchedulerConfig
from scheduler.tools.simulate_legend import SHARE_COLUMNS
from scheduler.tools.simulate_share import ShareResult, render_share_table, simulate_shares
from scheduler.tools.simulate_share_cluster import (
    CPU_ONLY,
    SHARE,
    WHOLE_GPUS,
    ShareCluster,
    share_workload,
)
from scheduler.tools.simulate_share_gpus import WHOLE
from scheduler.tools.simulate_share_policies import SHARE_POLICY_NAMES, share_policy
from scheduler.tools.simulate_trace import TraceNode, TracePod, build_nodes, read_nodes, read_pods
from tests.datasets import SMALL_OPENB_DIR, external_dataset
from tests.unit.scheduler.test_simulate import csv_rows, run_cli

OPENB = "alibaba-gpu-v2023"
SMALL_SHARES = SMALL_OPENB_DIR / "openb_pod_list_gpushare40.csv"
SMALL_NODES = SMALL_OPENB_DIR / "openb_node_list_all_node.csv"


def node(name: str, gpus: int, cpu: str = "64", memory: str = "256Gi") -> TraceNode:
    return TraceNode(name, cpu, memory, gpus, "GPU-X")


def pod(name: str, gpus: int, milli: int = WHOLE, cpu: str = "2") -> TracePod:
    return TracePod(name, cpu, "8Gi", gpus, milli if gpus else 0)


def by_policy(
    nodes: list[TraceNode], pods: list[TracePod], demand: float, **kw: Any
) -> dict[str, dict[str, Any]]:
    _, results = simulate_shares(nodes, pods, list(SHARE_POLICY_NAMES), demand=demand, **kw)
    return {r.policy: r.as_json() for r in results}


# -- workload and cluster ----------------------------------------------------------------------


def test_workload_counts_a_share_as_its_fraction_until_the_demand() -> None:
    nodes = build_nodes([node("a", 2)], {})
    pods = [pod("s", 1, 500), pod("w", 1), pod("c", 0)]
    workload = share_workload(pods, nodes, demand=1.5, sample=False, seed=0)
    # 0.5 + 1 (+ 0 for the CPU-only pod) + 0.5 + 1 >= 3 GPUs
    assert [a.kind for a in workload.arrivals] == [SHARE, WHOLE_GPUS, CPU_ONLY, SHARE, WHOLE_GPUS]
    assert workload.gpus_requested == 3.0
    assert (workload.share_pods, workload.whole_gpu_pods, workload.cpu_only_pods) == (1, 1, 1)
    share = workload.arrivals[0]
    assert share.pod.gpus == 0 and share.opener is not None and share.opener.gpus == 1
    assert len({a.pod.key for a in workload.arrivals}) == 5
    # the fragmentation measure's types: the two GPU pod shapes, each half of the GPU pods
    assert workload.types.weight.tolist() == [0.5, 0.5]
    assert workload.types.milli.tolist() == [500, WHOLE]
    with pytest.raises(ValueError, match="--demand must be a positive number"):
        share_workload(pods, nodes, demand=0.0, sample=False, seed=0)


def test_a_share_never_takes_more_of_a_gpu_than_is_free() -> None:
    nodes = build_nodes([node("a", 1)], {})
    pods = [pod("s", 1, 700), pod("t", 1, 400), pod("w", 1)]
    share, small, whole = share_workload(pods, nodes, 3.0, False, 0).arrivals[:3]
    cluster = ShareCluster(nodes)
    cluster.commit(share, 0, (0,))
    assert cluster.free.tolist() == [[300]]
    assert int(cluster.cache.free[0, 4]) == 0  # the cache counts the shared GPU as used
    with pytest.raises(ValueError, match="no room"):
        cluster.commit(small, 0, (0,))
    with pytest.raises(ValueError, match="no room"):
        cluster.commit(whole, 0, (0,))
    assert cluster.free.tolist() == [[300]]


def test_every_policy_keeps_every_gpu_within_its_thousandths() -> None:
    """Each step of each policy on the gpushare stand-in: no GPU below 0 or above 1000 free, the
    thousandths held equal to those of the pods placed, the cache's used GPUs those touched."""
    nodes = build_nodes(read_nodes(SMALL_NODES), {})
    workload = share_workload(read_pods(SMALL_SHARES), nodes, 1.3, False, 0)
    assert sum(a.kind == SHARE for a in workload.arrivals) > 20
    for name in SHARE_POLICY_NAMES:
        policy = share_policy(name, SchedulerConfig(), 0)
        cluster = ShareCluster(nodes)
        capacity = int(cluster.free.sum())
        held = 0
        for arrival in workload.arrivals:
            choice = policy.choose(arrival, cluster)
            if choice is None:
                continue
            cluster.commit(arrival, *choice)
            held += arrival.gpu_milli
            free = cluster.free  # free: (rows, gpus)
            assert ((free >= 0) & (free <= WHOLE)).all(), name
            assert capacity - int(free.sum()) == held, name
            touched = (free < WHOLE).sum(axis=1) - (cluster.free.shape[1] - cluster.gpu_count)
            assert (cluster.cache.requested[: cluster.rows, 4] == touched).all(), name


# -- hand-made clusters ------------------------------------------------------------------------


def test_packing_keeps_a_gpu_whole_where_first_fit_breaks_it() -> None:
    """Node a has a GPU type the first share does not accept, so it goes to b. The second
    share fits both: first fit opens a's GPU, gpu-scheduler packs it onto b's. Then the
    whole-GPU pod fits only where a's GPU stayed whole. (With a kept from the first share by
    too little cpu instead, the GPU-fragmentation score, having learned that share's cpu per
    GPU, would rather fill a's GPU, which that kind of share could never use.)"""
    nodes = [TraceNode("a", "16", "256Gi", 1, "GPU-Y"), node("b", 1, cpu="16")]
    big = TracePod("big", "8", "8Gi", 1, 500, ("GPU-X",))
    pods = [big, pod("small", 1, 300, cpu="1"), pod("whole", 1, cpu="2")]
    found = by_policy(nodes, pods, demand=0.9)
    assert found["gpu-scheduler"]["pods_placed"] == 3
    assert found["gpu-scheduler"]["gpus_unallocated"] == 0.2
    assert found["first-fit"]["pods_placed"] == 2
    assert found["first-fit"]["whole_gpu_pods_skipped"] == 1
    assert found["first-fit"]["gpus_partly_used"] == 2


def test_a_cpu_only_pod_leaves_the_cpu_beside_shared_gpus() -> None:
    """g's one GPU holds a half share; c has no GPU. To the whole-GPU score g had no free GPU,
    like c, so the CPU-only pod went to either at random and, on g, took the cpu the second
    half share needs. Counting the half GPU left (and steering CPU-only pods off free GPU), it
    goes to c."""
    nodes = [node("g", 1, cpu="16"), TraceNode("c", "16", "256Gi", 0, "")]
    pods = [pod("half", 1, 500, cpu="4"), pod("cpu", 0, cpu="10"), pod("other", 1, 500, cpu="4")]
    placed = {
        seed: {r.policy: r.as_json()["pods_placed"] for r in results}
        for seed in range(5)
        for _, results in [
            simulate_shares(
                nodes,
                pods,
                ["gpu-scheduler", "gpu-scheduler-whole-gpus"],
                demand=0.99,
                seed=seed,
            )
        ]
    }
    assert all(found["gpu-scheduler"] == 3 for found in placed.values())
    assert any(found["gpu-scheduler-whole-gpus"] == 2 for found in placed.values())


def test_packing_takes_the_tightest_gpu_of_a_node_and_keeps_a_domain_whole() -> None:
    """One node of four GPUs in two domains of two. A whole-GPU pod takes GPU 0 (domain 0),
    shares fill GPU 1 (domain 0, already broken): domain 1 stays whole for a 2-GPU pod."""
    nodes = [TraceNode("a", "64", "256Gi", 4, "GPU-X", "0-1,2-3")]
    pods = [pod("w", 1), pod("s1", 1, 600), pod("s2", 1, 400), pod("pair", 2)]
    found = by_policy(nodes, pods, demand=0.99)
    ours = found["gpu-scheduler"]
    assert ours["pods_placed"] == 4 and ours["single_domain_pct"] == 100.0
    assert ours["gpus_unallocated"] == 0.0
    # least-allocated takes the lowest GPU with room: s2 joins s1 there too, same end state
    assert found["least-allocated"]["gpus_unallocated"] == 0.0


def test_fragmented_gpus_at_the_end_by_hand() -> None:
    """One node of two GPUs; arrivals: a 600-share (GPU 0), a whole GPU (GPU 1), the 600-share
    again, which finds no room. The 400 left on GPU 0 serve neither shape of the workload: all
    of it is fragmented."""
    found = by_policy([node("a", 2)], [pod("s", 1, 600), pod("w", 1)], demand=1.0)
    for name, row in found.items():
        assert (row["share_pods_placed"], row["share_pods_skipped"]) == (1, 1), name
        assert (row["gpus_unallocated"], row["gpus_fragmented"]) == (0.4, 0.4), name
        assert row["gpus_fragmented_pct"] == 20.0


# -- the stand-in, the CLI, the traces ---------------------------------------------------------


def check_rows(rows: list[dict[str, Any]], gpus_total: int) -> None:
    assert [r["policy"] for r in rows] == list(SHARE_POLICY_NAMES)
    for row in rows:
        assert row["gpus_total"] == gpus_total
        assert row["pods_placed"] + row["pods_skipped"] == row["pods_arrived"]
        assert row["share_pods_placed"] > 0
        assert 0 <= row["gpus_fragmented"] <= row["gpus_unallocated"] <= gpus_total
        placed = sum(row[f"{k}_pods_placed"] for k in ("share", "whole_gpu", "cpu_only"))
        assert placed == row["pods_placed"]


def test_small_gpushare_stand_in_runs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--shares", "--nodes", str(SMALL_NODES), "--pods", str(SMALL_SHARES)]
    code, out, _ = run_cli([*argv, "-o", "json"], capsys)
    assert code == 0
    gpus_total = sum(int(r["gpu"]) for r in csv_rows(SMALL_NODES))
    check_rows(json.loads(out), gpus_total)
    code, out, _ = run_cli(argv, capsys)
    assert code == 0
    sharing = sum(
        int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < WHOLE for r in csv_rows(SMALL_SHARES)
    )
    assert f"80 pods: {sharing} GPU-sharing" in out
    assert "GPUS_FRAGMENTED" in out and "Weng et al." in out
    table = out.split("\n\ncolumns:")[0].splitlines()
    assert [line.split()[0] for line in table[-len(SHARE_POLICY_NAMES) :]] == list(
        SHARE_POLICY_NAMES
    )


def test_cli_refuses_shares_with_gangs_and_unknown_policies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["--shares", "--nodes", str(SMALL_NODES)]
    code, _, err = run_cli([*base, "--random-gangs", "3"], capsys)
    assert code == 2 and "--shares goes with --pods" in err
    code, _, err = run_cli([*base, "--pods", str(SMALL_SHARES), "--policy", "fgd"], capsys)
    assert code == 2 and "unknown policy fgd for --shares" in err
    assert len(err.strip().splitlines()) == 1


@pytest.fixture
def openb() -> Path:
    """The openb trace's directory (external: skipped or failed when absent, see tests.datasets)."""
    return external_dataset(OPENB, "openb_node_list_all_node.csv", "openb_pod_list_gpushare40.csv")


def test_gpushare_trace(openb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real gpushare40 variant at a low demand (kept small in time)."""
    pods_csv = openb / "openb_pod_list_gpushare40.csv"
    argv = ["--shares", "--nodes", str(openb / "openb_node_list_all_node.csv")]
    code, out, _ = run_cli(
        [*argv, "--pods", str(pods_csv), "--demand", "0.1", "-o", "json"], capsys
    )
    assert code == 0
    rows = json.loads(out)
    check_rows(rows, 6212)  # the trace's published GPU count
    sharing = sum(
        int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < WHOLE for r in csv_rows(pods_csv)
    )
    assert sharing == 4001
    # at 10 % demand every pod fits somewhere under every policy
    assert all(r["pods_skipped"] == 0 for r in rows)
    ours = next(r for r in rows if r["policy"] == "gpu-scheduler")
    first = next(r for r in rows if r["policy"] == "first-fit")
    assert np.isclose(ours["gpus_unallocated"], first["gpus_unallocated"])  # same pods placed


def test_every_column_of_the_table_is_explained_in_the_legend_and_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = ShareResult("gpu-scheduler", gpus_total=1)
    table = render_share_table([], [result]).split("\n\ncolumns:")[0]
    header = table.strip().splitlines()[0].split()[1:]
    names = {part for name, _ in SHARE_COLUMNS for part in name.split(" / ")}
    assert set(header) <= names
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "the --shares table's columns:" in capsys.readouterr().out
