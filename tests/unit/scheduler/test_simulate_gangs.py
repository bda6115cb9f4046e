"""`gpu-scheduler simulate --gangs`: gangs in time, all-or-nothing against pod by pod, on hand-made
clusters with known answers; the gang input and the generator; the command."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from scheduler.cli import main
from scheduler.model.objects import NodeInfo
from scheduler.tools.simulate import build_nodes
from scheduler.tools.simulate_gangs import (
    POD_BY_POD,
    TraceGang,
    member_pods,
    random_gangs,
    read_gangs,
    simulate_gangs,
)
from scheduler.tools.simulate_trace import TraceError, TraceNode, read_nodes
from tests.fuzzing import FUZZ, bounded, json_values

GPU_SCHEDULER = "gpu-scheduler"


def nodes(*specs: tuple[str, int, str]) -> list[NodeInfo]:
    """Nodes of (name, GPUs, rack or "") with plenty of cpu and memory."""
    trace = [
        TraceNode(name, "64", "512Gi", gpus, "GPU-X", labels=(("rack", rack),) if rack else ())
        for name, gpus, rack in specs
    ]
    return build_nodes(trace, {})


def gang(
    name: str, members: int, gpus: int, duration: float, arrival: float = 0, **kw: Any
) -> TraceGang:
    return TraceGang(
        name,
        members,
        gpus,
        kw.pop("min_count", members),
        duration,
        arrival,
        **kw,
    )


def run(
    cluster: list[NodeInfo], gangs: list[TraceGang], *policies: str
) -> dict[str, dict[str, Any]]:
    chosen = list(policies) or [GPU_SCHEDULER, POD_BY_POD]
    return {r.policy: r.as_json() for r in simulate_gangs(cluster, gangs, chosen, seed=0)}


def test_pod_by_pod_holds_gpus_while_a_gang_waits_and_gpu_scheduler_holds_none() -> None:
    # One 8-GPU node is busy until t=100; a 2 x 8-GPU gang arrives at t=1.
    cluster = nodes(("n0", 8, ""), ("n1", 8, ""))
    gangs = [gang("x", 1, 8, 100), gang("a", 2, 8, 100, arrival=1)]
    results = run(cluster, gangs)
    ours, pods = results[GPU_SCHEDULER], results[POD_BY_POD]
    assert ours["partial_gpu_seconds"] == 0
    assert pods["partial_gpu_seconds"] == 8 * 99  # one member held 8 GPUs from t=1 to t=100
    assert ours["idle_while_waiting_gpu_seconds"] == 8 * 99  # the free node stays free
    assert pods["idle_while_waiting_gpu_seconds"] == 0
    for result in (ours, pods):  # both start the gang when x ends, and end at t=200
        assert (result["gangs_started"], result["gangs_stuck"]) == (2, 0)
        assert (result["wait_p50_s"], result["makespan_s"]) == (49.5, 200)
    assert ours["gpu_busy_pct"] == round(100 * (8 * 100 + 16 * 100) / (16 * 200), 2)


def test_a_gang_that_can_never_fit_is_stuck_holding_gpus_only_pod_by_pod() -> None:
    cluster = nodes(("n0", 8, ""), ("n1", 8, ""))
    gangs = [gang("cpu-only", 1, 0, 50), gang("a", 3, 8, 100)]  # 24 GPUs on 16
    results = run(cluster, gangs)
    ours, pods = results[GPU_SCHEDULER], results[POD_BY_POD]
    assert (ours["gangs_stuck"], ours["partial_gangs_at_end"], ours["partial_gpus_at_end"]) == (
        1,
        0,
        0,
    )
    assert (pods["gangs_stuck"], pods["partial_gangs_at_end"], pods["partial_gpus_at_end"]) == (
        1,
        1,
        16,
    )
    assert (ours["partial_gpu_seconds"], pods["partial_gpu_seconds"]) == (0, 16 * 50)
    assert ours["makespan_s"] == pods["makespan_s"] == 50


def test_min_count_below_members_starts_the_gang_with_those_that_fit() -> None:
    cluster = nodes(("n0", 8, ""))
    results = run(cluster, [gang("a", 4, 4, 100, min_count=2)], GPU_SCHEDULER)
    ours = results[GPU_SCHEDULER]
    assert (ours["gangs_started"], ours["wait_p50_s"], ours["partial_gpu_seconds"]) == (1, 0, 0)
    assert ours["gpu_busy_pct"] == 100.0  # the two members that fit fill the node


def test_the_topology_key_keeps_a_gang_inside_one_rack() -> None:
    # 12 GPUs in all, at most 8 in one rack: a 3 x 4-GPU gang fits the cluster, not one rack.
    cluster = nodes(("a0", 4, "a"), ("a1", 4, "a"), ("b0", 4, "b"))
    gangs = [gang("a", 3, 4, 100, topology_key="rack")]
    results = run(cluster, gangs)
    assert results[GPU_SCHEDULER]["gangs_stuck"] == 1
    assert results[POD_BY_POD]["gangs_started"] == 1  # pod by pod knows no topology key
    fits = run(cluster, [gang("a", 2, 4, 100, topology_key="rack")], GPU_SCHEDULER)
    assert fits[GPU_SCHEDULER]["gangs_started"] == 1


def test_gangs_pack_on_one_node_and_members_keep_one_nvlink_domain() -> None:
    cluster = nodes(*((f"s{i}", 2, "") for i in range(4)), ("big", 8, ""))
    results = run(cluster, [gang("a", 4, 2, 100)], GPU_SCHEDULER)
    assert results[GPU_SCHEDULER]["gangs_one_node_pct"] == 100.0
    assert results[GPU_SCHEDULER]["members_one_domain_pct"] == 100.0


def test_runs_are_deterministic_and_seeded() -> None:
    cluster = nodes(*((f"n{i}", 8, "ab"[i % 2]) for i in range(4)))
    first = random_gangs(30, 7, cluster, "rack")
    assert first == random_gangs(30, 7, cluster, "rack")
    assert first != random_gangs(30, 8, cluster, "rack")
    assert all(g.members * g.gpus <= 32 and g.gpus <= 8 for g in first)
    assert any(g.topology_key == "rack" for g in first) and any(not g.topology_key for g in first)
    policies = [GPU_SCHEDULER, POD_BY_POD, "least-allocated"]

    def figures() -> list[dict[str, Any]]:
        results = simulate_gangs(cluster, first, policies, seed=7)
        return [{k: v for k, v in r.as_json().items() if k != "wall_s"} for r in results]

    once = figures()
    assert once == figures()
    assert once[0]["partial_gpu_seconds"] == 0
    assert once[1]["partial_gpu_seconds"] > 0  # the generated load makes pod by pod split gangs


def test_member_pods_point_at_their_pod_group() -> None:
    pods = member_pods(gang("ddp", 2, 8, 10))
    assert [(p.name, p.pod_group, p.gpus) for p in pods] == [
        ("ddp-m0", "ddp", 8),
        ("ddp-m1", "ddp", 8),
    ]


# -- input -------------------------------------------------------------------------------------


def test_read_gangs_copies_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gangs.yaml"
    path.write_text(
        "gangs:\n"
        "  - {name: ddp, members: 4, gpus: 8, duration: 600, count: 2, every: 30, arrival: 5}\n"
        "  - {name: r, members: 3, gpus: 2, min_count: 2, duration: 60, topology_key: rack,"
        " cpu: '8', memory: 64Gi}\n"
    )
    gangs = read_gangs(path)
    assert gangs == [
        TraceGang("ddp-0", 4, 8, 4, 600.0, 5.0),
        TraceGang("ddp-1", 4, 8, 4, 600.0, 35.0),
        TraceGang("r", 3, 2, 2, 60.0, 0.0, "rack", "8", "64Gi"),
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{name: a, members: 2, gpus: 1}", "gangs[0]: duration must be a number of seconds"),
        ("{name: a, members: 2, gpus: 1, duration: 1, min_count: 3}", "min_count must be between"),
        ("{name: a, members: 0, gpus: 1, duration: 1}", "members must be between 1 and"),
        ("{name: a, members: 1, gpus: -1, duration: 1}", "gpus must be a non-negative integer"),
        (
            "{name: a, members: 1, gpus: 1, duration: 1, count: 2}\n  - {name: a-1, members: 1, "
            "gpus: 1, duration: 1}",
            "gang 'a-1' is listed twice",
        ),
        ("{name: a, members: 1, gpus: 1, duration: 1, topology_key: [x]}", "topology_key must"),
        ("{name: a, members: 1000, gpus: 1, duration: 1, count: 201}", "more than 200000 member"),
        ("{name: a, members: 1, gpus: 1, duration: .nan}", "duration must be between 0 and"),
    ],
)
def test_bad_gang_entries_name_the_entry_and_field(
    tmp_path: Path, entry: str, expected: str
) -> None:
    path = tmp_path / "gangs.yaml"
    path.write_text(f"gangs:\n  - {entry}\n")
    with pytest.raises(TraceError, match=expected.replace("[", r"\[")):
        read_gangs(path)


def test_node_labels_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("nodes:\n  - {name: a0, cpu: '8', memory: 8Gi, gpus: 8, labels: {rack: a}}\n")
    (node,) = build_nodes(read_nodes(path), {})
    assert node.labels["rack"] == "a" and node.labels["kubernetes.io/hostname"] == "a0"
    path.write_text("nodes:\n  - {name: a0, cpu: '8', memory: 8Gi, gpus: 8, labels: [rack]}\n")
    with pytest.raises(TraceError, match="labels must be a mapping of strings to strings"):
        read_nodes(path)


# -- the command -------------------------------------------------------------------------------


def test_command_prints_one_row_per_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_file = tmp_path / "nodes.yaml"
    node_file.write_text("nodes:\n" + "".join(
        f"  - {{name: n{i}, cpu: '64', memory: 512Gi, gpus: 8}}\n" for i in range(2)
    ))  # fmt: skip
    gangs = tmp_path / "gangs.yaml"
    gangs.write_text(
        "gangs:\n  - {name: x, members: 1, gpus: 8, duration: 100}\n"
        "  - {name: a, members: 2, gpus: 8, duration: 100, arrival: 1}\n"
    )
    assert main(["simulate", "--nodes", str(node_file), "--gangs", str(gangs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("POLICY"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1 : lines.index("", header)]}
    assert set(rows) == {GPU_SCHEDULER, POD_BY_POD}
    assert rows[GPU_SCHEDULER][3] == "0" and rows[POD_BY_POD][3] == "792"
    argv = ["simulate", "--nodes", str(node_file), "--random-gangs", "5", "-o", "json"]
    assert main(argv) == 0
    assert [r["policy"] for r in json.loads(capsys.readouterr().out)] == [GPU_SCHEDULER, POD_BY_POD]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--pods", "p.yaml", "--gangs", "g.yaml"], "give one of --pods, --gangs, --random-gangs"),
        ([], "give one of --pods, --gangs, --random-gangs (got none)"),
        (["--random-gangs", "0"], "--random-gangs must be between 1 and"),
        (["--random-gangs", "2", "--policy", "nope"], "unknown policy nope for gangs"),
    ],
)
def test_bad_gang_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    node_file = tmp_path / "nodes.yaml"
    node_file.write_text("nodes:\n  - {name: n0, cpu: '64', memory: 512Gi, gpus: 8}\n")
    assert main(["simulate", "--nodes", str(node_file), *extra]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpu-scheduler simulate: ") and expected in line, line


# -- fuzzing -----------------------------------------------------------------------------------

gang_entries = st.dictionaries(
    st.sampled_from(
        [
            "name",
            "members",
            "gpus",
            "min_count",
            "duration",
            "arrival",
            "count",
            "every",
            "topology_key",
            "cpu",
            "memory",
        ]
    ),
    st.one_of(st.integers(-3, 50), json_values(huge_ints=False, max_repeat=100)),
    max_size=11,
)
node_entries = st.fixed_dictionaries(
    {"name": st.just("n0"), "cpu": st.just("8"), "memory": st.just("8Gi"), "gpus": st.just(8)},
    optional={"labels": json_values(huge_ints=False, max_repeat=100)},
)


@FUZZ
@given(st.lists(gang_entries, max_size=3), node_entries)
def test_fuzz_gang_and_node_yaml(entries: list[dict[str, Any]], node: dict[str, Any]) -> None:
    """Only `TraceError` escapes, with a bounded message; what reads back runs in the simulator."""
    with tempfile.TemporaryDirectory() as folder:
        gangs_path, nodes_path = Path(folder) / "gangs.yaml", Path(folder) / "nodes.yaml"
        gangs_path.write_text(yaml.safe_dump({"gangs": entries}, allow_unicode=True))
        nodes_path.write_text(yaml.safe_dump({"nodes": [node]}, allow_unicode=True))
        try:
            cluster = build_nodes(read_nodes(nodes_path), {})
            gangs = read_gangs(gangs_path)
        except TraceError as error:
            assert bounded(error), len(str(error))
            return
        small = [g for g in gangs if g.members <= 50][:3]
        results = simulate_gangs(cluster, small, [GPU_SCHEDULER, POD_BY_POD])
        assert all(r.as_json()["partial_gpu_seconds"] >= 0 for r in results)
