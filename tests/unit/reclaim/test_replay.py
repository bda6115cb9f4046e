"""`gpu-scheduler reclaim replay`: the issue's acceptance on the H200 recording, and errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from reclaim.replay import add_reclaim_parser, run_replay
from tests.datasets import H200_TRACE_CSV

H200_CSV = H200_TRACE_CSV


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu-scheduler")
    add_reclaim_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def replay_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, Any]]:
    args = parse(["reclaim", "replay", *argv, "-o", "json"])
    assert args.handler(args) == 0
    rows = json.loads(capsys.readouterr().out)
    return {row["series"]: row for row in rows}


@pytest.fixture
def h200() -> Path:
    return H200_CSV


H200_FLAGS = ("--series-column", "phase", "--idle-power-w", "120", "--max-power-w", "700")


def test_h200_threshold_10(h200: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = replay_json(capsys, "--trace", str(h200), *H200_FLAGS, "--threshold", "10")
    assert rows["idle_holder_20GiB"]["verdict"] == "idle"
    assert rows["steady_training"]["verdict"] == "busy"
    assert rows["bursty_training_50pct"]["verdict"] == "busy"
    for row in rows.values():
        assert {"series", "samples", "mean_util_pct", "usage_pct", "verdict"} <= row.keys()
    assert rows["idle_holder_20GiB"]["samples"] == 40
    assert rows["steady_training"]["mean_util_pct"] == pytest.approx(99.857, abs=0.01)


def test_h200_threshold_5_dataloader_is_busy(
    h200: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = replay_json(capsys, "--trace", str(h200), *H200_FLAGS, "--threshold", "5")
    row = rows["dataloader_bound_10pct"]
    assert row["verdict"] == "busy"
    assert row["mean_util_pct"] == 0.0
    # Calibrated on the GPU's own floor (119.2 W), and raised by its busiest 10-sample sub-window.
    assert row["usage_pct"] == pytest.approx(14.34, abs=0.01)


def test_h200_without_power_nothing_is_idle(h200: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = replay_json(
        capsys, "--trace", str(h200), "--series-column", "phase", "--threshold", "50"
    )
    assert {row["verdict"] for row in rows.values()} == {"busy"}


def test_h200_default_power_model(h200: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = replay_json(
        capsys,
        "--trace",
        str(h200),
        "--series-column",
        "phase",
        "--threshold",
        "10",
        "--gpu-model",
        "NVIDIA H200",
    )
    assert rows["idle_holder_20GiB"]["verdict"] == "idle"
    assert rows["dataloader_bound_10pct"]["verdict"] == "busy"


def test_table_output(h200: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        trace=str(h200),
        series_column="phase",
        threshold=10.0,
        window_seconds=None,
        idle_power_w=120.0,
        max_power_w=700.0,
        gpu_model=None,
        output="table",
    )
    assert run_replay(args) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("dataloader_bound_10pct "))
    assert line.split()[-1] == "busy" and "14.3" in line
    assert "util_mean%" in out.splitlines()[0]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_energy_column_and_last_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 120 s at 1 Hz: busy (power 700 W) for the first 60 s, then idle-holder power (120 W). The
    # power gauge reads 120 W throughout (aliased), the energy counter integrates the truth.
    lines = ["t_s,pod,power_w,energy_mj,gpu_util_pct"]
    energy = 0.0
    for t in range(121):
        true_w = 700.0 if t <= 60 else 120.0
        if t:
            energy += true_w * 1000.0
        lines.append(f"{t},p,120,{energy},0")
    path = write(tmp_path, "\n".join(lines) + "\n")
    flags = (
        "--trace",
        str(path),
        "--series-column",
        "pod",
        "--threshold",
        "5",
        "--idle-power-w",
        "120",
        "--max-power-w",
        "700",
    )
    whole = replay_json(capsys, *flags)["p"]
    assert whole["verdict"] == "busy"
    # Averaged over the whole series the counter reads 50 %; its first minute's sub-windows ran
    # at full power, and the verdict reads the busiest sub-window.
    assert whole["estimates_pct"]["energy"] == 100.0
    # The gauge's own floor (120 W) less the calibration margin is the idle draw.
    assert whole["estimates_pct"]["power"] == pytest.approx(100 * 5 / 585)
    last = replay_json(capsys, *flags, "--window-seconds", "30")["p"]
    assert last["verdict"] == "idle"
    assert last["samples"] == 30


def test_engine_column_decides_without_power(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "\n".join(f"{t},a,0,0.01\n{t},b,0,0.4" for t in range(60))
    path = write(tmp_path, "t_s,s,gpu_util_pct,gr_engine_active\n" + rows + "\n")
    result = replay_json(capsys, "--trace", str(path), "--series-column", "s", "--threshold", "5")
    assert result["a"]["verdict"] == "idle"
    assert result["b"]["verdict"] == "busy"


def test_single_sample_is_busy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "t_s,s,power_w\n0,a,100\n")
    rows = replay_json(
        capsys,
        "--trace",
        str(path),
        "--series-column",
        "s",
        "--threshold",
        "5",
        "--idle-power-w",
        "120",
        "--max-power-w",
        "700",
    )
    assert rows["a"]["verdict"] == "busy"


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("t_s,phase,power_w\n1,a,100\n", ["--series-column", "pod"], "'pod'"),
        ("phase,power_w\na,100\n", [], "'t_s'"),
        ("t_s,phase,fb_used_mib\n1,a,100\n", [], "signal columns"),
        ("t_s,phase,power_w\n", [], "no rows"),
        ("t_s,phase,power_w\n1,a,lots\n", [], "'power_w'"),
        ("t_s,phase,power_w\n1,a,100\n", ["--idle-power-w", "120"], "go together"),
        ("t_s,phase,power_w\n1,a,100\n", ["--threshold", "150"], "--threshold"),
        ("t_s,phase,power_w\n1,a,100\n", ["--gpu-model", "NVIDIA X"], "--gpu-model"),
    ],
)
def test_errors_exit_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, extra: list[str], message: str
) -> None:
    path = write(tmp_path, content)
    argv = [
        "reclaim",
        "replay",
        "--trace",
        str(path),
        "--series-column",
        "phase",
        "--threshold",
        "10",
        *extra,
    ]
    args = parse(argv)
    assert args.handler(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "reclaim replay" in err


def test_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    args = parse(
        ["reclaim", "replay", "--trace", str(missing), "--series-column", "s", "--threshold", "10"]
    )
    assert args.handler(args) == 2
    assert str(missing) in capsys.readouterr().err


def test_json_reports_the_subwindow_and_the_calibration(
    h200: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = replay_json(capsys, "--trace", str(h200), *H200_FLAGS, "--threshold", "10")
    row = rows["dataloader_bound_10pct"]
    assert (row["interval_s"], row["subwindow_s"]) == (1.0, 10.0)
    assert row["power_floor_w"] == 119.2
    assert rows["idle_holder_20GiB"]["power_floor_w"] == 117.7


def test_without_a_power_model_the_verdict_names_the_flag(
    h200: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Series that are busy only because no power model was given say so in the verdict column;
    a series busy on its own usage does not."""
    args = parse(
        ["reclaim", "replay", "--trace", str(h200), "--series-column", "phase", "--threshold", "10"]
    )
    assert run_replay(args) == 0
    lines = capsys.readouterr().out.splitlines()
    verdicts = {line.split()[0]: line.split("  ")[-1].strip() for line in lines[1:8]}
    assert verdicts["idle_holder_20GiB"] == "busy, needs --gpu-model"
    assert verdicts["steady_training"] == "busy"
    assert any(
        line.startswith("no power model given:") and "'NVIDIA H200'" in line for line in lines
    )
    rows = replay_json(
        capsys, "--trace", str(h200), "--series-column", "phase", "--threshold", "10"
    )
    assert rows["idle_holder_20GiB"]["needs_power_model"] is True
    assert rows["steady_training"]["needs_power_model"] is False
    with_model = replay_json(capsys, "--trace", str(h200), *H200_FLAGS, "--threshold", "10")
    assert not any(row["needs_power_model"] for row in with_model.values())
