"""Live allocations of tracemalloc snapshots, grouped by where they were made.

A snapshot holds every live block traced by `tracemalloc` with the stack (up to the frame depth
given to `tracemalloc.start`) that allocated it. Three groupings answer "what holds the memory":

- `by_package`: the package of the innermost Python frame (`package_of` of `memory_imports`).
  C code has no frame of its own: the dicts orjson builds while `Informer._list` decodes a page
  are charged to the line that called orjson, in `scheduler.kube`;
- `by_project_frame`: the innermost frame inside this repository (`scheduler/`, `topology/`,
  `reclaim/`, `metrics/`), file and line: which of our lines made (or had a library make) the
  block; blocks with no such frame within the traced depth are "(no project frame)";
- `by_line`: the innermost frame, file and line.

`growth` compares two groupings of the same kind (what was allocated between two snapshots and
is still alive). Paths are shortened to the part after `site-packages/`, after the repository
root, or after `lib/pythonX.Y/`.

numpy reports its array buffers to tracemalloc, so they are counted; memory that C libraries
allocate without telling Python (aiohttp's and OpenSSL's buffers, cel-cpp) is not: a snapshot's
total is less than the RSS growth, and the gap is reported beside it, never hidden.
"""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hack.bench.memory_imports import PROJECT_PACKAGES, package_of

REPO_ROOT = Path(__file__).resolve().parents[2]
NO_PROJECT_FRAME = "(no project frame)"
SCHEDULER_PACKAGES = tuple(name for name in PROJECT_PACKAGES if name != "hack")
"""Packages whose frames `by_project_frame` looks for (the daemon's code, not the harness)."""
_STDLIB_RE = re.compile(r".*/lib/python3\.\d+/")


def short_path(filename: str) -> str:
    """`filename` without the installation's prefix (see the module docstring)."""
    if "/site-packages/" in filename:
        return filename.rpartition("/site-packages/")[2]
    root = f"{REPO_ROOT}/"
    if filename.startswith(root):
        return filename[len(root) :]
    return _STDLIB_RE.sub("", filename, count=1)


def module_of(filename: str) -> str:
    """The dotted module name a shortened path stands for (`a/b/__init__.py` -> `a.b`); frozen
    and synthetic file names (`<frozen importlib._bootstrap>`) are returned as they are."""
    path = short_path(filename)
    if path.startswith("<"):
        return path
    dotted = path.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


@dataclass(frozen=True)
class Site:
    """Bytes and blocks alive, or their growth between two snapshots, under one key."""

    key: str
    size: int
    count: int


Grouping = dict[str, tuple[int, int]]
"""key -> (bytes, blocks)."""


def group(
    statistics: Iterable[tuple[tracemalloc.Traceback, int, int]],
    key_of: Callable[[tracemalloc.Traceback], str],
) -> Grouping:
    """(traceback, bytes, blocks) triples summed by `key_of(traceback)`."""
    totals: Grouping = {}
    for traceback, size, count in statistics:
        key = key_of(traceback)
        size0, count0 = totals.get(key, (0, 0))
        totals[key] = (size0 + size, count0 + count)
    return totals


def per_traceback(snapshot: tracemalloc.Snapshot) -> list[tuple[tracemalloc.Traceback, int, int]]:
    """The snapshot's live blocks summed per distinct traceback."""
    return [(stat.traceback, stat.size, stat.count) for stat in snapshot.statistics("traceback")]


def package_key(traceback: tracemalloc.Traceback) -> str:
    return package_of(module_of(traceback[-1].filename))


def project_frame_key(traceback: tracemalloc.Traceback) -> str:
    for frame in reversed(traceback):
        path = short_path(frame.filename)
        if path.split("/", 1)[0] in SCHEDULER_PACKAGES:
            return f"{path}:{frame.lineno}"
    return NO_PROJECT_FRAME


def line_key(traceback: tracemalloc.Traceback) -> str:
    frame = traceback[-1]
    return f"{short_path(frame.filename)}:{frame.lineno}"


GROUPINGS: Mapping[str, Callable[[tracemalloc.Traceback], str]] = {
    "package": package_key,
    "project frame": project_frame_key,
    "line": line_key,
}
"""The groupings of the module docstring, by name."""


def growth(before: Grouping, after: Grouping) -> list[Site]:
    """Per key, `after` minus `before` (keys of either), the largest growth first (ties by
    key); keys that neither grew nor shrank are left out."""
    sites = []
    for key in before.keys() | after.keys():
        size0, count0 = before.get(key, (0, 0))
        size1, count1 = after.get(key, (0, 0))
        if size1 != size0 or count1 != count0:
            sites.append(Site(key, size1 - size0, count1 - count0))
    return sorted(sites, key=lambda site: (-site.size, site.key))


def snapshot_groupings(path: Path) -> dict[str, Grouping]:
    """Every grouping of `GROUPINGS` of the snapshot dumped at `path`."""
    statistics = per_traceback(tracemalloc.Snapshot.load(str(path)))
    return {name: group(statistics, key_of) for name, key_of in GROUPINGS.items()}
