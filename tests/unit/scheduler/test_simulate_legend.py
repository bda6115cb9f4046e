"""`simulate` explains its columns: a legend under each table and in `--help`, naming every
column of the table (ONE_DOMAIN_NAIVE, WHEN_POSSIBLE, GPUS_STRANDED ...)."""

from __future__ import annotations

import pytest

from scheduler.cli import main
from scheduler.tools.simulate_legend import GANG_COLUMNS, POD_COLUMNS, help_epilog, legend_lines
from tests.datasets import SMALL_OPENB_DIR

POD_HEADER = [
    "PLACED",
    "SKIPPED",
    "SKIPPED_MULTI_GPU",
    "GPUS_UNALLOCATED",
    "GPUS_STRANDED",
    "MULTI_GPU",
    "ONE_DOMAIN",
    "ONE_DOMAIN_NAIVE",
    "WHEN_POSSIBLE",
    "WALL_S",
    "PODS/S",
]
GANG_HEADER = [
    "STARTED",
    "STUCK",
    "PARTIAL_GPU_S",
    "PARTIAL_AT_END",
    "WAIT_P50_S",
    "WAIT_P99_S",
    "IDLE_WHILE_WAITING_GPU_S",
    "ONE_NODE",
    "ONE_DOMAIN",
    "GPU_BUSY",
    "MAKESPAN_S",
]


def explained(columns: tuple[tuple[str, str], ...]) -> set[str]:
    names = {part for name, _ in columns for part in name.split(" / ")}
    return names | {name + "_MULTI_GPU" for name in names}


@pytest.mark.parametrize(
    ("columns", "header"), [(POD_COLUMNS, POD_HEADER), (GANG_COLUMNS, GANG_HEADER)]
)
def test_every_column_is_explained(columns: tuple[tuple[str, str], ...], header: list[str]) -> None:
    assert set(header) <= explained(columns)


def test_legend_lines_align_the_names() -> None:
    lines = legend_lines((("A", "first"), ("LONGER", "second")))
    assert lines == ["columns:", "  A       first", "  LONGER  second"]


def test_help_has_the_legend(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "ONE_DOMAIN_NAIVE  the same if the node's lowest-numbered free GPUs" in out
    assert "WHEN_POSSIBLE" in out and "GPUS_STRANDED" in out
    assert help_epilog().splitlines()[0] == "the --pods table's columns:"


def test_the_table_ends_with_its_legend(capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = (
        SMALL_OPENB_DIR / "openb_node_list_gpu_node.csv",
        SMALL_OPENB_DIR / "openb_pod_list_default.csv",
    )
    argv = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "gpu-scheduler"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    legend = legend_lines(POD_COLUMNS)
    assert out[-len(legend) :] == legend
    assert out[-len(legend) - 2].startswith("gpu-scheduler ")
    header = out[-len(legend) - 3].split()
    assert header[0] == "POLICY" and set(header[1:]) <= explained(POD_COLUMNS)
