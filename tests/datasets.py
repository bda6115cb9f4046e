"""Where tests find their data files.

Two kinds of data:

- In the repository, under `tests/data/`: the H200 recording and its nvidia-smi outputs
  (`H200_DIR`, see its README), and small generated stand-ins for the Alibaba traces in the same
  CSV formats (`SMALL_OPENB_DIR`, `SMALL_GENAI_DUTY_CSV`; `tests/data/make_small.py` writes them).
- Outside it: the Alibaba traces, which are for research use with attribution and are not
  redistributed. `external_dataset(name)` finds one under the directory named by the environment
  variable `GPU_SCHEDULER_DATA` (default: `../shared/data` relative to the repository root). When
  it is absent, the test fails under `CI=true` and is skipped elsewhere, with a reason that says
  where to get the data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "tests" / "data"
H200_DIR = DATA_DIR / "h200"
H200_TRACE_CSV = H200_DIR / "gpu-util-trace.csv"
SMALL_OPENB_DIR = DATA_DIR / "openb-small"
SMALL_GENAI_DUTY_CSV = DATA_DIR / "genai-small" / "pod_gpu_duty_cycle_small.csv"

DATA_ENV = "GPU_SCHEDULER_DATA"
"""Directory holding the external data sets, one sub-directory each."""
DEFAULT_EXTERNAL_DIR = Path("..") / "shared" / "data"
"""Where the external data sets are looked for when `GPU_SCHEDULER_DATA` is unset (relative to
the repository root)."""

SOURCES = {
    "alibaba-gpu-v2023": (
        'Alibaba cluster-trace-gpu-v2023 ("openb" traces of Weng et al., "Beware of '
        "Fragmentation\", USENIX ATC '23): cluster-trace-gpu-v2023/csv/*.csv of "
        "https://github.com/alibaba/clusterdata"
    ),
    "alibaba-genai-v2026": (
        "Alibaba cluster-trace-v2026-GenAI: cluster-trace-v2026-GenAI/"
        "pod_gpu_duty_cycle_anon.tar.gz of https://github.com/alibaba/clusterdata"
    ),
}
"""The external data sets tests use, by directory name, with their public source."""


def external_data_dir() -> Path:
    """The directory of the external data sets: `$GPU_SCHEDULER_DATA`, else `../shared/data`
    beside the repository."""
    configured = os.environ.get(DATA_ENV, "").strip()
    if configured:
        return Path(configured)
    return REPO_ROOT / DEFAULT_EXTERNAL_DIR


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def external_dataset(name: str, *files: str) -> Path:
    """The directory of external data set `name` (a key of `SOURCES`), holding every one of
    `files`. Absent: fails the test under CI=true, skips it elsewhere; either way the reason
    says where to get the data and where it was looked for."""
    folder = external_data_dir() / name
    missing = [f for f in files if not (folder / f).is_file()] if folder.is_dir() else [name]
    if missing:
        reason = (
            f"{name} not found ({', '.join(missing)} missing under {folder}): get the "
            f"{SOURCES[name]}, and put it in {DATA_ENV}/{name} (by default "
            f"{DEFAULT_EXTERNAL_DIR}/{name} beside the repository)"
        )
        if in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return folder
