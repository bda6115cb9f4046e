"""`kubectl gpu-scheduler explain --pod ns/name` through kubectl's plugin discovery, against the
local API server: the pinned kubectl finds `kubectl-gpu_scheduler` on PATH and runs it with
kubectl's flags, which the plugin translates (`scheduler.tools.kubectl_flags`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from tests.kube import gpu_pod
from tests.kubectl_plugin import plugin_dir, with_plugin_on_path

LARGEST = re.compile(r"^0/\d+ nodes are available: the pod requests 64 nvidia.com/gpu .* the "
                     r"largest node has \d+\.$")  # fmt: skip


def kubectl_plugin(
    cluster: LocalCluster, bin_dir: Path, *argv: str
) -> subprocess.CompletedProcess[str]:
    assert cluster.binaries is not None
    return subprocess.run(
        [str(cluster.binaries.kubectl), "gpu-scheduler", *argv],
        env=with_plugin_on_path(bin_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_kubectl_gpu_scheduler_explain_reads_the_pod_through_kubectl(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    seed_nodes: list[str],
    tmp_path: Path,
) -> None:
    await core_api.create_namespaced_pod(namespace, cast(Any, gpu_pod("too-big", 64)))
    bin_dir = plugin_dir(tmp_path)
    kubeconfig = str(cluster.kubeconfig)

    by_ref = kubectl_plugin(
        cluster, bin_dir, "explain", "--pod", f"{namespace}/too-big", "--kubeconfig", kubeconfig
    )
    assert by_ref.returncode == 0, by_ref.stderr
    lines = by_ref.stdout.splitlines()
    assert LARGEST.match(lines[0]), lines[0]
    assert lines[1].split()[:2] == ["NODE", "FEASIBLE"]
    assert {name for name in seed_nodes} <= {line.split()[0] for line in lines[2:]}

    as_json = kubectl_plugin(
        cluster, bin_dir, "explain", "too-big", "-n", namespace, "-o", "json",
        "--kubeconfig", kubeconfig,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads(as_json.stdout)
    assert rows and not any(row["feasible"] for row in rows)

    # A context whose namespace is the test's: the pod needs no namespace at all.
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    context = dict(config["contexts"][0])
    context = {"name": "team", "context": {**context["context"], "namespace": namespace}}
    config["contexts"] = [*config["contexts"], context]
    team = tmp_path / "team.kubeconfig"
    team.write_text(yaml.safe_dump(config))
    by_context = kubectl_plugin(
        cluster, bin_dir, "explain", "too-big", "--context", "team", "-o", "yaml",
        "--kubeconfig", str(team),
    )  # fmt: skip
    assert by_context.returncode == 0, by_context.stderr
    assert yaml.safe_load(by_context.stdout) == rows
