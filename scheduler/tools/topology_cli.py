"""`gpu-scheduler topology discover`: a node's NVLink domains from `nvidia-smi topo -m`.

    gpu-scheduler topology discover [--file TOPO.txt] [--node NAME --patch] [--kubeconfig FILE]

Without --file it runs `nvidia-smi topo -m`. It prints the annotation value (e.g. "0-3,4-7");
with --node and --patch it writes it to the node as `gpu-scheduler.io/nvlink-domains`.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from topology.discover import discover_domains
from topology.domains import NVLINK_DOMAINS_ANNOTATION, TopologyError


def read_topology(path: Path | None) -> str:
    if path is not None:
        return path.read_text()
    result = subprocess.run(
        ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True, timeout=30
    )
    return result.stdout


async def patch_node(kubeconfig: str | None, node: str, value: str) -> None:
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import expect_success
    from scheduler.kube.client import api_client_for

    async with await api_client_for(kubeconfig) as api_client:
        core = client.CoreV1Api(api_client)
        body = {"metadata": {"annotations": {NVLINK_DOMAINS_ANNOTATION: value}}}
        response = await core.patch_node(node, cast(Any, body), _preload_content=False)
        await expect_success(response)


def run_discover(args: argparse.Namespace) -> int:
    try:
        value = discover_domains(read_topology(args.file))
    except (OSError, subprocess.SubprocessError) as error:
        print(
            f"gpu-scheduler topology discover: cannot read the topology: {error}", file=sys.stderr
        )
        return 2
    except TopologyError as error:
        print(f"gpu-scheduler topology discover: {error}", file=sys.stderr)
        return 2
    print(value)
    if args.patch:
        if not args.node:
            print("gpu-scheduler topology discover: --patch needs --node NAME", file=sys.stderr)
            return 2
        asyncio.run(patch_node(str(args.kubeconfig) if args.kubeconfig else None, args.node, value))
        print(f"node/{args.node} annotated {NVLINK_DOMAINS_ANNOTATION}={value}", file=sys.stderr)
    return 0


def add_topology_parser(commands: Any) -> None:
    topology = commands.add_parser("topology", help="GPU topology tools")
    verbs = topology.add_subparsers(dest="topology_command", metavar="VERB", required=True)
    discover = verbs.add_parser("discover", help="NVLink domains from nvidia-smi topo -m")
    discover.add_argument("--file", type=Path, help="saved `nvidia-smi topo -m` output")
    discover.add_argument("--node", help="node to annotate")
    discover.add_argument("--patch", action="store_true", help="write the annotation to --node")
    discover.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    discover.set_defaults(handler=run_discover)
