"""The few I/O helpers every demo step shares (`hack.demo` and the steps in their own modules):
printing a line, polling a condition, reading objects and applying manifests through the local
cluster's kubectl. No step logic."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from hack.localcluster import LocalCluster, NodeSpec, create_nodes, wait_nodes_ready

NAMESPACE = "demo"
"""The namespace of the demo's pods."""


def say(text: str = "") -> None:
    """Print one line of the demo's output at once (the tests read it line by line)."""
    print(text, flush=True)


def poll(check: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Call `check` until it returns True (then True) or `timeout` s have passed (then False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return False


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    """`kubectl <args> -o json` as JSON; {} when kubectl fails or prints no JSON."""
    result = cluster.kubectl(*args, "-o", "json", check=False)
    try:
        found: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
    except ValueError:
        return {}
    return found


def apply_objects(cluster: LocalCluster, name: str, objects: list[dict[str, Any]]) -> None:
    """Write `objects` to `name` in the cluster's folder and `kubectl apply` it; print the
    output."""
    path = cluster.work_dir / name
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    say(cluster.kubectl("apply", "-f", str(path)).stdout.rstrip())


async def add_nodes(kubeconfig: Path, specs: list[NodeSpec]) -> list[str]:
    """Create the kwok nodes of `specs` and wait until they are Ready; their names."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        names = await create_nodes(core, specs)
        await wait_nodes_ready(core, names)
        return names
