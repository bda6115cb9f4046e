"""The launcher leaves no process behind, even when the process that started it is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hack.localcluster.cluster import REPO_ROOT

CHILD = """
import json, sys, time
from pathlib import Path
from hack.localcluster import ClusterConfig, LocalCluster
cluster = LocalCluster(ClusterConfig(work_dir=Path(sys.argv[1]), kube_scheduler=False,
                                     prometheus=False, fake_dcgm=False))
cluster.start()
print(json.dumps({c.name: c.process.pid for c in cluster.processes.components}), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purpose once it no longer runs.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_no_component_outlives_its_launcher(tmp_path: Path, signum: int) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline()
        assert line, f"launcher exited early with {launcher.poll()}"
        pids: dict[str, int] = json.loads(line)
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kwok"}
        assert all(_alive(pid) for pid in pids.values())

        launcher.send_signal(signum)
        launcher.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
            time.sleep(0.2)
        survivors = {name: pid for name, pid in pids.items() if _alive(pid)}
        assert survivors == {}
    finally:
        launcher.kill()
        launcher.wait()
