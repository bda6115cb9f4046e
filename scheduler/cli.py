"""The `gpu-scheduler` command line.

gpu-scheduler run [--config FILE] [flags]        the scheduler daemon
gpu-scheduler explain ...                        every node's verdict and score for a pod
gpu-scheduler topology discover [...]            NVLink domains from `nvidia-smi topo -m`
gpu-scheduler reclaim replay ...                 the idle verdict over recorded samples
gpu-scheduler simulate ...                       placement policies over a cluster trace
gpu-scheduler idle-report [--prometheus-url URL]  pods holding idle GPUs, and their reclaim policy
gpu-scheduler version
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from importlib.metadata import PackageNotFoundError, version

from scheduler.config import ConfigError, add_config_flags, config_from_args


def package_version() -> str:
    """The installed distribution's version, or "unknown" when running from a bare source tree."""
    try:
        return version("gpu-scheduler")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-scheduler",
        description="Kubernetes secondary scheduler for GPU pods: NVLink-domain-aware placement "
        "and reclaim of measurably idle GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-scheduler {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("version", help="print the version and exit")
    run = commands.add_parser("run", help="run the scheduler daemon")
    add_config_flags(run)
    from reclaim.replay import add_reclaim_parser
    from scheduler.tools.explain import add_explain_parser
    from scheduler.tools.idle_report import add_idle_report_parser
    from scheduler.tools.simulate import add_simulate_parser
    from scheduler.tools.topology_cli import add_topology_parser

    add_explain_parser(commands)
    add_topology_parser(commands)
    add_reclaim_parser(commands)
    add_simulate_parser(commands)
    add_idle_report_parser(commands)
    return parser


async def run_daemon(args: argparse.Namespace) -> int:
    from scheduler.daemon import Daemon
    from scheduler.kube.client import api_client_for
    from scheduler.logging import configure_logging

    settings = config_from_args(args, os.environ)
    configure_logging(settings.log_level)
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    async with await api_client_for(kubeconfig) as api_client:
        daemon = Daemon(settings, api_client)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, daemon.stop)
        await daemon.run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(package_version())
        return 0
    if args.command == "run":
        try:
            return asyncio.run(run_daemon(args))
        except ConfigError as error:
            print(f"gpu-scheduler: invalid configuration: {error}", file=sys.stderr)
            return 2
    if hasattr(args, "handler"):
        code: int = args.handler(args)
        return code
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
