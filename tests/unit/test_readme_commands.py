"""The README's offline commands run as written, from the repository root."""

from __future__ import annotations

import re
import shlex

import pytest

from scheduler.cli import main
from tests.datasets import REPO_ROOT

VENV_COMMAND = ".venv/bin/gpu-scheduler"
OFFLINE = ("topology discover", "reclaim replay", "simulate")
"""Subcommands whose README lines need no cluster; each must appear."""


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if VENV_COMMAND in line]


@pytest.mark.parametrize("subcommand", OFFLINE)
def test_readme_offline_command_runs_as_written(
    subcommand: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [line for line in readme_commands() if f"{VENV_COMMAND} {subcommand} " in line]
    assert len(lines) == 1, readme_commands()
    argv = shlex.split(lines[0], comments=True)
    assert argv[0] == VENV_COMMAND
    monkeypatch.chdir(REPO_ROOT)
    assert main(argv[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if subcommand == "reclaim replay":  # the example tells idle from busy on the shipped trace
        verdicts = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:8]}
        assert verdicts["idle_holder_20GiB"] == "idle"
        assert verdicts["steady_training"] == "busy"
    assert out.strip()
