"""`gpu-scheduler topology discover` with `nvidia-smi -q -x`: both annotations on stdout, notes on
stderr, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.cli import main
from tests.datasets import H200_DIR
from tests.unit.topology.test_topology_discover import groups_matrix, matrix
from tests.unit.topology.test_topology_smi_query import node_query, uuid_of

TOPO = H200_DIR / "nvidia-smi-topo.txt"
QUERY = H200_DIR / "nvidia-smi-q.xml"
H200_UUID = "GPU-45548304-7cf6-2002-ad86-7a8d1badd8cb"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code = main(["topology", "discover", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def test_both_annotations_from_the_recorded_h200(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([f"--file={TOPO}", f"--query-file={QUERY}"], capsys)
    assert code == 0
    assert out == (
        f"gpu-scheduler.io/nvlink-domains=0\ngpu-scheduler.io/nvlink-domain-ids={H200_UUID}\n"
    )
    assert err[0] == "1 GPU in 1 NVLink domain: 0"
    assert f"gpu-scheduler.io/nvlink-domain-ids={H200_UUID}" in err[1]  # the kubectl line


def test_by_pci_bus_id(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([f"--file={TOPO}", f"--query-file={QUERY}", "--by", "pci"], capsys)
    assert code == 0
    assert out.splitlines()[1] == "gpu-scheduler.io/nvlink-domain-ids=0000:00:06.0"


def test_topology_file_alone_prints_the_index_annotation_and_a_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([f"--file={TOPO}"], capsys)
    assert (code, out) == (0, "gpu-scheduler.io/nvlink-domains=0\n")
    assert "--query-file" in err[-1]


def test_kubectl_hint_quotes_the_semicolons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(matrix(groups_matrix([[0, 1], [2, 3]], "NV4", "SYS")))
    query = tmp_path / "q.xml"
    query.write_text(node_query(4))
    code, out, err = run([f"--file={topo}", f"--query-file={query}"], capsys)
    ids = f"{uuid_of(0)},{uuid_of(1)};{uuid_of(2)},{uuid_of(3)}"
    assert code == 0 and out.splitlines() == [
        "gpu-scheduler.io/nvlink-domains=0-1,2-3",
        f"gpu-scheduler.io/nvlink-domain-ids={ids}",
    ]
    assert f"'gpu-scheduler.io/nvlink-domain-ids={ids}'" in err[-1]


def test_domains_without_an_index_form_print_only_the_id_annotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(matrix(groups_matrix([[0, 2], [1, 3]], "NV4", "PHB")))
    query = tmp_path / "q.xml"
    query.write_text(node_query(4))
    code, out, err = run([f"--file={topo}", f"--query-file={query}"], capsys)
    assert code == 0
    assert out == (
        f"gpu-scheduler.io/nvlink-domain-ids={uuid_of(0)},{uuid_of(2)};{uuid_of(1)},{uuid_of(3)}\n"
    )
    assert any(line.startswith("note: ") and "only gpu-scheduler.io/nvlink-domain-ids" in line
               for line in err)  # fmt: skip
    assert main(["topology", "discover", f"--file={topo}"]) == 2  # without -q: an error, as before
    (line,) = capsys.readouterr().err.splitlines()
    assert "not a run of consecutive" in line and "--query-file" in line


def test_minors_that_differ_from_indices_are_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(matrix(groups_matrix([[0, 1]], "NV4", "PHB")))
    query = tmp_path / "q.xml"
    query.write_text(node_query(2, minors=[1, 0]))
    code, _, err = run([f"--file={topo}", f"--query-file={query}"], capsys)
    assert code == 0
    (note,) = [line for line in err if line.startswith("note: ")]
    assert "GPU 0 is minor 1, GPU 1 is minor 0" in note and "gpu-<minor>" in note


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([f"--query-file={QUERY}"], "--query-file needs --file"),
        ([f"--file={TOPO}", "--query-file=/nonexistent/q.xml"], "cannot read /nonexistent/q.xml"),
    ],
)
def test_flag_and_file_errors_are_one_line(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    (line,) = err
    assert line.startswith("gpu-scheduler topology discover: ") and expected in line


def test_query_output_of_another_node_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = tmp_path / "q.xml"
    query.write_text(node_query(8))
    code, out, err = run([f"--file={TOPO}", f"--query-file={query}"], capsys)
    assert (code, out) == (2, "")
    (line,) = err
    assert line == (
        f"gpu-scheduler topology discover: {query}: nvidia-smi topo -m lists 1 GPUs but "
        "nvidia-smi -q -x lists 8; give both outputs of the same node"
    )


def test_a_query_file_that_is_not_xml_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = tmp_path / "q.xml"
    query.write_text("GPU 00000000:19:00.0\n    Product Name : NVIDIA H200\n")  # -q without -x
    code, _, err = run([f"--file={TOPO}", f"--query-file={query}"], capsys)
    (line,) = err
    assert code == 2 and f"{query}: nvidia-smi -q -x: not XML" in line
