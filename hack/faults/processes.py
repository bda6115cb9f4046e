"""`gpu-scheduler run` as a child process, for faults that need a real process: SIGKILL at a
random point, SIGSTOP past the Lease and SIGCONT, restart.

Each process writes its JSON log to `<folder>/<name>.log`; a restart appends to the same file, so
the log audit (`hack.faults.invariants.read_records`) sees every incarnation's `pod_bound` lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from hack.faults.invariants import read_records
from hack.localcluster.cluster import REPO_ROOT, free_port
from hack.localcluster.processes import die_with_parent


def scheduler_config(
    scheduler_name: str,
    leader_election: bool = False,
    lease_namespace: str = "default",
    **sections: Any,
) -> dict[str, Any]:
    """A config for a fault run: short backoff, and a short Lease (4 s / 3 s / 0.5 s) when
    leader election is on, with a bind timeout (2 s) that fits inside it (a write's timeout
    must end before the renew deadline); `sections` are merged in as camelCase top-level
    keys."""
    config: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "metricsAddress": f"127.0.0.1:{free_port()}",
        "backoff": {"initialSeconds": 0.2, "maxSeconds": 1.0},
        "queue": {"unschedulableFlushSeconds": 2},
        "leaderElection": {
            "enabled": leader_election,
            "leaseName": f"{scheduler_name}-lease"[:60],
            "leaseNamespace": lease_namespace,
            "leaseDurationSeconds": 4,
            "renewDeadlineSeconds": 3,
            "retryPeriodSeconds": 0.5,
        },
    }
    if leader_election:
        config["binding"] = {"timeoutSeconds": 2}
    config.update(sections)
    return config


class SchedulerProcess:
    """One replica; `start()` again after `kill()` restarts it with the same config."""

    def __init__(self, name: str, config: dict[str, Any], kubeconfig: Path, folder: Path) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.folder = folder
        self.log_path = folder / f"{name}.log"
        self.config_path = folder / f"{name}.yaml"
        own = {**config, "metricsAddress": f"127.0.0.1:{free_port()}"}  # one port per replica
        self.config_path.write_text(yaml.safe_dump(own))
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    @property
    def metrics_url(self) -> str:
        """Where this replica serves /metrics (its own port, see `__init__`)."""
        address = yaml.safe_load(self.config_path.read_text())["metricsAddress"]
        return f"http://{address}/metrics"

    def start(self) -> None:
        env = {**os.environ, "POD_NAME": self.name, "PYTHONPATH": str(REPO_ROOT)}
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scheduler.cli",
                    "run",
                    "--config",
                    str(self.config_path),
                    "--kubeconfig",
                    str(self.kubeconfig),
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.log_path)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no graceful stop, no Lease release, binds in flight cut off."""
        if self.alive():
            self.signal(signal.SIGKILL)
            assert self.process is not None
            self.process.wait(timeout=30)
            self.kills += 1

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self) -> None:
        """Graceful stop (SIGTERM), SIGKILL after 30 s; a paused process is resumed first."""
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
