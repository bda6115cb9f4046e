"""`make demo` refuses bad input before starting anything: one line on stderr, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.demo import STEPS, main


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "starting the local control plane" not in captured.out  # nothing was started
    assert line.startswith("make demo: ")
    return line


def test_missing_nodes_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    line = _fails(capsys, "--nodes", str(missing), "--work-dir", str(tmp_path / "w"))
    assert f"--nodes {missing}: No such file or directory; give a YAML list" in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- [\n", ":2:1: not valid YAML"),
        ("type_name: G1\n", "expected a list of node specs, got dict"),
        ("- {type_name: G1, count: 1}\n", "missing field 'gpus'"),
        ("- {type_name: G1, count: 1, gpus: 2, gpu_product: x, colour: red}\n", "unknown field"),
        ("- 3\n", "item 1 is a int, not a mapping"),
    ],
)
def test_bad_nodes_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(text)
    assert expected in _fails(capsys, "--nodes", str(nodes), "--work-dir", str(tmp_path / "w"))


def test_every_step_explains_itself_in_one_line() -> None:
    assert [step.name for step in STEPS][:2] == ["placement", "reclaim"]
    for step in STEPS:
        assert step.explanation and "\n" not in step.explanation
