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
from hack.demo_dra import HOLDER, REAL_PAIR, expected_variable
from hack.image import image_archive
from hack.localcluster.binaries import ensure_binaries
from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.realnode import node_binaries
from tests.integration.test_demo import (
    after,
    check_busy_time,
    check_gang,
    check_placement,
    check_reclaim,
    read_until_ready,
)
from tests.integration.test_image import require_tools

pytestmark = pytest.mark.real_node


def check_dra_on_the_real_node(lines: list[str]) -> None:
    """On the real node's 4 devices (two NVLink domains of two), the holder gets device-00 (first
    fit too); the 2-device pod gets device-02,device-03, one domain, where first fit would have
    taken device-01,device-02 across both; each pod runs, its container's environment holds the
    driver's variable of its own claim, and kubelet prepared exactly the claim's devices; the
    pair's claim carries the finalizer, the allocation and the reservation."""
    section = after(lines, "step 5, dra: ")
    assert section[0].startswith("on the real node real-node: kubelet with Kubernetes' DRA test "
                                 "driver as its plugin, publishing 4 devices of driver "
                                 "gpu.nvidia.com (pool real-node, "), section[:3]  # fmt: skip
    assert "NVLink domains for them: device-00,device-01 | device-02,device-03 " in section[0]
    table = after(section, "the devices gpu-scheduler wrote into each claim's status.allocation")
    assert table[0].split() == ["POD", "NODE", "CLAIM", "DEVICES", "DOMAIN", "FIRST", "FIT",
                                "FIRST", "FIT", "DOMAIN"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in table[1:3]}
    assert rows[HOLDER] == [HOLDER, "real-node", HOLDER, "device-00", "0", "device-00", "0"]
    pair = rows[REAL_PAIR]
    claim = pair[2]
    assert pair[1] == "real-node" and claim.startswith(f"{REAL_PAIR}-gpus-"), table
    # gpu-scheduler: both devices in one domain; first fit: a different pair across both.
    assert pair[3:5] == ["device-02,device-03", "1"], table
    assert pair[5:] == ["device-01,device-02", "spans", "0,1"], table
    assert table[3] == (
        f"dra: {HOLDER} runs on real-node; its container's claim variables: "
        f"{expected_variable(HOLDER)}; kubelet prepared device-00 for claim {HOLDER}"
    ), table
    assert table[4] == (
        f"dra: {REAL_PAIR} runs on real-node; its container's claim variables: "
        f"{expected_variable(claim)}; kubelet prepared device-02,device-03 for claim {claim}"
    ), table
    assert table[5].startswith(f"dra: claim {claim}: metadata.finalizers "
                               "resource.kubernetes.io/delete-protection, then status.allocation "
                               "device-02,device-03 (pool real-node of driver gpu.nvidia.com; "
                               "nodeSelector metadata.name In real-node) with status.reservedFor "
                               f"pods/{REAL_PAIR}"), table[5]  # fmt: skip


def build_once_per_machine() -> None:
    """Build what a new machine builds once and caches (the real node's binaries and images,
    the scheduler's image), so that `STARTUP_TIMEOUT_S` times the demo, not these builds."""
    node_binaries(build=True)
    image_archive()


def test_the_demo_runs_its_steps_with_the_scheduler_in_the_cluster(tmp_path: Path) -> None:
    require_tools()
    build_once_per_machine()
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
        check_dra_on_the_real_node(lines)
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
