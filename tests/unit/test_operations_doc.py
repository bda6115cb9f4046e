"""docs/operations.md: its offline commands run as written; the configuration it shows loads; every
other command needs the demo cluster (tests/integration/test_demo.py runs those)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from scheduler.cli import main
from scheduler.config import load_config
from tests.datasets import REPO_ROOT
from tests.docs import DEMO_DIR, OPERATIONS, operations_commands, section_blocks

TOOL = ".venv/bin/gpu-scheduler"


def test_every_command_is_offline_or_runs_against_the_demo() -> None:
    commands = operations_commands()
    assert len(commands) >= 8
    for command in commands:
        assert command.startswith((TOOL + " ", "kubectl ")), command
        assert DEMO_DIR in command or command.startswith(TOOL), command


def test_offline_commands_run_as_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = [c for c in operations_commands() if DEMO_DIR not in c]
    assert offline
    monkeypatch.chdir(REPO_ROOT)
    for command in offline:
        argv = shlex.split(command)
        assert main(argv[1:]) == 0, command
        assert "idle_holder_20GiB" in capsys.readouterr().out


def test_the_dry_run_configuration_loads(tmp_path: Path) -> None:
    (block,) = section_blocks(OPERATIONS.read_text(), "Dry-run first", "yaml")
    path = tmp_path / "config.yaml"
    path.write_text(block)
    settings = load_config(path, {}, {})
    assert settings.reclaim.mode == "dry-run"
    assert settings.reclaim.prometheus_url == "http://prometheus.monitoring:9090"
    assert settings.reclaim.scrape_interval_seconds == 30
