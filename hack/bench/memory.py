"""Where the daemon's resident memory goes: the cost of its imports, and what it holds at run time.

    python -m hack.bench.memory imports [--tree LABEL:PATH ...] [--top 25] [-o json]
    python -m hack.bench.memory runtime [--nodes 1000] [--pods 1500] [--features] [--seed 0]
        [--tree LABEL:PATH ...] [--trace-frames 8] [--top 20] [-o json]

`--tree LABEL:PATH` (repeatable) measures the checkout at PATH too (e.g. the tree before a
change, `git worktree add ../before <commit>`), side by side with this one, in the same run.
The measured process is `hack/bench/memory_child.py` of this checkout, run with `python -P` and
PYTHONPATH naming the measured checkout (its `scheduler` is imported).

`imports`: a fresh interpreter per checkout imports what `gpu-scheduler run` imports before it
reads any object, in the daemon's order (`memory_child.DAEMON_IMPORT_STEPS`), and reports its
resident set (VmRSS) after each step and the growth split by package (exclusive cost of every
module loaded, summed by `memory_imports.package_of`; for this checkout, the module that first
asked for each package). A second fresh interpreter per checkout runs the same steps under
`python -X importtime`: import time (CPU, beside the memory), in all and, for this checkout, by
package.

`runtime`: a local cluster (`hack.localcluster`: etcd, kube-apiserver, kube-controller-manager,
kwok; no kube-scheduler, no Prometheus) with `--nodes` kwok nodes of the three seed types, as the
control-plane benchmark builds them. One daemon after the other runs `gpu-scheduler run` (leader
election off, default settings) in a child process, which records three phases:

- imported: after the imports, before the API client and the daemon are made;
- synced: every informer has listed (the nodes; no pods yet);
- scheduled: the control-plane benchmark's pod set (`hack.bench.control_plane_run.run_pods`, burst,
  the feature mix with `--features`) was created for it and it bound them (or the run settled
  with some pending), before any is deleted.

For each phase: VmRSS, and VmHWM (the peak so far). The daemons: this checkout's, untraced (its
figures are the daemon's real memory); each `--tree`'s, untraced; this checkout's again under
`tracemalloc` with `--trace-frames` frames per block, whose snapshots at each phase are grouped
here (`memory_sites`): what was allocated after "imported" and is still alive at "synced" and at
"scheduled", by package, by the innermost project line, and by line. Tracing costs memory and
time of its own, so the traced run's RSS is not the daemon's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hack.bench.memory_child import ImportCost
from hack.bench.memory_imports import by_package, importtime_by_package

MIB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).resolve().with_name("memory_child.py")
THIS_TREE = "this tree"


def child_process(tree: Path, *args: str, python_options: Sequence[str] = ()) -> list[str]:
    """The command line of `memory_child.py ARGS` measuring the checkout at `tree` (run it
    with `child_env(tree)`)."""
    return [sys.executable, *python_options, "-P", str(CHILD), *args]


def child_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def trees_of(specs: Sequence[str]) -> list[tuple[str, Path]]:
    """This checkout, then each `LABEL:PATH` of `--tree`; `ValueError` for one without a
    label or whose path holds no `scheduler` package."""
    trees = [(THIS_TREE, REPO_ROOT)]
    for spec in specs:
        label, _, path = spec.partition(":")
        if not label or not path:
            raise ValueError(f"--tree {spec!r} is not LABEL:PATH")
        root = Path(path).resolve()
        if not (root / "scheduler" / "__init__.py").is_file():
            raise ValueError(f"--tree {spec!r}: no scheduler package in {root}")
        trees.append((label, root))
    return trees


# -- imports ---------------------------------------------------------------------------------


def measure_imports(trees: Sequence[tuple[str, Path]]) -> dict[str, Any]:
    """RSS per step for every checkout; for the first, RSS per package and import time per
    package (see the module docstring)."""
    report: dict[str, Any] = {"trees": []}
    for label, tree in trees:
        measured = subprocess.run(
            child_process(tree, "imports"),
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            env=child_env(tree),
        )
        document = json.loads(measured.stdout)
        costs = [ImportCost(**cost) for cost in document.pop("costs")]
        report["trees"].append(
            {
                "label": label,
                **document,
                "modules": len(costs),
                "packages": [asdict(cost) for cost in by_package(costs)],
            }
        )
    for tree_report, (_, tree) in zip(report["trees"], trees, strict=True):
        timed = subprocess.run(
            child_process(tree, "imports", "--no-meter", python_options=("-X", "importtime")),
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            env=child_env(tree),
        )
        tree_report["importtime"] = [asdict(c) for c in importtime_by_package(timed.stderr)]
    return report


def print_imports(report: dict[str, Any], top: int) -> None:
    for tree in report["trees"]:
        print(
            f"{tree['label']}: fresh interpreter {tree['start_rss'] / MIB:.1f} MiB resident, "
            f"{tree['modules']} modules imported"
        )
        print(f"  {'step':<36} {'RSS MiB':>8} {'growth':>8}")
        for step in tree["steps"]:
            print(f"  {step['step']:<36} {step['rss'] / MIB:>8.1f} {step['growth'] / MIB:>+8.1f}")
    first = report["trees"][0]
    labels = [tree["label"] for tree in report["trees"]]
    by_label = {
        tree["label"]: {cost["package"]: cost for cost in tree["packages"]}
        for tree in report["trees"]
    }
    largest = sorted(
        {package for costs in by_label.values() for package in costs},
        key=lambda package: (
            -max(c[package]["exclusive"] for c in by_label.values() if package in c)
        ),
    )
    print("\nimport growth by package, MiB (modules):")
    print(f"{'package':<32} " + " ".join(f"{label:>18}" for label in labels))
    for package in largest[:top]:
        cells = []
        for label in labels:
            cost = by_label[label].get(package)
            cells.append(f"{cost['exclusive'] / MIB:.2f} ({cost['modules']})" if cost else "-")
        print(f"{package:<32} " + " ".join(f"{cell:>18}" for cell in cells))
    print(f"\n{first['label']}: who first imported each package:")
    for cost in first["packages"][:top]:
        print(f"{cost['package']:<32} {cost['first_importer'] or '-'}")
    print("\nimport time (python -X importtime, self times summed):")
    for tree in report["trees"]:
        total = sum(cost["self_us"] for cost in tree["importtime"]) / 1000
        print(f"  {tree['label']}: {total:.0f} ms")
    print(f"\n{first['label']}: import time by package:")
    for cost in first["importtime"][:top]:
        print(f"{cost['package']:<32} {cost['self_us'] / 1000:>7.1f} ms {cost['modules']:>6}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    imports = commands.add_parser("imports", help="RSS and import time of the daemon's imports")
    runtime = commands.add_parser("runtime", help="the daemon's memory on a local cluster")
    for command in (imports, runtime):
        command.add_argument(
            "--tree",
            action="append",
            default=[],
            metavar="LABEL:PATH",
            help="measure the checkout at PATH too (repeatable)",
        )
        command.add_argument("-o", "--output", choices=("table", "json"), default="table")
    imports.add_argument("--top", type=int, default=25, help="packages listed")
    runtime.add_argument("--nodes", type=int, default=1000)
    runtime.add_argument("--pods", type=int, default=1500)
    runtime.add_argument("--features", action="store_true", help="the feature mix")
    runtime.add_argument("--seed", type=int, default=0)
    runtime.add_argument("--trace-frames", type=int, default=8)
    runtime.add_argument("--top", type=int, default=20, help="allocation sites listed")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        trees = trees_of(args.tree)
    except ValueError as error:
        parser.error(str(error))
    if args.command == "runtime":
        from hack.bench.memory_runtime import main_runtime

        return main_runtime(args, trees)
    report = measure_imports(trees)
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        print_imports(report, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
