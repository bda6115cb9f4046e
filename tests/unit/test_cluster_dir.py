"""The test session's cluster folder: announced past pytest's capture, removed after a passing run,
kept after a failing one or when chosen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import finish_cluster_dir
from tests.datasets import REPO_ROOT


def _folder(tmp_path: Path) -> Path:
    work_dir = tmp_path / "cluster"
    (work_dir / "logs").mkdir(parents=True)
    (work_dir / "logs" / "etcd.log").write_text("x" * 1000)
    return work_dir


def test_a_passing_run_removes_the_temporary_folder(tmp_path: Path) -> None:
    work_dir = _folder(tmp_path)
    line = finish_cluster_dir(work_dir, chosen=False, failed=0)
    assert not work_dir.exists()
    assert line == f"every test passed; local cluster folder removed: {work_dir}"


def test_a_failing_run_keeps_the_folder_and_names_it(tmp_path: Path) -> None:
    work_dir = _folder(tmp_path)
    line = finish_cluster_dir(work_dir, chosen=False, failed=2)
    assert (work_dir / "logs" / "etcd.log").exists()
    assert line == f"2 test(s) failed; local cluster folder and component logs kept: {work_dir}"


def test_a_chosen_folder_is_always_kept(tmp_path: Path) -> None:
    work_dir = _folder(tmp_path)
    assert "GPU_SCHEDULER_CLUSTER_DIR" in finish_cluster_dir(work_dir, chosen=True, failed=0)
    assert work_dir.exists()


INNER_CONFTEST = """
import pytest

from tests.conftest import announce


@pytest.fixture
def announced(request: pytest.FixtureRequest) -> None:
    print("printed-and-captured")
    announce(request.config, "announced-past-the-capture")


def test_inner(announced: None) -> None:
    pass
"""


@pytest.mark.inner_pytest
def test_announce_is_shown_while_fixture_output_is_captured(tmp_path: Path) -> None:
    """A passing test's fixture output stays captured (hidden); the announced line is shown."""
    (tmp_path / "test_inner.py").write_text(INNER_CONFTEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "announced-past-the-capture" in result.stdout
    assert "printed-and-captured" not in result.stdout
