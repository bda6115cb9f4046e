"""`make demo`: a local cluster with the three seed GPU node types, gpu-scheduler scheduling the
example workloads on it, running until Ctrl-C.

    python -m hack.demo [--count N] [--nodes NODES.yaml] [--work-dir DIR] [--no-scheduler]

The scheduler runs as `gpu-scheduler run` (its JSON log is in the logs folder); the workloads are
manifests/examples/workloads.yaml.

NODES.yaml, when given, is a list of node specs (fields of `hack.localcluster.NodeSpec`), e.g.

    - {type_name: G2-Expansion, count: 4, gpus: 8, nvlink_domains: "0-3,4-7",
       gpu_product: NVIDIA-H200}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from hack.localcluster import (
    SEED_NODE_TYPES,
    ClusterConfig,
    LocalCluster,
    NodeSpec,
    create_nodes,
    wait_nodes_ready,
)
from hack.localcluster.cluster import REPO_ROOT, free_port
from hack.localcluster.nodes import spec_from_mapping

DEFAULT_WORK_DIR = REPO_ROOT / "_out" / "demo"
WORKLOADS = REPO_ROOT / "manifests" / "examples" / "workloads.yaml"
SETTLE_TIMEOUT_SECONDS = 60.0
"""How long the demo waits for the scheduler to decide every example pod before printing."""
COLUMNS = ",".join(
    [
        "POD:.metadata.name",
        "NODE:.spec.nodeName",
        "GPUS:.metadata.annotations.gpu-scheduler\\.io/gpus",
        "DOMAIN:.metadata.annotations.gpu-scheduler\\.io/nvlink-domain",
        "STATUS:.status.phase",
        "WHY:.status.conditions[?(@.type=='PodScheduled')].message",
    ]
)


def decided(pod: dict[str, Any]) -> bool:
    """Whether the scheduler has decided `pod`: bound to a node, or marked unschedulable."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def wait_for_decisions(cluster: LocalCluster, namespace: str, timeout: float) -> None:
    """Poll until every pod of `namespace` is decided (see `decided`), at most `timeout` s; the
    table printed afterwards shows whatever state the pods are in then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
        pods = json.loads(listed).get("items", []) if listed.strip() else []
        if pods and all(decided(pod) for pod in pods):
            return
        time.sleep(0.5)


def start_scheduler(cluster: LocalCluster) -> str:
    """`gpu-scheduler run` against the demo cluster, as one of the cluster's components; returns
    its metrics URL."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "scheduler.cli",
        "run",
        f"--kubeconfig={cluster.kubeconfig}",
        "--no-leader-elect",
        f"--metrics-address=127.0.0.1:{port}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cluster.processes.start("gpu-scheduler", argv, env=env, cwd=REPO_ROOT)
    return f"http://127.0.0.1:{port}/metrics"


def load_specs(path: Path | None, count: int) -> list[NodeSpec]:
    if path is None:
        return [spec.with_count(count) for spec in SEED_NODE_TYPES]
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: expected a list of node specs, got {type(raw).__name__}")
    try:
        return [spec_from_mapping(item) for item in raw]
    except (TypeError, ValueError) as error:
        raise SystemExit(f"{path}: {error}") from error


async def add_nodes(kubeconfig: Path, specs: list[NodeSpec]) -> list[str]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        names = await create_nodes(core, specs)
        await wait_nodes_ready(core, names)
        return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2, help="nodes of each seed type (default 2)")
    parser.add_argument(
        "--nodes", type=Path, help="YAML list of node specs instead of the seed types"
    )
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument(
        "--no-scheduler", action="store_true", help="only the cluster: no scheduler, no workloads"
    )
    args = parser.parse_args(argv)

    specs = load_specs(args.nodes, args.count)
    shutil.rmtree(args.work_dir, ignore_errors=True)
    cluster = LocalCluster(ClusterConfig(work_dir=args.work_dir))
    print("starting the local control plane (a first run builds the Kubernetes binaries) ...")
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    with cluster:
        # From here on Ctrl-C (or SIGTERM) asks for a clean stop, whatever the demo is doing.
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        names = asyncio.run(add_nodes(cluster.kubeconfig, specs))
        kubectl = cluster.binaries.kubectl if cluster.binaries else "kubectl"
        scheduler_url = "not started" if args.no_scheduler else start_scheduler(cluster)
        print(
            f"\nlocal cluster ready in {cluster.started_in_s:.0f} s "
            f"with {len(names)} fake GPU nodes\n"
            f"  kubeconfig:  {cluster.kubeconfig}\n"
            f"  prometheus:  {cluster.prometheus_url}\n"
            f"  dcgm:        {cluster.dcgm_url}/metrics\n"
            f"  logs:        {cluster.log_dir}\n"
            f"  scheduler:   {scheduler_url} (log: gpu-scheduler.log)\n\n"
            f"  {kubectl} --kubeconfig {cluster.kubeconfig} get nodes "
            "-o custom-columns=NAME:.metadata.name,TYPE:.metadata.labels.node\\.kubernetes\\.io/"
            "instance-type,"
            "GPUS:.status.allocatable.nvidia\\.com/gpu,"
            "NVLINK:.metadata.annotations.gpu-scheduler\\.io/nvlink-domains\n\n"
            "Ctrl-C stops it.",
            flush=True,
        )
        if not args.no_scheduler:
            print(cluster.kubectl("apply", "-f", str(WORKLOADS)).stdout, end="")
            wait_for_decisions(cluster, "demo", SETTLE_TIMEOUT_SECONDS)
            print(
                cluster.kubectl(
                    "get", "pods", "-n", "demo", "-o", f"custom-columns={COLUMNS}"
                ).stdout
            )
        while not stop:
            time.sleep(1)
            dead = [name for name, alive in cluster.alive().items() if not alive]
            if dead:
                print(
                    f"component(s) exited: {', '.join(dead)}; see {cluster.log_dir}",
                    file=sys.stderr,
                )
                return 1
        print("\nstopping ...", flush=True)
    print("stopped; every component is gone.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
