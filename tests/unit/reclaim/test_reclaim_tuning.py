"""Reclaim tuning over a per-pod duty-cycle trace: known answers, and the real trace's shape."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from hack.bench.reclaim_tuning import main, median_interval, read_duty, tune
from tests.datasets import SMALL_GENAI_DUTY_CSV, external_dataset

GENAI = "alibaba-genai-v2026"
DUTY_ARCHIVE = "pod_gpu_duty_cycle_anon.tar.gz"
STEP_S = 60.0
SAMPLES = 180
END_S = STEP_S * (SAMPLES - 1)  # 10740 s


def duty_shapes() -> dict[str, list[float]]:
    return {
        "idle": [0.0] * SAMPLES,
        "busy": [50.0] * SAMPLES,
        "mid": [15.0] * 90 + [0.0] * 90,
        "wakes": [0.0] * 60 + [50.0] * 120,
    }


def archive(path: Path, data: bytes) -> Path:
    """`data` as the duty-cycle CSV member of a tar.gz at `path`, like the trace ships it."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("pod_gpu_duty_cycle_anon.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    rows = ["value,timestamp_anon,container_ip"]
    for index in reversed(range(SAMPLES)):  # out of order on purpose
        for pod, values in duty_shapes().items():
            rows.append(f"{values[index]},{1_000_000 + index * STEP_S},{pod}")
    return archive(tmp_path / "duty.tar.gz", ("\n".join(rows) + "\n").encode())


@pytest.fixture(params=["small", "alibaba"])
def duty_trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The repository's small stand-in (tests/data/make_small.py), then the real GenAI trace."""
    if request.param == "small":
        return archive(tmp_path / "small.tar.gz", SMALL_GENAI_DUTY_CSV.read_bytes())
    return external_dataset(GENAI, DUTY_ARCHIVE) / DUTY_ARCHIVE


def hours(first_idle_index: int) -> float:
    return (END_S - first_idle_index * STEP_S) / 3600.0


def test_known_answers(synthetic: Path) -> None:
    traces = read_duty(synthetic)
    assert [t.pod for t in traces] == ["busy", "idle", "mid", "wakes"]
    assert median_interval(traces) == STEP_S
    report = tune(traces, [5.0, 10.0, 20.0], [30, 60], STEP_S)
    assert report.pods == 4
    assert report.observed_gpu_hours == pytest.approx(4 * END_S / 3600.0)
    # 30 min window: 24 samples (80 % of 30) first cover it at index 23; 60 min: 48 at index 47.
    # "mid" (15 % then 0 %): mean < 10 first at index 100 (30 min) / 110 (60 min); < 5 at 110 / 130.
    expected = {
        (5.0, 30): (3, hours(23) + hours(110) + hours(23)),
        (5.0, 60): (3, hours(47) + hours(130) + hours(47)),
        (10.0, 30): (3, hours(23) + hours(100) + hours(23)),
        (10.0, 60): (3, hours(47) + hours(110) + hours(47)),
        (20.0, 30): (3, hours(23) + hours(23) + hours(23)),
        (20.0, 60): (3, hours(47) + hours(47) + hours(47)),
    }
    for row in report.rows:
        pods, gpu_hours = expected[(row.threshold_pct, row.window_min)]
        assert row.pods_affected == pods
        assert row.reclaimable_gpu_hours == pytest.approx(gpu_hours)
        assert row.share_pct == pytest.approx(100 * gpu_hours / report.observed_gpu_hours)
        assert row.pods_later_active == 1  # "wakes" idles for an hour, then works


def test_cli_json(synthetic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--duty", str(synthetic), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pods"] == 4 and len(report["rows"]) == 6
    assert main(["--duty", str(synthetic)]) == 0
    assert "| 10 % | 30 min | 3 |" in capsys.readouterr().out


def test_cli_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--duty", str(tmp_path / "missing.tar.gz")]) == 2
    assert "missing.tar.gz" in capsys.readouterr().err


def test_trace_is_monotone(duty_trace: Path) -> None:
    traces = read_duty(duty_trace)
    report = tune(traces, [5.0, 10.0, 20.0], [30, 60], median_interval(traces))
    assert report.pods == len(traces) > (100 if duty_trace.name == DUTY_ARCHIVE else 4)
    assert any(row.reclaimable_gpu_hours > 0 for row in report.rows)
    table = {(r.threshold_pct, r.window_min): r for r in report.rows}
    for window in (30, 60):
        hours = [table[(t, window)].reclaimable_gpu_hours for t in (5.0, 10.0, 20.0)]
        assert hours == sorted(hours)
    for threshold in (5.0, 10.0, 20.0):
        assert (
            table[(threshold, 60)].reclaimable_gpu_hours
            <= table[(threshold, 30)].reclaimable_gpu_hours
        )
    for row in report.rows:
        assert 0 <= row.reclaimable_gpu_hours <= report.observed_gpu_hours
        assert row.pods_later_active <= row.pods_affected <= report.pods
