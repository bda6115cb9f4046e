"""`make demo ARGS=--kueue`: Kueue starts with the demo, lends team-a's idle quota to team-b,
takes it back by preempting team-b's workload, gpu-scheduler binds team-a's pods each inside one
NVLink domain; on Ctrl-C Kueue stops and nothing of the demo is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hack.demo import (
    BORROWING_JOB,
    BORROWING_PODS,
    KUEUE_STEP,
    LENDING_JOB,
    READY_LINE,
    STEPS,
)
from hack.localcluster.cluster import REPO_ROOT
from tests.integration.test_demo import after, printed_commands, read_until_ready, run_printed

DOMAINS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def pod_rows(section: list[str], job: str) -> list[list[str]]:
    """Rows of the first pod table after `section`'s start whose pods belong to Job `job`."""
    return [line.split() for line in section if line.startswith(f"{job}-")]


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that mention `text` (this test's work folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv and int(entry.name) != os.getpid():
            found.append(argv)
    return found


def test_demo_kueue_borrows_quota_takes_it_back_and_stops_clean(tmp_path: Path) -> None:
    work_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hack.demo",
            "--count",
            "1",
            "--work-dir",
            str(work_dir),
            "--kueue",
            "--steps",
            "kueue",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = read_until_ready(demo)
        assert lines and lines[-1] == READY_LINE, lines
        assert f"step {len(STEPS) + 1}, kueue: {KUEUE_STEP.explanation}" in lines
        section = after(lines, f"step {len(STEPS) + 1}, kueue: ")
        outcomes = [line for line in section if line.startswith("kueue: ")]
        assert outcomes[0] == (
            f"kueue: {BORROWING_JOB} admitted to team-b, borrowing 4 GPUs of team-a's idle "
            f"quota; gpu-scheduler bound its {BORROWING_PODS} pods:"
        ), section
        borrowed = pod_rows(after(section, outcomes[0]), BORROWING_JOB)[:BORROWING_PODS]
        assert {row[1] for row in borrowed} == {"demo-kueue-0"}, borrowed
        gpus = sorted(int(g) for row in borrowed for g in row[2].split(","))
        assert gpus == list(range(8)), borrowed
        assert outcomes[1].startswith(
            f"kueue: team-b's {BORROWING_JOB} preempted (InCohortReclamation): "
        ), outcomes
        assert outcomes[2].startswith(
            f"kueue: {BORROWING_JOB}'s pods are gone; {LENDING_JOB} admitted to team-a"
        ), outcomes
        trained = pod_rows(after(section, outcomes[2]), LENDING_JOB)
        assert len(trained) == 2, section
        for row in trained:
            assert row[1] == "demo-kueue-0" and row[4] == "Running", row
            assert any({int(g) for g in row[2].split(",")} <= d for d in DOMAINS), row
        assert outcomes[3].startswith(
            f"kueue: {BORROWING_JOB} waits in team-b's queue, suspended (QuotaReserved=False): "
        ), outcomes
        queues = next(
            c
            for c in printed_commands(lines)
            if " get clusterqueues,workloads.kueue.x-k8s.io " in c
        )
        listed = run_printed(queues)
        assert listed.returncode == 0, listed.stderr
        assert "team-b" in listed.stdout and f"job-{BORROWING_JOB}-" in listed.stdout
        assert processes_mentioning(str(work_dir / "kueue")), "Kueue is not running"
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0, rest
    assert "Kueue stopped, its webhook configurations deleted." in rest
    assert "every component is gone" in rest
    assert processes_mentioning(str(work_dir)) == []
