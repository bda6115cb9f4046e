"""How many GPU-hours the reclaim policy would free on a per-pod duty-cycle trace.

    python -m hack.bench.reclaim_tuning --duty pod_gpu_duty_cycle_anon.tar.gz [-o json]
        [--thresholds 5,10,20] [--windows-min 30,60]

Reads the Alibaba GenAI trace's `pod_gpu_duty_cycle_anon.csv` (columns value, timestamp_anon,
container_ip) straight out of the tar.gz. Each container_ip is one pod holding one GPU (the trace
has no GPU count; assumed). For every threshold and window the policy is simulated as it would
run: at each sample time where the trailing window (t - W, t] holds at least 80 % of its expected
samples (expected = W / the trace's median sample step) and the window's mean duty is below the
threshold, the pod is reclaimable from then on. Reclaimable GPU-hours are the sum over pods of the
time from that first idle verdict to the pod's last sample; observed GPU-hours are the sum of each
pod's first-to-last sample span.

The trace has duty cycle only, no power or GR_ENGINE_ACTIVE, so this treats duty like the
utilization gauge: an UPPER bound of what the live verdict reclaims, since the live verdict also
needs power, energy or engine evidence and takes the most cautious signal.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

DUTY_MEMBER_SUFFIX = "pod_gpu_duty_cycle_anon.csv"
VALUE_COLUMN = "value"
TIME_COLUMN = "timestamp_anon"
POD_COLUMN = "container_ip"
DEFAULT_THRESHOLDS = (5.0, 10.0, 20.0)
DEFAULT_WINDOWS_MIN = (30, 60)
MIN_COVERAGE = 0.8
SECONDS_PER_MINUTE = 60.0
SECONDS_PER_HOUR = 3600.0
GPUS_PER_POD = 1


@dataclass(frozen=True)
class PodTrace:
    pod: str
    t_s: FloatArray
    """Sample times, ascending: (n,)."""
    duty_pct: FloatArray
    """Duty cycle at those times: (n,)."""

    @property
    def span_s(self) -> float:
        return float(self.t_s[-1] - self.t_s[0]) if self.t_s.size else 0.0


@dataclass(frozen=True)
class TuningRow:
    threshold_pct: float
    window_min: int
    pods_affected: int
    reclaimable_gpu_hours: float
    share_pct: float
    """Reclaimable over observed GPU-hours, percent."""
    pods_later_active: int
    """Affected pods whose trailing-window mean later reached the threshold again: work that
    reclaim would have interrupted (the pod was idle for a window, not abandoned)."""


@dataclass(frozen=True)
class TuningReport:
    pods: int
    observed_gpu_hours: float
    sample_interval_s: float
    rows: tuple[TuningRow, ...]


def read_duty(path: Path) -> list[PodTrace]:
    """Every pod's samples, sorted by time, from the tar.gz (no extraction to disk). Raises
    ValueError when the archive holds no duty-cycle CSV or the CSV lacks a column."""
    per_pod: dict[str, list[tuple[float, float]]] = {}
    with tarfile.open(path, "r:gz") as archive:
        member = next(
            (m for m in archive.getmembers() if m.isfile() and m.name.endswith(".csv")), None
        )
        preferred = [m for m in archive.getmembers() if m.name.endswith(DUTY_MEMBER_SUFFIX)]
        member = preferred[0] if preferred else member
        if member is None:
            raise ValueError(f"{path}: no CSV member")
        raw = archive.extractfile(member)
        if raw is None:
            raise ValueError(f"{path}: {member.name} is not a regular file")
        with io.TextIOWrapper(raw, encoding="utf-8", newline="") as text:
            reader = csv.DictReader(text)
            missing = {VALUE_COLUMN, TIME_COLUMN, POD_COLUMN} - set(reader.fieldnames or [])
            if missing:
                raise ValueError(f"{path}: {member.name} lacks columns {sorted(missing)}")
            for row in reader:
                sample = (float(row[TIME_COLUMN]), float(row[VALUE_COLUMN]))
                per_pod.setdefault(row[POD_COLUMN], []).append(sample)
    traces = []
    for pod, samples in sorted(per_pod.items()):
        table = np.asarray(samples, dtype=np.float64)  # (n, 2)
        table = table[np.argsort(table[:, 0], kind="stable")]
        traces.append(PodTrace(pod, table[:, 0], table[:, 1]))
    return traces


def median_interval(traces: Sequence[PodTrace]) -> float:
    """The median step between consecutive samples over all pods (the trace's sample interval)."""
    steps = [np.diff(trace.t_s) for trace in traces if trace.t_s.size > 1]
    if not steps:
        raise ValueError("no pod has two samples")
    return float(np.median(np.concatenate(steps)))


def first_idle_time(
    trace: PodTrace, threshold_pct: float, window_s: float, interval_s: float
) -> tuple[float, bool] | None:
    """The first sample time whose trailing window is covered and has mean duty below the
    threshold, and whether a covered window later had a mean at or above it; None if never
    idle."""
    t, v = trace.t_s, trace.duty_pct  # (n,), (n,)
    index = np.arange(t.size)  # (n,)
    left = np.searchsorted(t, t - window_s, side="right")  # (n,) first sample inside the window
    count = index + 1 - left  # (n,)
    sums = np.concatenate(([0.0], np.cumsum(v)))  # (n + 1,)
    mean = (sums[index + 1] - sums[left]) / count  # (n,)
    covered = count >= MIN_COVERAGE * window_s / interval_s  # (n,)
    idle = covered & (mean < threshold_pct)  # (n,)
    if not idle.any():
        return None
    first = int(np.argmax(idle))
    later_active = bool(np.any(covered[first:] & (mean[first:] >= threshold_pct)))
    return float(t[first]), later_active


def tune(
    traces: Sequence[PodTrace],
    thresholds: Sequence[float],
    windows_min: Sequence[int],
    interval_s: float,
) -> TuningReport:
    """Reclaimable GPU-hours for every threshold x window (rows in that order)."""
    observed = sum(trace.span_s for trace in traces) * GPUS_PER_POD / SECONDS_PER_HOUR
    rows = []
    for threshold in thresholds:
        for window in windows_min:
            hours = 0.0
            affected = 0
            later_active = 0
            for trace in traces:
                found = first_idle_time(trace, threshold, window * SECONDS_PER_MINUTE, interval_s)
                if found is not None:
                    start, active_again = found
                    affected += 1
                    later_active += active_again
                    hours += (float(trace.t_s[-1]) - start) * GPUS_PER_POD / SECONDS_PER_HOUR
            share = 100.0 * hours / observed if observed > 0 else 0.0
            rows.append(TuningRow(threshold, window, affected, hours, share, later_active))
    return TuningReport(len(traces), observed, interval_s, tuple(rows))


def render(report: TuningReport) -> str:
    lines = [
        f"pods: {report.pods}  observed GPU-hours: {report.observed_gpu_hours:.1f}  "
        f"sample interval: {report.sample_interval_s:g} s  (1 GPU per pod assumed)",
        "",
        "| threshold | window | pods affected | GPU-hours reclaimable | share of observed "
        "| affected pods later active |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.rows:
        lines.append(
            f"| {row.threshold_pct:g} % | {row.window_min} min | {row.pods_affected} | "
            f"{row.reclaimable_gpu_hours:.1f} | {row.share_pct:.1f} % | {row.pods_later_active} |"
        )
    return "\n".join(lines)


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part]


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.reclaim_tuning")
    parser.add_argument("--duty", required=True, type=Path, help="pod_gpu_duty_cycle_anon.tar.gz")
    parser.add_argument("--thresholds", type=_floats, default=list(DEFAULT_THRESHOLDS))
    parser.add_argument("--windows-min", type=_ints, default=list(DEFAULT_WINDOWS_MIN))
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    try:
        traces = read_duty(args.duty)
        report = tune(traces, args.thresholds, args.windows_min, median_interval(traces))
    except (OSError, tarfile.TarError, ValueError) as error:
        print(f"reclaim_tuning: {error}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(asdict(report), indent=2))
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
