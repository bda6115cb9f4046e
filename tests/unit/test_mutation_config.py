"""[tool.mutmut] lets `python -m hack.mutation` (docs/testing.md) run on a fresh clone: mutmut
copies part of the repository into ./mutants and runs the unit tests there, first all of them once
(the stats pass, which stops at the first failure), then those that reach each mutant.

- The copy holds every file of the repository root the unit tests read (`also_copy`): a missing
  one (the Dockerfile, README.md) fails its tests in ./mutants only.
- Every unit test that starts a pytest of its own is left out (`-m "not inner_pytest"`): that
  pytest runs in a temporary folder and imports the mutated copy (topology/scoring.py calls a
  mutated function at import); mutmut's code in the copy, started outside ./mutants, finds no
  [tool.mutmut] there and fails.

Checked by reading pyproject.toml, git's file list and the test sources (`ast`), without mutmut.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import tomllib
from itertools import pairwise
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from tests.datasets import REPO_ROOT

MARK = "inner_pytest"
MUTMUT_COPIES = {"tests", "test", "setup.cfg", "pyproject.toml"}
"""What mutmut copies into ./mutants besides `source_paths` and `also_copy` (among others: lock
files, test*.py)."""
NOT_COPIED = {
    ".ci": "the CI entry script (`make test`); no unit test reads it",
    ".gitignore": "read by git only",
    "Makefile": "the README's `make demo` and `make test`; no unit test reads it",
}
"""Entries of the repository root left out of ./mutants, with the reason."""
PYTHON_M_PYTEST = ("-m", "pytest")
"""Two arguments of a command line that runs pytest (module-level: in a function, the scan below
would take this tuple for a command line)."""


def pyproject() -> dict[str, object]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def mutmut_config() -> dict[str, list[str]]:
    tool = pyproject()["tool"]
    assert isinstance(tool, dict)
    config: dict[str, list[str]] = tool["mutmut"]
    return config


def selected_by_mutmut(marks: set[str]) -> bool:
    """Whether the `-m` expression of mutmut's pytest arguments selects a test with these marks
    (pytest uses the last `-m`; without one every test is selected)."""
    args = [str(arg) for arg in mutmut_config()["pytest_add_cli_args"]]
    expressions = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-m"]
    if not expressions:
        return True

    def matcher(name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in marks and not kwargs

    return Expression.compile(expressions[-1]).evaluate(matcher)


def _constants(node: ast.List | ast.Tuple) -> list[object]:
    return [elt.value if isinstance(elt, ast.Constant) else None for elt in node.elts]


def starts_pytest(node: ast.AST) -> bool:
    """`node` builds a command line running pytest (`python -m pytest ...`, `pytest ...`) or
    takes the `pytester` fixture."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.List | ast.Tuple):
            values = _constants(sub)
            if tuple(values[:1]) == PYTHON_M_PYTEST[1:] or PYTHON_M_PYTEST in pairwise(values):
                return True
        if isinstance(sub, ast.arg) and sub.arg in ("pytester", "testdir"):
            return True
    return False


def mark_names(decorators: list[ast.expr]) -> set[str]:
    """The NAMEs of `pytest.mark.NAME` and `pytest.mark.NAME(...)` among `decorators`."""
    names = set()
    for decorator in decorators:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Attribute)
            and target.value.attr == "mark"
        ):
            names.add(target.attr)
    return names


def module_marks(tree: ast.Module) -> set[str]:
    """The marks of a module-level `pytestmark = pytest.mark.X` or `= [pytest.mark.X, ...]`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            value = node.value
            return mark_names(list(value.elts) if isinstance(value, ast.List) else [value])
    return set()


def inner_pytest_tests(path: Path) -> dict[str, set[str]]:
    """The test functions of one file that start a pytest of their own (directly or through a
    function of the same module), with their marks."""
    tree = ast.parse(path.read_text(), filename=str(path))
    functions = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    helpers = {f.name for f in functions if not f.name.startswith("test") and starts_pytest(f)}
    found = {}
    for function in functions:
        if not function.name.startswith("test"):
            continue
        calls_helper = any(
            isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in helpers
            for sub in ast.walk(function)
        )
        if starts_pytest(function) or calls_helper:
            found[function.name] = mark_names(function.decorator_list) | module_marks(tree)
    return found


def mutated_test_files() -> list[Path]:
    """The test files of mutmut's runs (`pytest_add_cli_args_test_selection`)."""
    files: list[Path] = []
    for selection in mutmut_config()["pytest_add_cli_args_test_selection"]:
        files += sorted((REPO_ROOT / selection).rglob("test_*.py"))
    return files


def test_every_test_that_starts_a_pytest_of_its_own_is_left_out_of_mutation_runs() -> None:
    found = {
        f"{path.relative_to(REPO_ROOT)}::{name}": marks
        for path in mutated_test_files()
        for name, marks in inner_pytest_tests(path).items()
    }
    # The scan finds the one such test there is today, so it is not looking past them.
    assert (
        "tests/unit/test_cluster_dir.py::test_announce_is_shown_while_fixture_output_is_captured"
        in found
    )
    kept = sorted(test for test, marks in found.items() if selected_by_mutmut(marks))
    assert kept == [], f"mark these @pytest.mark.{MARK}: {kept}"


def test_mutation_runs_keep_the_unmarked_tests() -> None:
    assert selected_by_mutmut(set())
    assert not selected_by_mutmut({MARK})


def test_the_mark_is_registered() -> None:
    tool = pyproject()["tool"]
    assert isinstance(tool, dict)
    markers = tool["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith(f"{MARK}:") for marker in markers)


@pytest.mark.parametrize(
    ("source", "starts"),
    [
        ('run([sys.executable, "-m", "pytest", "-q"])', True),
        ('run(["pytest", "-x"])', True),
        ('run([sys.executable, "-m", "scheduler.cli"])', False),
        ('run([sys.executable, "-m", "hack.fake_dcgm"])', False),
    ],
)
def test_the_scan_recognises_a_pytest_command_line(source: str, starts: bool) -> None:
    assert starts_pytest(ast.parse(source)) is starts


def tracked_root_entries() -> set[str]:
    """The first path component of every file git tracks. Skips outside a git checkout, and in
    ./mutants itself (the tests' root there is not the checkout's)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    top = subprocess.run(
        [git, "rev-parse", "--show-toplevel"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO_ROOT:
        pytest.skip(f"{REPO_ROOT} is not the top of a git checkout")
    files = subprocess.run(
        [git, "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {name.split("/")[0] for name in files.split("\0") if name}


def test_the_mutants_copy_holds_every_root_entry_but_the_unneeded() -> None:
    config = mutmut_config()
    copied = {
        Path(entry).parts[0] for entry in [*config["source_paths"], *config["also_copy"]]
    } | MUTMUT_COPIES
    tracked = tracked_root_entries()
    assert {"scheduler", "tests", "Dockerfile", "README.md"} <= tracked
    missing = sorted(tracked - copied - NOT_COPIED.keys())
    assert missing == [], f"add to [tool.mutmut] also_copy (or to NOT_COPIED, with why): {missing}"
    assert not copied & NOT_COPIED.keys()
