"""The environment variables and command-line flags that override single settings."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from scheduler.config.errors import Invalid
from scheduler.config.readers import LOG_LEVELS


def _env_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise Invalid(f"must be true or false, got {text!r}")


ENV_OVERRIDES: Final[Mapping[str, tuple[str, Callable[[str], object]]]] = {
    "GPU_SCHEDULER_SCHEDULER_NAME": ("schedulerName", str),
    "GPU_SCHEDULER_KUBECONFIG": ("kubeconfig", str),
    "GPU_SCHEDULER_LOG_LEVEL": ("logLevel", str),
    "GPU_SCHEDULER_METRICS_ADDRESS": ("metricsAddress", str),
    "GPU_SCHEDULER_METRICS_SECURE": ("metricsServing.secure", _env_bool),
    "GPU_SCHEDULER_LEADER_ELECT": ("leaderElection.enabled", _env_bool),
    "GPU_SCHEDULER_LEASE_NAMESPACE": ("leaderElection.leaseNamespace", str),
}
"""Environment variable -> (key path, parser of its text). Empty values are ignored."""


@dataclass(frozen=True, slots=True)
class Flag:
    """A command-line flag overriding one setting: `option` (`--lease-namespace`) sets the key
    path `key` (`leaderElection.leaseNamespace`); a `boolean` flag also has its `--no-` form.
    The loader names `option` as the source of the value."""

    option: str
    key: str
    help: str
    boolean: bool = False

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments that holds the flag's value."""
        return self.option.removeprefix("--").replace("-", "_")


FLAGS: Final = (
    Flag("--kubeconfig", "kubeconfig", "kubeconfig file (default: in-cluster configuration)"),
    Flag("--scheduler-name", "schedulerName", "schedule pods with this spec.schedulerName"),
    Flag("--log-level", "logLevel", "one of " + ", ".join(LOG_LEVELS)),
    Flag("--metrics-address", "metricsAddress", "host:port of the metrics and health server"),
    Flag(
        "--metrics-secure",
        "metricsServing.secure",
        "serve /metrics over HTTPS to authorized bearer tokens only",
        True,
    ),
    Flag("--leader-elect", "leaderElection.enabled", "compete for the leader Lease", True),
    Flag("--lease-namespace", "leaderElection.leaseNamespace", "namespace of the leader Lease"),
)
"""Command-line flags and the keys they override; every flag defaults to "not given"."""

FLAG_BY_KEY: Final = {flag.key: flag for flag in FLAGS}
"""Key path -> the flag of `FLAGS` that overrides it."""


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add `--config` and the override flags of `FLAGS` to `parser` (all default to None)."""
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="YAML configuration file"
    )
    for flag in FLAGS:
        if flag.boolean:
            parser.add_argument(
                flag.option,
                dest=flag.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=flag.help,
            )
        else:
            parser.add_argument(flag.option, dest=flag.dest, default=None, help=flag.help)
