"""Mutation testing of the pure decision modules with mutmut, and the score per module.

    python -m hack.mutation [MODULE ...] [--max-children 2] [--keep] [-o json]

MODULE is a path from `only_mutate` in pyproject.toml's [tool.mutmut] (default: all of them,
topology/scoring.py, reclaim/usage.py, reclaim/policy.py and scheduler/core/queue.py). mutmut copies
the packages into ./mutants (git-ignored), mutates each function of the chosen modules, and runs
only the unit tests that cover the mutated function (it maps tests to functions in a first
coverage run). A mutant is caught when a test fails or times out; it survives when every test
passes. The score of a module is caught / all its mutants (a mutant no test reaches counts as
survived). The surviving mutants are listed by name: `mutmut show NAME` prints the diff.

./mutants is removed first unless `--keep` is given, which resumes an interrupted run: only the
mutants without a verdict run again. Keep it only while the code is unchanged: mutmut never
re-copies a file that is already in ./mutants.
See docs/testing.md for what the scores were and which survivors are equivalent.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

MUTANTS = Path("mutants")
# mutmut's exit codes of a mutant's test run, by verdict (mutmut.stats.status_by_exit_code).
CAUGHT_EXIT_CODES = frozenset({1, 3, 36, 24, -24, 152, 255, 37})
SURVIVED_EXIT_CODES = frozenset({0, 5, 33})


@dataclass(frozen=True)
class ModuleScore:
    """One module's mutants by verdict; `score` is caught / total in percent."""

    module: str
    total: int
    caught: int
    survived: int
    not_run: int
    """Mutants without a verdict (the run was interrupted) or with an unexpected exit code."""
    survivors: tuple[str, ...]

    @property
    def score(self) -> float:
        return 100.0 * self.caught / self.total if self.total else 0.0


def configured_modules(pyproject: Path = Path("pyproject.toml")) -> list[str]:
    """The `only_mutate` list of [tool.mutmut]."""
    config = tomllib.loads(pyproject.read_text())["tool"]["mutmut"]
    return [str(module) for module in config["only_mutate"]]


def mutant_pattern(module: str) -> str:
    """mutmut's name pattern for every mutant of `module` ("topology/scoring.py" ->
    "topology.scoring.*")."""
    return module.removesuffix(".py").replace("/", ".") + ".*"


def module_score(module: str, exit_codes: dict[str, int | None]) -> ModuleScore:
    """Count the verdicts of one module from mutmut's `exit_code_by_key`."""
    caught = sum(1 for code in exit_codes.values() if code in CAUGHT_EXIT_CODES)
    survivors = tuple(
        sorted(name for name, code in exit_codes.items() if code in SURVIVED_EXIT_CODES)
    )
    return ModuleScore(
        module=module,
        total=len(exit_codes),
        caught=caught,
        survived=len(survivors),
        not_run=len(exit_codes) - caught - len(survivors),
        survivors=survivors,
    )


def read_score(module: str, mutants: Path = MUTANTS) -> ModuleScore:
    """The verdicts mutmut stored for `module` (mutants/<module>.meta)."""
    meta = json.loads((mutants / f"{module}.meta").read_text())
    exit_codes: dict[str, int | None] = meta["exit_code_by_key"]
    return module_score(module, exit_codes)


def to_run(modules: list[str], mutants: Path = MUTANTS) -> list[str]:
    """What to pass to `mutmut run`: every mutant of each module on a fresh run, only those
    without a verdict when an earlier (interrupted) run left its files (`--keep`)."""
    names = []
    for module in modules:
        meta = mutants / f"{module}.meta"
        if not meta.exists():
            names.append(mutant_pattern(module))
            continue
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
        names += sorted(name for name, code in exit_codes.items() if code is None)
    return names


def format_table(scores: list[ModuleScore]) -> str:
    lines = [f"{'module':<24} {'mutants':>7} {'caught':>6} {'survived':>8} {'score':>7}"]
    for s in scores:
        lines.append(
            f"{s.module:<24} {s.total:>7} {s.caught:>6} {s.survived:>8} {s.score:>6.1f}%"
            + (f"  ({s.not_run} without a verdict)" if s.not_run else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.mutation", description=__doc__.split("\n")[0]
    )
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: only_mutate)")
    parser.add_argument("--max-children", type=int, default=2, help="parallel test processes")
    parser.add_argument("--keep", action="store_true", help="reuse ./mutants from an earlier run")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)

    known = configured_modules()
    modules = args.modules or known
    unknown = [module for module in modules if module not in known]
    if unknown:
        parser.error(f"not in [tool.mutmut] only_mutate: {', '.join(unknown)}")
    if not args.keep:
        shutil.rmtree(MUTANTS, ignore_errors=True)
    names = to_run(modules)
    if names:
        command = [sys.executable, "-m", "mutmut", "run", f"--max-children={args.max_children}"]
        # mutmut prints a progress line per mutant; the verdicts are read from its files after.
        run = subprocess.run([*command, *names], check=False)
        if run.returncode != 0:
            print(f"mutmut run exited with {run.returncode}", file=sys.stderr)
            return run.returncode
    scores = [read_score(module) for module in modules]
    if args.output == "json":
        print(json.dumps([{**asdict(s), "score": round(s.score, 1)} for s in scores], indent=2))
    else:
        print()
        print(format_table(scores))
        for s in scores:
            for name in s.survivors:
                print(f"survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
