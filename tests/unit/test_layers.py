"""The import layers of scheduler/__init__.py hold: every arrow points down.

Reads every module's imports (also those inside functions) with `ast`, so a violation is caught
without importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "topology", "reclaim", "metrics")

LEAVES = {
    "scheduler.config",
    "scheduler.model.objects",
    "scheduler.model.quantity",
    "scheduler.logging",
}
"""Modules of `scheduler` that import no other layer of it; any layer may use them."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports anywhere in its body (`from m import x` counts
    as importing `m.x` when that is a module, else `m`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in known else node.module)
    return names & known


def project_imports() -> dict[str, set[str]]:
    """Module -> the project's modules it imports."""
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    known = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, known) for path in paths}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(graph: dict[str, set[str]]) -> list[str]:
    found: list[str] = []
    for module, imports in sorted(graph.items()):
        for target in sorted(imports):
            rule = broken_rule(module, target)
            if rule:
                found.append(f"{module} imports {target}: {rule}")
    return found


def broken_rule(module: str, target: str) -> str:
    """Why `module` may not import `target` ("" when it may)."""
    top = module.split(".")[0]
    if top in ("reclaim", "topology", "metrics") and within(target, "scheduler"):
        return f"{top} sits below scheduler"
    if top == "topology" and target.split(".")[0] in ("reclaim", "metrics"):
        return "topology is the bottom layer"
    if top == "metrics" and within(target, "reclaim"):
        return "metrics does not depend on reclaim"
    if (
        within(module, "scheduler.kube")
        and within(target, "scheduler")
        and not within(target, "scheduler.kube")
        and target not in LEAVES
        and target != "scheduler"
    ):
        return "scheduler.kube adapts the API server and imports no scheduling core"
    if within(target, "scheduler.tools") and not (
        within(module, "scheduler.tools") or module == "scheduler.cli"
    ):
        return "only the command line uses the offline tools"
    if within(target, "scheduler.daemon") and module not in ("scheduler.cli", "scheduler.daemon"):
        return "the daemon is the composition root"
    if within(target, "scheduler.cli") and module != "scheduler.cli":
        return "the command line is the top"
    return ""


def test_the_layers_hold() -> None:
    graph = project_imports()
    assert len(graph) > 40  # the walk really read the packages
    assert violations(graph) == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("reclaim.usage", "scheduler.state.cache"),
        ("topology.scoring", "reclaim.usage"),
        ("metrics.server", "reclaim.policy"),
        ("scheduler.kube.binding", "scheduler.state.cache"),
        ("scheduler.core.cycle", "scheduler.tools.explain"),
        ("scheduler.postfilter.reclaim", "scheduler.daemon"),
    ],
)
def test_each_rule_catches_an_upward_import(module: str, target: str) -> None:
    assert broken_rule(module, target)


def test_downward_imports_are_allowed() -> None:
    for module, target in [
        ("scheduler.core.cycle", "scheduler.kube.binding"),
        ("scheduler.kube.leader", "scheduler.config"),
        ("scheduler.postfilter.reclaim", "reclaim.usage"),
        ("scheduler.cli", "scheduler.tools.explain"),
        ("reclaim.replay", "reclaim.usage"),
    ]:
        assert broken_rule(module, target) == ""
