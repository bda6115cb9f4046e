"""Load a recorded GPU trace (CSV) into per-phase sample sequences.

Contract: :func:`load_trace` reads a CSV with the header
``t_s,phase,gpu_util_pct,mem_copy_util_pct,fb_used_mib,power_w,sm_clock_mhz`` (one row a second,
as recorded by NVML polling) and returns, per phase name, its rows in file order. A missing
column, a non-numeric cell or an unreadable file raises :class:`TraceError` naming the file.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

COLUMNS = (
    "t_s",
    "phase",
    "gpu_util_pct",
    "mem_copy_util_pct",
    "fb_used_mib",
    "power_w",
    "sm_clock_mhz",
)


class TraceError(ValueError):
    """The trace file is missing columns or holds a value that is not a number."""


@dataclass(frozen=True)
class TraceRow:
    """One recorded sample: what NVML reported at that second."""

    t_s: float
    gpu_util_pct: float
    mem_copy_util_pct: float
    fb_used_mib: float
    power_w: float
    sm_clock_mhz: float


Trace = Mapping[str, tuple[TraceRow, ...]]
"""Phase name -> its samples, one a second, in recording order."""


def load_trace(path: Path) -> Trace:
    """Read the CSV at ``path`` and group its rows by phase (order kept)."""
    try:
        with path.open(newline="") as handle:
            return _read(path, handle)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from exc


def _read(path: Path, handle: TextIO) -> Trace:
    phases: dict[str, list[TraceRow]] = {}
    reader = csv.DictReader(handle)
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{path}: missing columns {', '.join(missing)}")
    for row in reader:
        try:
            sample = TraceRow(
                t_s=float(row["t_s"]),
                gpu_util_pct=float(row["gpu_util_pct"]),
                mem_copy_util_pct=float(row["mem_copy_util_pct"]),
                fb_used_mib=float(row["fb_used_mib"]),
                power_w=float(row["power_w"]),
                sm_clock_mhz=float(row["sm_clock_mhz"]),
            )
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{path}:{reader.line_num}: {exc}") from exc
        phases.setdefault(row["phase"], []).append(sample)
    return {phase: tuple(rows) for phase, rows in phases.items()}
