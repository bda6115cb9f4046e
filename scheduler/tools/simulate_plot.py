"""`gpu-scheduler simulate --plot FILE.png`: the flag's checks and the figure's title, around
`scheduler.tools.plots.plot_simulation` (what it draws: `scheduler.tools.simulate_series`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from scheduler.tools.plots import check_plot_target, plot_simulation
from scheduler.tools.simulate_series import UsageSeries

PODS_MODE = "pods"


class PolicyRun(Protocol):
    """What the figure needs of one policy's result (`simulate.PolicyResult`)."""

    @property
    def policy(self) -> str: ...

    @property
    def series(self) -> UsageSeries: ...


def check_simulation_plot(path: Path | None, mode: str) -> None:
    """Before the simulation runs: `ValueError` (one line, naming the flag) when `--plot` was
    given with a gang workload (`mode` is the workload flag's name), cannot be written, or
    matplotlib is missing (`plots.PlotUnavailable`)."""
    if path is None:
        return
    if mode != PODS_MODE:
        flag = "--" + mode.replace("_", "-")
        raise ValueError(f"--plot draws a --pods simulation; it is not available with {flag}")
    check_plot_target(path)


def simulation_title(args: argparse.Namespace, gpus: int) -> str:
    """The file names (never their folders), the cluster's GPUs, the demand and the order."""
    order = f"sampled, seed {args.seed}" if args.sample else f"trace order, seed {args.seed}"
    return (
        f"simulate: {Path(args.nodes).name} ({gpus:,} GPUs), {Path(args.pods).name}, "
        f"demand {args.demand:g}, {order}"
    )


def write_simulation_plot(
    args: argparse.Namespace, results: Sequence[PolicyRun], largest_gpus: int
) -> int:
    """Draw `results` into `args.plot`: 0, or 2 with one line on stderr when the file cannot
    be written."""
    runs = [(result.policy, result.series) for result in results]
    gpus = max((series.gpus_total for _, series in runs), default=0)
    try:
        plot_simulation(runs, args.plot, simulation_title(args, gpus), largest_gpus)
    except OSError as error:
        print(f"gpu-scheduler simulate: --plot {args.plot}: {error}", file=sys.stderr)
        return 2
    return 0
