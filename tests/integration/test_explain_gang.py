"""`gpu-scheduler explain` for a gang on the real API server: a member (or its PodGroup) shows the
plan of the whole gang, the same verdict the daemon then acts on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from tests.integration.test_gangs import create_group, failed_note, member
from tests.kube import bind, gpu_pod
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for


def _explain(cluster: LocalCluster, config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "explain",
            *argv,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--config",
            str(config),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _plan(cluster: LocalCluster, config: Path, *argv: str) -> dict[str, Any]:
    result = _explain(cluster, config, *argv, "-o", "json")
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


async def test_explain_shows_the_gang_plan_the_daemon_acts_on(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"schedulerName": namespace}))
    (node,) = await make_nodes(core_api, [isolated(G2, namespace)])  # 4 GPUs, domains 0-1,2-3
    await core_api.create_namespaced_pod(namespace, gpu_pod("blocker", 2, scheduler_name="nobody"))
    await bind(core_api, namespace, "blocker", node)
    await create_group(api_client, namespace, "pg", 3)
    for name in ("w0", "w1", "w2"):
        await core_api.create_namespaced_pod(namespace, member(namespace, name, 1))

    plan = _plan(cluster, config, "--pod", f"{namespace}/w1")
    assert (plan["podGroup"], plan["fits"], plan["minCount"]) == (f"{namespace}/pg", False, 3)
    assert plan["message"].startswith("gang pg: only 2 of minCount 3 members fit: "), plan
    assert [m["pod"] for m in plan["members"]] == ["w0", "w1", "w2"]
    assert all(m["state"] == "unplaced" and m["node"] is None for m in plan["members"])
    assert plan == _plan(cluster, config, "--pod-group", f"{namespace}/pg")
    async with running_daemon(cluster, settings_for(namespace)):
        note = await failed_note(api_client, namespace, "w0")
    assert note == plan["message"]  # the daemon's verdict, word for word

    await core_api.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    plan = _plan(cluster, config, "--pod-group", f"{namespace}/pg")
    assert plan["fits"], plan
    assert {m["state"] for m in plan["members"]} == {"placed"}
    assert {m["node"] for m in plan["members"]} == {node}
    gpus = sorted(g for m in plan["members"] for g in m["gpus"])
    assert len(gpus) == len(set(gpus)) == 3

    table = _explain(cluster, config, "--pod-group", f"{namespace}/pg")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"PodGroup {namespace}/pg (scheduling.k8s.io/v1beta1): minCount 3"
    assert lines[1].startswith("gang pg fits: 3 member(s) placed")

    missing = _explain(cluster, config, "--pod-group", f"{namespace}/missing")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.splitlines() == [
        f"gpu-scheduler explain: PodGroup {namespace}/missing not found "
        "(scheduling.k8s.io/v1beta1 nor scheduling.x-k8s.io/v1alpha1); "
        f"list them with `kubectl get podgroups -n {namespace}`"
    ]
