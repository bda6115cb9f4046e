"""`gpu-scheduler explain` offline: a pod manifest against a `kubectl get ... -o yaml` dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hack.localcluster.nodes import G1, G2_EXPANSION, node_manifest
from scheduler.cli import main


def _write(tmp_path: Path, pod_gpus: int) -> tuple[Path, Path]:
    other = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "other", "namespace": "demo"},
        "spec": {
            "nodeName": "g1-0",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    items = [
        node_manifest(G1, "g1-0"),
        node_manifest(G2_EXPANSION, "g2-expansion-0"),
        other,
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(pod_gpus)}}}
                    ]
                },
            }
        )
    )
    return pod, cluster


def _rows(capsys: pytest.CaptureFixture[str], pod: Path, cluster: Path) -> list[dict[str, object]]:
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster), "-o", "json"]) == 0
    rows: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return rows


def test_worked_example_rows_best_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, *_write(tmp_path, 1))
    assert [row["node"] for row in rows] == ["g1-0", "g2-expansion-0"]
    assert rows[0] == {
        "node": "g1-0",
        "feasible": True,
        "reasons": [],
        "components": {
            "base": 50.0,
            "domain_integrity": 50.0,
            "node_matching": 80.0,
            "domain_completion": 40.0,
            "efficiency": 30.0,
        },
        "raw": 250.0,
        "normalized": 92.0,
        "score": 92.0,
    }
    assert (rows[1]["raw"], rows[1]["normalized"]) == (40.0, 31.0)


def test_rejected_nodes_come_last_with_their_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(capsys, *_write(tmp_path, 4))
    assert [(row["node"], row["feasible"]) for row in rows] == [
        ("g2-expansion-0", True),
        ("g1-0", False),
    ]
    assert rows[1]["reasons"] == ["Insufficient nvidia.com/gpu"]
    assert rows[1]["raw"] is None and rows[1]["score"] is None


def test_table_output_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod, cluster = _write(tmp_path, 1)
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2/2 nodes fit pod default/p; the best is g1-0 (score 92)"
    assert lines[1].split()[:3] == ["NODE", "FEASIBLE", "BASE"]
    assert lines[2].split()[:2] == ["g1-0", "yes"]
    assert main(["explain", "--pod-file", str(pod)]) == 2
    assert "--cluster" in capsys.readouterr().err
    assert (
        main(["explain", "--pod-file", str(tmp_path / "absent.yaml"), "--cluster", str(cluster)])
        == 2
    )


def test_cluster_file_without_nodes_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod, _ = _write(tmp_path, 1)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(empty)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu-scheduler explain: {empty}: no Node in the file (nothing)")
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(pod)]) == 2  # the wrong file
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{pod}: no Node in the file (only Pod)" in line


def test_malformed_yaml_names_the_file_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod, _ = _write(tmp_path, 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text("items: [\n")
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(bad)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu-scheduler explain: {bad}: not valid YAML: line 2, column 1: ")


def test_rejected_nodes_show_no_partial_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node the NVLink filter accepts but a taint rejects gets no score in any column."""
    pod, cluster = _write(tmp_path, 1)
    dump = yaml.safe_load(cluster.read_text())
    dump["items"][1]["spec"]["taints"] = [
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    ]
    cluster.write_text(yaml.safe_dump(dump))
    rows = {row["node"]: row for row in _rows(capsys, pod, cluster)}
    tainted = rows["g2-expansion-0"]
    assert tainted["feasible"] is False and tainted["reasons"]
    assert tainted["components"] == {} and tainted["raw"] is None
    assert tainted["normalized"] is None and tainted["score"] is None
    assert rows["g1-0"]["components"] and rows["g1-0"]["score"] is not None
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("g2-expansion-0"))
    assert line.split()[1:10] == ["no", "-", "-", "-", "-", "-", "-", "-", "-"]


def _table(capsys: pytest.CaptureFixture[str], pod: Path, cluster: Path) -> list[str]:
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_pod_larger_than_any_node_says_so_above_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """16 GPUs where the largest node has 8: the daemon's pod-level reason, then the rows."""
    lines = _table(capsys, *_write(tmp_path, 16))
    assert lines[0] == (
        "0/2 nodes are available: the pod requests 16 nvidia.com/gpu "
        "(spec.containers[*].resources.limits) and the largest node has 8."
    )
    assert all("Insufficient nvidia.com/gpu" in line for line in lines[2:]), lines


def test_a_pod_no_node_fits_counts_the_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod, cluster = _write(tmp_path, 4)
    dump = yaml.safe_load(cluster.read_text())
    dump["items"][1]["spec"]["taints"] = [
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    ]
    cluster.write_text(yaml.safe_dump(dump))
    first = _table(capsys, pod, cluster)[0]
    assert first.startswith("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 "), first


def test_a_bound_pod_is_said_to_be_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod, cluster = _write(tmp_path, 1)
    manifest = yaml.safe_load(pod.read_text())
    manifest["spec"]["nodeName"] = "g2-expansion-0"
    manifest["metadata"]["annotations"] = {"gpu-scheduler.io/gpus": "4"}
    pod.write_text(yaml.safe_dump(manifest))
    lines = _table(capsys, pod, cluster)
    assert lines[0].startswith("pod default/p is bound to node g2-expansion-0 holding GPUs 4; ")
    assert lines[1].split()[:2] == ["NODE", "FEASIBLE"]


@pytest.mark.parametrize("quantity", ["3.5", "1500m", "0.1"])
def test_a_fraction_of_a_gpu_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quantity: str
) -> None:
    """The API server refuses nvidia.com/gpu: "3.5" (must be an integer); explain does not
    rank it as 4 GPUs."""
    pod, cluster = _write(tmp_path, 1)
    pod.write_text(pod.read_text().replace("'1'", repr(quantity)))
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"gpu-scheduler explain: {pod}: spec.containers[0].resources.limits")
    assert f"nvidia.com/gpu]: '{quantity}': must be an integer; the API server refuses" in line


def test_whole_quantities_spelled_otherwise_are_ranked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod, cluster = _write(tmp_path, 1)
    pod.write_text(pod.read_text().replace("'1'", "'1000m'"))
    assert _table(capsys, pod, cluster)[0].startswith("2/2 nodes fit")


def test_yaml_output_is_the_json_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod, cluster = _write(tmp_path, 1)
    rows = _rows(capsys, pod, cluster)
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == rows
    assert main(["explain", "--pod-file", str(pod), "--cluster", str(cluster), "-o", "wide"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("NODE")
