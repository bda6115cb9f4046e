"""A reader that closes the pipe early (`gpu-scheduler ... | head -3`) ends the command quietly:
exit code 141 (as after SIGPIPE), no BrokenPipeError traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hack.localcluster.nodes import G1, G2_EXPANSION, node_manifest
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


def explain_files(folder: Path) -> tuple[str, ...]:
    """`explain --pod-file ... --cluster ...` arguments for a pod and two nodes (offline)."""
    cluster = folder / "cluster.yaml"
    items = [node_manifest(G1, "g1-0"), node_manifest(G2_EXPANSION, "g2-expansion-0")]
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = folder / "pod.yaml"
    limits = {"nvidia.com/gpu": "1"}
    spec = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    pod.write_text(yaml.safe_dump({"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}))
    return ("explain", "--pod-file", str(pod), "--cluster", str(cluster))


IDLE_REPORT_ROWS = (
    "import asyncio, sys\n"
    "from scheduler.tools import idle_report\n"
    "async def rows(*args):\n"
    "    return [dict(namespace='ml', pod=f'p{i}', node='n', gpus=1, usage_pct=0.5,\n"
    "                 idle_for_at_least_s=600, priority_class='', reclaimable=False,\n"
    "                 policy='none: no PriorityClass, so not reclaimable') for i in range(5000)]\n"
    "idle_report.build_report = rows\n"
    "from scheduler.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
"""`idle-report` with its cluster and Prometheus reads replaced by 5,000 idle rows."""


def early_close_script(script: str, *argv: str) -> tuple[str, int, str]:
    """`python -c SCRIPT ARGV | head -1`: the first stdout line, the exit code, stderr."""
    with subprocess.Popen(
        [sys.executable, "-c", script, *argv],
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


def test_explain_into_head_ends_quietly(tmp_path: Path) -> None:
    argv = explain_files(tmp_path)
    result = into_closed_pipe(*argv)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
    assert result.returncode == EXIT_BROKEN_PIPE, result.stderr
    first, code, stderr = early_close(*argv)
    assert first.startswith("2/2 nodes fit pod default/p"), first
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code in (0, EXIT_BROKEN_PIPE), stderr


@pytest.mark.parametrize("output", ["table", "json", "yaml"])
def test_idle_report_into_head_ends_quietly(output: str) -> None:
    argv = ("idle-report", "--prometheus-url", "http://127.0.0.1:9", "-o", output)
    first, code, stderr = early_close_script(IDLE_REPORT_ROWS, *argv)
    assert first.strip(), stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert code == EXIT_BROKEN_PIPE, stderr  # 5,000 rows overflow any pipe buffer
