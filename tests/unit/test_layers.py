"""The import layers hold: every arrow points down, no module or package imports itself back,
no private name crosses a module line, and every package says what it is for; and the size
rules: no module of `scheduler/` over 600 lines, no constructor over six parameters.

Reads every module's imports (also those inside functions) with `ast`, so a violation is caught
without importing anything. The layers of `scheduler/`, lowest first (a module may import its
own package and any package listed before it):

    scheduler.config, scheduler.logging   settings and log set-up: import no other layer
    scheduler.model        parsing API objects into the scheduler's records (no I/O)
    scheduler.kube         adapters to the API server (every request goes through here)
    scheduler.state        the cluster cache and the context the daemon's parts share
    scheduler.framework    extension-point contracts, the snapshot, the plugin runner
    scheduler.plugins      filter and score plugins
    scheduler.gangs        the gang model and gang planning
    scheduler.victims      who may be evicted: preemption, PDBs, gangs, Kueue (decisions)
    scheduler.postfilter   what runs when no node fits: idle reclaim, preemption (enforcement)
    scheduler.core         the loop: queue, cycle and binding, handlers, profile, periodic tasks
    scheduler.admission    admission webhooks
    scheduler.tools        offline and operator tools of the command line
    scheduler.daemon       the composition root
    scheduler.cli          the command line

Below all of `scheduler`: `metrics`, `reclaim` (policy and usage, may use `metrics`), and
`topology` at the bottom.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "topology", "reclaim", "metrics")
SUPPORT = ("hack", "tests")
"""Packages outside the layers that the private-name rule covers too."""

SCHEDULER_LAYERS: tuple[tuple[str, ...], ...] = (
    ("scheduler.config", "scheduler.logging"),
    ("scheduler.model",),
    ("scheduler.dra",),
    ("scheduler.kube",),
    ("scheduler.state",),
    ("scheduler.framework",),
    ("scheduler.plugins",),
    ("scheduler.gangs",),
    ("scheduler.victims",),
    ("scheduler.postfilter",),
    ("scheduler.core",),
    ("scheduler.admission",),
    ("scheduler.tools",),
    ("scheduler.daemon",),
    ("scheduler.cli",),
)
"""The sub-packages (and top modules) of `scheduler`, lowest first; see the module docstring."""

ROOT_IMPORTS = ("scheduler.kube.lazy_client",)
"""What `scheduler/__init__.py` itself may import: it runs before every other module of the
package, and the generated client's classes must be deferred before anything imports them."""

MAX_MODULE_LINES = 600
MAX_CONSTRUCTOR_PARAMETERS = 6


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement of `source`, at any depth."""
    tree = ast.parse(source)
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports anywhere in its body (`from m import x` counts
    as importing `m.x` when that is a module, else `m`)."""
    names: set[str] = set()
    for node in imports_of(path.read_text()):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in known else node.module)
    return names & known


def project_paths() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def project_imports() -> dict[str, set[str]]:
    """Module -> the project's modules it imports."""
    paths = project_paths()
    known = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, known) for path in paths}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_of(module: str) -> int | None:
    """The index in `SCHEDULER_LAYERS` of the layer `module` belongs to (None: not in one)."""
    for index, layer in enumerate(SCHEDULER_LAYERS):
        if any(within(module, unit) for unit in layer):
            return index
    return None


def unit_of(module: str) -> str:
    """The package (or top module) of `SCHEDULER_LAYERS` that holds `module`, else `module`'s
    top-level package."""
    for layer in SCHEDULER_LAYERS:
        for unit in layer:
            if within(module, unit):
                return unit
    return module.split(".")[0]


def violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
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
    if top != "scheduler" or not within(target, "scheduler") or target == "scheduler":
        return ""
    if module == "scheduler" and target in ROOT_IMPORTS:
        return ""
    mine, theirs = layer_of(module), layer_of(target)
    if mine is None or theirs is None:
        loose = module if mine is None else target
        return f"{loose} belongs to no layer of SCHEDULER_LAYERS"
    if theirs > mine:
        return f"{unit_of(target)} sits above {unit_of(module)}"
    if theirs == mine and unit_of(target) != unit_of(module):
        return f"{unit_of(module)} and {unit_of(target)} share a layer and import neither"
    return ""


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import circles of `graph`: every strongly connected component of more than one
    node, or a node that imports itself (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = itertools.count()

    def visit(node: str) -> None:
        index[node] = low[node] = next(counter)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def package_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Module imports lifted to the units of `unit_of` (sub-packages of `scheduler`, the other
    top-level packages), without arrows inside one unit."""
    lifted: dict[str, set[str]] = {}
    for module, imports in graph.items():
        source = unit_of(module)
        for target in imports:
            if unit_of(target) != source:
                lifted.setdefault(source, set()).add(unit_of(target))
    return lifted


def private_imports(sources: Iterable[tuple[str, str]]) -> list[str]:
    """`from <project module> import _name` in any (module name, source) of `sources`: a
    private name used across a module line."""
    found = []
    for module, source in sources:
        for node in imports_of(source):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            if node.module.split(".")[0] not in (*PACKAGES, *SUPPORT):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{module} imports {node.module}.{alias.name}")
    return found


def long_constructors(source: str, module: str) -> list[str]:
    """`Class.__init__` methods of `source` that take more than `MAX_CONSTRUCTOR_PARAMETERS`
    parameters (self not counted; *args and **kwargs count one each)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args
                count = len(args.posonlyargs) + len(args.args) - 1 + len(args.kwonlyargs)
                count += (args.vararg is not None) + (args.kwarg is not None)
                if count > MAX_CONSTRUCTOR_PARAMETERS:
                    found.append(f"{module}.{node.name}: {count} parameters")
    return found


def test_the_layers_hold() -> None:
    graph = project_imports()
    assert len(graph) > 40  # the walk really read the packages
    assert violations(graph) == []


def test_no_module_and_no_package_imports_itself_back() -> None:
    graph = project_imports()
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == []


def test_no_private_name_crosses_a_module_line() -> None:
    paths = [*project_paths(), *(p for top in SUPPORT for p in sorted((ROOT / top).rglob("*.py")))]
    sources = [(module_name(path), path.read_text()) for path in paths]
    assert private_imports(sources) == []


def test_every_package_opens_with_a_docstring_saying_its_role() -> None:
    missing = []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            if not doc or len(doc) < 40:
                missing.append(module_name(init))
    assert missing == []


def test_no_module_of_scheduler_is_longer_than_the_limit() -> None:
    long = {
        module_name(path): count
        for path in sorted((ROOT / "scheduler").rglob("*.py"))
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_constructor_takes_more_than_six_parameters() -> None:
    found = [
        line
        for path in sorted((ROOT / "scheduler").rglob("*.py"))
        for line in long_constructors(path.read_text(), module_name(path))
    ]
    assert found == []


def test_the_constructor_check_counts_every_kind_of_parameter() -> None:
    source = (
        "class Wide:\n"
        "    def __init__(self, a, b, c, /, d, e, *rest, f, **more): ...\n"
        "class Narrow:\n"
        "    def __init__(self, a, b, c, d, e, f): ...\n"
    )
    assert long_constructors(source, "m") == ["m.Wide: 8 parameters"]


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("reclaim.usage", "scheduler.state.cache"),
        ("topology.scoring", "reclaim.usage"),
        ("metrics.server", "reclaim.policy"),
        ("scheduler.kube.binding", "scheduler.state.cache"),
        ("scheduler.model.objects", "scheduler.kube.events"),
        ("scheduler.state.cache", "scheduler.framework.snapshot"),
        ("scheduler.framework.runtime", "scheduler.plugins.nvlink"),
        ("scheduler.plugins.nvlink", "scheduler.gangs.planning"),
        ("scheduler.gangs.planning", "scheduler.victims.gangs"),
        ("scheduler.victims.candidates", "scheduler.postfilter.reclaim"),
        ("scheduler.postfilter.reclaim", "scheduler.core.cycle"),
        ("scheduler.core.cycle", "scheduler.tools.explain"),
        ("scheduler.postfilter.reclaim", "scheduler.daemon"),
        ("scheduler.tools.explain", "scheduler.cli"),
        ("scheduler.config", "scheduler.logging"),
        ("scheduler.loose", "scheduler.model.objects"),
    ],
)
def test_each_rule_catches_an_upward_import(module: str, target: str) -> None:
    assert broken_rule(module, target)


def test_downward_imports_are_allowed() -> None:
    for module, target in [
        ("scheduler.core.cycle", "scheduler.kube.binding"),
        ("scheduler.kube.leader", "scheduler.config"),
        ("scheduler.kube.binding", "scheduler.model.objects"),
        ("scheduler.postfilter.reclaim", "reclaim.usage"),
        ("scheduler.victims.candidates", "scheduler.gangs.tracker"),
        ("scheduler.core.cycle", "scheduler.core.queue"),
        ("scheduler.cli", "scheduler.tools.explain"),
        ("reclaim.replay", "reclaim.usage"),
    ]:
        assert broken_rule(module, target) == ""


def test_the_circle_check_finds_circles_of_modules_and_of_packages() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    modules = {
        "scheduler.core.cycle": {"scheduler.gangs.planning"},
        "scheduler.gangs.planning": {"scheduler.core.queue"},
    }
    assert cycles(package_graph(modules)) == [["scheduler.core", "scheduler.gangs"]]


def test_the_private_name_check_finds_one() -> None:
    source = (
        "from scheduler.model.objects import PodInfo, _helper\n"
        "from scheduler import __doc__\n"
        "from os import _exit\n"
        "def late():\n"
        "    from reclaim.usage import _inner\n"
    )
    assert private_imports([("scheduler.core.example", source)]) == [
        "scheduler.core.example imports scheduler.model.objects._helper",
        "scheduler.core.example imports reclaim.usage._inner",
    ]
