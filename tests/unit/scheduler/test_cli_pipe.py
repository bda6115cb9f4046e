"""A reader that closes the pipe early (`gpu-scheduler ... | head -3`) ends the command quietly:
exit code 141 (as after SIGPIPE), no BrokenPipeError traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scheduler.cli import EXIT_BROKEN_PIPE
from tests.datasets import H200_DIR, REPO_ROOT

TOPO = H200_DIR / "nvidia-smi-topo.txt"


def into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """`gpu-scheduler ARGV` writing into a pipe whose reader has already closed it, so every
    write fails (deterministically, whatever the pipe's buffer size)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "scheduler.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def early_close(*argv: str) -> tuple[str, int, str]:
    """`gpu-scheduler ARGV | head -1`: the first stdout line, the exit code, stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        first = child.stdout.readline()
        child.stdout.close()
        stderr = child.stderr.read()
        return first, child.wait(timeout=60), stderr


@pytest.mark.parametrize(
    ("argv", "codes"),
    [
        (("topology", "discover", "--file", str(TOPO)), {EXIT_BROKEN_PIPE}),
        (("version",), {EXIT_BROKEN_PIPE}),
        (("--help",), {0, EXIT_BROKEN_PIPE}),  # argparse itself ignores a failed help write
    ],
    ids=["topology-discover", "version", "help"],
)
def test_a_closed_stdout_ends_the_command_quietly(argv: tuple[str, ...], codes: set[int]) -> None:
    result = into_closed_pipe(*argv)
    assert "Traceback" not in result.stderr, result.stderr
    assert "BrokenPipeError" not in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    assert result.returncode in codes, result.stderr


def test_a_reader_closing_after_the_first_line_sees_no_traceback() -> None:
    first, code, stderr = early_close("topology", "discover", "--file", str(TOPO))
    assert first.startswith("gpu-scheduler.io/nvlink-domains="), first
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code in (0, EXIT_BROKEN_PIPE), stderr


def test_the_exit_code_is_a_sigpipe_death_as_a_shell_reports_it() -> None:
    assert EXIT_BROKEN_PIPE == 128 + 13
