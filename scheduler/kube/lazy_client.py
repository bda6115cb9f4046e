"""kubernetes_asyncio with its generated API and model classes loaded when first used.

The package's `__init__` modules import every class the client generates: `kubernetes_asyncio`
imports `.client`, `.config`, `.watch` and the rest; `kubernetes_asyncio.client`,
`.client.api` and `.client.models` import every API class (137) and every model (about 700):
861 modules and 32 MiB of resident memory (`python -m hack.bench.memory imports`). The daemon
uses ten API classes, reads raw JSON (`_preload_content=False`) almost everywhere, and
deserializes a few models (the Lease).

`defer_generated_client()` puts those four packages into `sys.modules` as modules whose
`__init__` is read but not run: each name it would bind (`from M import N [as A]`,
`import M as A`) is imported from the same module `M` on first access (a module `__getattr__`,
PEP 562), and its literal assignments (`__version__`, `__all__`) are kept. `client.CoreV1Api`
is the class it always was, loaded with its module when first asked for; submodules import as
before (the packages keep their `__path__`); the model classes that `ApiClient.deserialize`
looks up by name in `kubernetes_asyncio.client.models` are loaded one by one as responses need
them.

Nothing changes when kubernetes_asyncio was imported before the call (the call returns False),
and nothing is deferred when one of the four `__init__` files holds any statement besides those
imports, literal assignments and strings (a later release that does more at import time is
imported the usual way).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = "kubernetes_asyncio"
DEFERRED_PACKAGES = (ROOT, f"{ROOT}.client", f"{ROOT}.client.api", f"{ROOT}.client.models")
"""The packages whose `__init__` is replaced, parents first."""


class NotDeferrable(ValueError):
    """An `__init__` holds a statement `bound_names` does not understand."""


def bound_names(source: str) -> tuple[dict[str, tuple[str, str | None]], dict[str, Any]]:
    """What a package `__init__` of the generated client binds, without running it: name ->
    (module, attribute of it, or None for the module itself), and name -> literal value.
    Raises `NotDeferrable` on any other statement."""
    imports: dict[str, tuple[str, str | None]] = {}
    literals: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    raise NotDeferrable(f"from {node.module} import *")
                imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import) and all(alias.asname for alias in node.names):
            for alias in node.names:
                imports[str(alias.asname)] = (alias.name, None)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                literals[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError as error:
                raise NotDeferrable(f"line {node.lineno}: not a literal") from error
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise NotDeferrable(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__}")
    return imports, literals


def deferred_package(
    name: str, init: Path, imports: dict[str, tuple[str, str | None]], literals: dict[str, Any]
) -> ModuleType:
    """The package `name` (its `__init__` at `init`) binding `literals` at once and each name
    of `imports` when first read."""
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None  # a file location always gives a spec
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(literals)

    def __getattr__(attribute: str) -> Any:
        try:
            source, member = imports[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None
        value: Any = importlib.import_module(source)
        if member is not None:
            value = getattr(value, member)
        setattr(module, attribute, value)
        return value

    def __dir__() -> list[str]:
        return sorted(module.__dict__.keys() | imports.keys())

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)
    return module


def defer_generated_client() -> bool:
    """Install the deferred packages (see the module docstring); True when installed."""
    if ROOT in sys.modules:
        return False
    root = importlib.util.find_spec(ROOT)
    if root is None or not root.submodule_search_locations:
        return False
    base = Path(next(iter(root.submodule_search_locations)))
    modules: list[ModuleType] = []
    for name in DEFERRED_PACKAGES:
        init = base.joinpath(*name.split(".")[1:], "__init__.py")
        try:
            imports, literals = bound_names(init.read_text())
        except (OSError, SyntaxError, NotDeferrable):
            return False
        modules.append(deferred_package(name, init, imports, literals))
    for module in modules:
        sys.modules[module.__name__] = module
        parent, _, child = module.__name__.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return True
