"""The `-o/--output` flag of the tools that print rows, and kubectl's `--context` beside it.

Formats, as kubectl names them: `table` (the default, what a person reads), `wide` (the same
table: the tools' tables already show every column), `json` and `yaml` (the same data, for a
program: `structured` renders it; YAML is the JSON's data as a YAML document, keys in the
JSON's order). A tool prints `structured(data, args.output)` when it is not None, else its
table.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

TABLE_FORMATS = ("table", "wide")
"""Formats printed as the tool's table."""
OUTPUT_FORMATS = (*TABLE_FORMATS, "json", "yaml")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """`-o/--output table|wide|json|yaml` (default table) on `parser`."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table (default) or wide: the table; json or yaml: the same data for a program",
    )


def add_context_flag(parser: argparse.ArgumentParser) -> None:
    """`--context NAME`: the kubeconfig context to use instead of its current-context."""
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )


def structured(data: Any, output: str) -> str | None:
    """`data` (JSON-able) as JSON or YAML text for those formats; None for a table format."""
    if output == "json":
        return json.dumps(data, indent=2)
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")
    return None
