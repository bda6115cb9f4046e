"""`gpu-scheduler topology discover`: a node's NVLink domains from `nvidia-smi topo -m`, and by GPU
identifier with `nvidia-smi -q -x`.

    gpu-scheduler topology discover [--file TOPO.txt [--query-file QUERY.xml]] [--by uuid|pci]
                                    [--node NAME --patch] [--kubeconfig FILE] [--context NAME]

Without --file it runs `nvidia-smi topo -m` and `nvidia-smi -q -x` on this machine. It prints the
annotations on stdout as KEY=VALUE, the arguments `kubectl annotate node NAME` takes:
`gpu-scheduler.io/nvlink-domains` by GPU index (e.g. `0-3,4-7`) and, when the `-q -x` output is
at hand, `gpu-scheduler.io/nvlink-domain-ids` by GPU UUID (`--by uuid`, the default) or PCI bus
ID (`--by pci`). On stderr it says what they mean (e.g. "8 GPUs in 2 NVLink domains: 0-3 | 4-7")
and what to look out for: domains the index annotation cannot express (only the by-ID one is
printed then), and GPUs whose minor number differs from their index (NVIDIA's DRA driver names
devices `gpu-<minor>`, so there the index annotation does not name DRA devices). With --file and
no --query-file only the index annotation is printed; --query-file needs --file (both outputs
must come from the same node). With --node and --patch it writes what it printed to the node.
The kubeconfig is --kubeconfig (its --context, default its current-context), else the KUBECONFIG
environment variable, else the in-cluster configuration.

Errors raise `CommandError` (one line, printed by the CLI entry): exit 2 for an unreadable or
malformed topology or query output and for missing flags, 1 when the node does not exist or the
API server refuses the patch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from scheduler.tools.errors import (
    EXIT_RUNTIME,
    CommandError,
    check_kubeconfig,
    kubeconfig_from_env,
)
from scheduler.tools.output import add_context_flag
from topology.discover import ID_KINDS, domain_ids_of, minors_off_index, parse_topology
from topology.domain_ids import NVLINK_DOMAIN_IDS_ANNOTATION, format_domain_ids
from topology.domains import NVLINK_DOMAINS_ANNOTATION, NodeTopology, TopologyError, format_domains
from topology.smi_query import parse_gpu_query
from topology.text import clip, index_list

TOPO_COMMAND = ("nvidia-smi", "topo", "-m")
QUERY_COMMAND = ("nvidia-smi", "-q", "-x")


def read_output(path: Path | None, command: tuple[str, ...]) -> str:
    """The text of `path`, else the output of `command`; `CommandError` when neither works."""
    try:
        if path is not None:
            return path.read_text()
        result = subprocess.run(
            list(command), capture_output=True, text=True, check=True, timeout=30
        )
        return result.stdout
    except (OSError, UnicodeDecodeError, subprocess.SubprocessError) as error:
        where = path or " ".join(command)
        raise CommandError(
            f"cannot read {where}: {clip(str(error))}; give a saved copy with "
            f"{'--file' if command == TOPO_COMMAND else '--query-file'}"
        ) from None


def describe(topology: NodeTopology) -> str:
    """One line for people: how many GPUs in how many NVLink domains, and which."""
    gpus, domains = topology.gpu_count, len(topology.domains)
    groups = " | ".join(index_list(domain) for domain in topology.domains)
    return (
        f"{gpus} GPU{'s' if gpus != 1 else ''} in {domains} NVLink "
        f"domain{'s' if domains != 1 else ''}: {groups}"
    )


async def patch_node(
    kubeconfig: str | None,
    node: str,
    annotations: Mapping[str, str],
    context: str | None = None,
) -> None:
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import APINotFoundError, expect_success
    from scheduler.kube.client import api_client_for
    from scheduler.logging import configure_logging

    configure_logging("error")  # the client logs each write; the outcome is printed below
    async with await api_client_for(kubeconfig, context) as api_client:
        core = client.CoreV1Api(api_client)
        body = {"metadata": {"annotations": dict(annotations)}}
        response = await core.patch_node(node, cast(Any, body), _preload_content=False)
        try:
            await expect_success(response)
        except APINotFoundError:
            raise CommandError(
                f"node {node[:100]} not found; list the nodes with `kubectl get nodes`",
                EXIT_RUNTIME,
            ) from None


def discover_annotations(
    topo_text: str, query_text: str | None, by: str, where: tuple[str, str]
) -> tuple[NodeTopology, dict[str, str], list[str]]:
    """(the topology, the annotations to print, notes for stderr) from the outputs of
    `nvidia-smi topo -m` and, if given, `nvidia-smi -q -x`; `where` names them in errors."""
    try:
        topology = parse_topology(topo_text)
    except TopologyError as error:
        raise CommandError(f"{where[0]}: {error}") from None
    annotations: dict[str, str] = {}
    notes: list[str] = []
    index_problem = ""
    try:
        annotations[NVLINK_DOMAINS_ANNOTATION] = format_domains(topology.domains)
    except TopologyError as error:
        index_problem = str(error)
    if query_text is not None:
        try:
            gpus = parse_gpu_query(query_text)
            ids = domain_ids_of(topology, gpus, "pci" if by == "pci" else "uuid")
        except TopologyError as error:
            raise CommandError(f"{where[1]}: {error}") from None
        annotations[NVLINK_DOMAIN_IDS_ANNOTATION] = format_domain_ids(ids.domains)
        off = minors_off_index(gpus)
        if off and not index_problem:
            shown = ", ".join(f"GPU {gpu.index} is minor {gpu.minor}" for gpu in off[:4])
            notes.append(
                f"minor numbers differ from indices ({shown}): NVIDIA's DRA driver names "
                f"devices gpu-<minor>, so with DRA use {NVLINK_DOMAIN_IDS_ANNOTATION}"
            )
    if index_problem:
        if query_text is None:
            raise CommandError(f"{where[0]}: {index_problem}; add --query-file for the by-ID form")
        notes.append(f"{index_problem}; only {NVLINK_DOMAIN_IDS_ANNOTATION} is written")
    return topology, annotations, notes


def run_discover(args: argparse.Namespace) -> int:
    kubeconfig = None
    if args.patch:
        if not args.node:
            raise CommandError("--patch needs --node NAME")
        kubeconfig = args.kubeconfig or kubeconfig_from_env(os.environ)
        check_kubeconfig(kubeconfig, os.environ, args.context)
    if args.query_file is not None and args.file is None:
        raise CommandError("--query-file needs --file: give both outputs saved on the same node")
    topo_text = read_output(args.file, TOPO_COMMAND)
    with_query = args.file is None or args.query_file is not None
    query_text = read_output(args.query_file, QUERY_COMMAND) if with_query else None
    where = (
        str(args.file or " ".join(TOPO_COMMAND)),
        str(args.query_file or " ".join(QUERY_COMMAND)),
    )
    topology, annotations, notes = discover_annotations(topo_text, query_text, args.by, where)
    pairs = " ".join(shlex.quote(f"{key}={value}") for key, value in annotations.items())
    for key, value in annotations.items():
        print(f"{key}={value}")
    print(describe(topology), file=sys.stderr)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.patch:
        config_file = str(kubeconfig) if kubeconfig else None
        asyncio.run(patch_node(config_file, args.node, annotations, args.context))
        print(f"node/{args.node} annotated {pairs}", file=sys.stderr)
    elif not args.node:
        print(
            f"write it to a node with --node NAME --patch, or `kubectl annotate node NAME {pairs}`",
            file=sys.stderr,
        )
        if query_text is None:
            print(
                f"for {NVLINK_DOMAIN_IDS_ANNOTATION} (GPUs by UUID or PCI bus ID, for DRA) add "
                "--query-file with the same node's `nvidia-smi -q -x` output",
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
        "annotation and, from `nvidia-smi -q -x`, as gpu-scheduler.io/nvlink-domain-ids "
        "(KEY=VALUE on stdout, what they mean on stderr); --node NAME --patch writes them to "
        "the node.",
    )
    discover.add_argument("--file", type=Path, help="saved `nvidia-smi topo -m` output")
    discover.add_argument(
        "--query-file",
        type=Path,
        help="saved `nvidia-smi -q -x` output of the same node, for the by-ID annotation "
        "(needs --file)",
    )
    discover.add_argument(
        "--by",
        choices=ID_KINDS,
        default="uuid",
        help="name GPUs in gpu-scheduler.io/nvlink-domain-ids by UUID (default) or PCI bus ID",
    )
    discover.add_argument("--node", help="node to annotate")
    discover.add_argument("--patch", action="store_true", help="write the annotation to --node")
    discover.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig for --patch (default: $KUBECONFIG, else the in-cluster configuration)",
    )
    add_context_flag(discover)
    discover.set_defaults(handler=run_discover)
