"""The `gpu-scheduler` command line.

Subcommands are added as the daemon grows; each lives in its own module and registers itself here.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version


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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(package_version())
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
