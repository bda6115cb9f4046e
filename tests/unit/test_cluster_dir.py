"""The test session's cluster folder: announced past pytest's capture, removed after a passing run,
kept after a failing one or when chosen."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import announce, finish_cluster_dir


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


def test_announce_writes_through_the_terminal_reporter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The reporter's stream is not captured, unlike print() inside a fixture."""
    written: list[str] = []
    reporter = SimpleNamespace(write_line=written.append)
    plugins = SimpleNamespace(
        get_plugin=lambda name: reporter if name == "terminalreporter" else None
    )
    announce(cast(Any, SimpleNamespace(pluginmanager=plugins)), "component logs in /x/logs")
    assert written == ["", "component logs in /x/logs"]
    assert capsys.readouterr().out == ""
