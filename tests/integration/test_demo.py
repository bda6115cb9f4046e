"""`make demo` brings up the cluster, schedules the example workloads, and stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from hack.localcluster.cluster import REPO_ROOT

STARTUP_TIMEOUT_S = 120


def test_demo_schedules_the_example_workloads_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "hack.demo", "--count", "1", "--work-dir", str(tmp_path / "demo")],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.startswith("too-big"):
                break
        table = {line.split()[0]: line.split() for line in lines if line.split()}
        assert table["ddp-4"][1].startswith("g2-expansion-"), lines
        assert table["ddp-4"][2] == "0,1,2,3" and table["ddp-4"][3] == "0"
        assert table["finetune"][2] in ("0,1", "2,3")
        assert table["h200-only"][1].startswith("g2-expansion-")
        assert table["too-big"][1] == "<none>" and "largest node has 8" in lines[-1]
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0, rest
    assert "every component is gone" in rest
