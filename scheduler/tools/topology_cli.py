"""`gpu-scheduler topology discover`: a node's NVLink domains from `nvidia-smi topo -m`.

    gpu-scheduler topology discover [--file TOPO.txt] [--node NAME --patch] [--kubeconfig FILE]

Without --file it runs `nvidia-smi topo -m`. It prints the annotation on stdout as KEY=VALUE
(e.g. `gpu-scheduler.io/nvlink-domains=0-3,4-7`, the argument `kubectl annotate node NAME` takes)
and what it means on stderr (e.g. "8 GPUs in 2 NVLink domains: 0-3 | 4-7"); with --node and
--patch it writes the annotation to the node. The kubeconfig is --kubeconfig, else the KUBECONFIG
environment variable, else the in-cluster configuration.

Errors raise `CommandError` (one line, printed by the CLI entry): exit 2 for an unreadable or
malformed topology and for missing flags, 1 when the node does not exist or the API server
refuses the patch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from scheduler.tools.errors import (
    EXIT_RUNTIME,
    CommandError,
    check_kubeconfig,
    kubeconfig_from_env,
)
from topology.discover import parse_topology
from topology.domains import NVLINK_DOMAINS_ANNOTATION, NodeTopology, TopologyError, format_domains


def read_topology(path: Path | None) -> str:
    if path is not None:
        return path.read_text()
    result = subprocess.run(
        ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True, timeout=30
    )
    return result.stdout


def describe(topology: NodeTopology) -> str:
    """One line for people: how many GPUs in how many NVLink domains, and which."""
    gpus, domains = topology.gpu_count, len(topology.domains)
    groups = " | ".join(format_domains((d,)) for d in topology.domains)
    return (
        f"{gpus} GPU{'s' if gpus != 1 else ''} in {domains} NVLink "
        f"domain{'s' if domains != 1 else ''}: {groups}"
    )


async def patch_node(kubeconfig: str | None, node: str, value: str) -> None:
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import APINotFoundError, expect_success
    from scheduler.kube.client import api_client_for
    from scheduler.logging import configure_logging

    configure_logging("error")  # the client logs each write; the outcome is printed below
    async with await api_client_for(kubeconfig) as api_client:
        core = client.CoreV1Api(api_client)
        body = {"metadata": {"annotations": {NVLINK_DOMAINS_ANNOTATION: value}}}
        response = await core.patch_node(node, cast(Any, body), _preload_content=False)
        try:
            await expect_success(response)
        except APINotFoundError:
            raise CommandError(
                f"node {node[:100]} not found; list the nodes with `kubectl get nodes`",
                EXIT_RUNTIME,
            ) from None


def run_discover(args: argparse.Namespace) -> int:
    kubeconfig = None
    if args.patch:
        if not args.node:
            raise CommandError("--patch needs --node NAME")
        kubeconfig = args.kubeconfig or kubeconfig_from_env(os.environ)
        check_kubeconfig(kubeconfig, os.environ)
    try:
        topology = parse_topology(read_topology(args.file))
        value = format_domains(topology.domains)
    except (OSError, subprocess.SubprocessError) as error:
        where = args.file or "nvidia-smi topo -m"
        raise CommandError(
            f"cannot read the topology from {where}: {error}; give a saved copy with --file"
        ) from None
    except TopologyError as error:
        raise CommandError(f"{args.file or 'nvidia-smi topo -m'}: {error}") from None
    print(f"{NVLINK_DOMAINS_ANNOTATION}={value}")
    print(describe(topology), file=sys.stderr)
    if args.patch:
        asyncio.run(patch_node(str(kubeconfig) if kubeconfig else None, args.node, value))
        print(f"node/{args.node} annotated {NVLINK_DOMAINS_ANNOTATION}={value}", file=sys.stderr)
    elif not args.node:
        print(
            "write it to a node with --node NAME --patch, or "
            f"`kubectl annotate node NAME {NVLINK_DOMAINS_ANNOTATION}={value}`",
            file=sys.stderr,
        )
    return 0


def add_topology_parser(commands: Any) -> None:
    topology = commands.add_parser("topology", help="GPU topology tools")
    verbs = topology.add_subparsers(dest="topology_command", metavar="VERB", required=True)
    discover = verbs.add_parser(
        "discover",
        help="NVLink domains from nvidia-smi topo -m",
        description="Print a node's NVLink domains as the gpu-scheduler.io/nvlink-domains "
        "annotation (KEY=VALUE on stdout, what it means on stderr); --node NAME --patch writes "
        "it to the node.",
    )
    discover.add_argument("--file", type=Path, help="saved `nvidia-smi topo -m` output")
    discover.add_argument("--node", help="node to annotate")
    discover.add_argument("--patch", action="store_true", help="write the annotation to --node")
    discover.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig for --patch (default: $KUBECONFIG, else the in-cluster configuration)",
    )
    discover.set_defaults(handler=run_discover)
