"""`make demo ARGS="--in-cluster"`: the demo's steps with the scheduler as the shipped Deployment
on the local cluster's real node (its own cluster: one real node per machine, so this module holds
none of its own while the demo runs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hack.demo import READY_LINE, STEPS
from hack.localcluster.binaries import ensure_binaries
from hack.localcluster.cluster import REPO_ROOT
from tests.integration.test_demo import (
    check_busy_time,
    check_dra,
    check_gang,
    check_placement,
    check_reclaim,
    read_until_ready,
)
from tests.integration.test_image import require_tools

pytestmark = pytest.mark.real_node


def test_the_demo_runs_its_steps_with_the_scheduler_in_the_cluster(tmp_path: Path) -> None:
    require_tools()
    work_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "hack.demo", "--count=1", "--in-cluster", f"--work-dir={work_dir}"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = read_until_ready(demo)
        assert lines and lines[-1] == READY_LINE, lines
        for number, step in enumerate(STEPS, start=1):
            assert f"step {number}, {step.name}: {step.explanation}" in lines
        check_placement(lines)
        check_reclaim(lines)
        check_busy_time(lines)
        check_gang(lines)
        check_dra(lines)
        # The binding came from the Deployment's pods, not from a process on the host.
        pods = subprocess.run(
            [
                str(ensure_binaries(build=False).kubectl),
                f"--kubeconfig={work_dir / 'admin.kubeconfig'}",
                "get",
                "pods",
                "-n",
                "gpu-scheduler",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        items = json.loads(pods.stdout)["items"]
        assert len(items) == 2
        assert all(p["spec"]["nodeName"] == "real-node" for p in items)
        assert not (work_dir / "logs" / "gpu-scheduler.log").exists()
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0, rest
    assert "every component is gone" in rest
