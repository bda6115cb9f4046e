"""The import costs that `memory_child` measures, per package, and who pulled each package in.

RSS counts pages, not objects: a module that frees memory (a parsed file, a temporary list) may
leave pages that a later module reuses, so a small cost can land on the module after the one
that caused it, and amounts below a page (4 KiB) read as 0. The figures are for one process that
imported the same modules in the same order: a module imported earlier costs nothing later.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from hack.bench.memory_child import ImportCost

PROJECT_PACKAGES = ("scheduler", "topology", "reclaim", "metrics", "hack")
"""Top-level packages of this repository: grouped by their sub-package (`scheduler.kube`)."""
STANDARD_LIBRARY = "(standard library)"
"""The package name `package_of` gives every module of Python's standard library."""


def package_of(module: str) -> str:
    """The group a module's cost is reported under: a project module's sub-package
    (`scheduler.kube.informer` -> `scheduler.kube`), `STANDARD_LIBRARY` for Python's own
    modules, else the top-level name of the distribution's package (`kubernetes_asyncio`)."""
    parts = module.split(".")
    if parts[0] in PROJECT_PACKAGES:
        return ".".join(parts[:2])
    if parts[0] in sys.stdlib_module_names or parts[0] in sys.builtin_module_names:
        return STANDARD_LIBRARY
    return parts[0]


@dataclass(frozen=True)
class PackageCost:
    """Exclusive RSS growth of one `package_of` group, its modules loaded, and the module that
    first asked for one of them (with that module's own group)."""

    package: str
    exclusive: int
    modules: int
    first_importer: str


def by_package(costs: Iterable[ImportCost]) -> list[PackageCost]:
    """`costs` grouped by `package_of`, the largest first (ties by name)."""
    totals: dict[str, list[int]] = {}
    first: dict[str, str] = {}
    for cost in sorted(costs, key=lambda cost: cost.started):
        package = package_of(cost.module)
        total = totals.setdefault(package, [0, 0])
        total[0] += cost.exclusive
        total[1] += 1
        first.setdefault(package, cost.importer)
    return sorted(
        (
            PackageCost(name, exclusive, count, first[name])
            for name, (exclusive, count) in totals.items()
        ),
        key=lambda cost: (-cost.exclusive, cost.package),
    )


@dataclass(frozen=True)
class ImportTime:
    """`python -X importtime` figures of one `package_of` group, in microseconds."""

    package: str
    self_us: int
    modules: int


def importtime_by_package(stderr: str) -> list[ImportTime]:
    """The self times of `python -X importtime`'s lines ("import time: self | cumulative |
    name") summed by `package_of`, the largest first; other lines are ignored."""
    totals: dict[str, list[int]] = {}
    for line in stderr.splitlines():
        head, _, rest = line.partition(":")
        if head != "import time":
            continue
        cells = [cell.strip() for cell in rest.split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue  # the header line
        total = totals.setdefault(package_of(cells[2]), [0, 0])
        total[0] += int(cells[0])
        total[1] += 1
    return sorted(
        (ImportTime(name, us, count) for name, (us, count) in totals.items()),
        key=lambda cost: (-cost.self_us, cost.package),
    )
