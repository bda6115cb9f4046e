"""The memory benchmark's parts that need no cluster: the import meter's arithmetic on a made-up
package tree, the grouping by package, `-X importtime` parsing, tracemalloc grouping, the phase
report, `--tree` checking, and the import measurement of this checkout in a fresh interpreter
(no figure asserted beyond what must hold)."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.bench import memory, memory_sites
from hack.bench.memory_child import PHASES, ImportCost, ImportMeter, PhaseRecorder
from hack.bench.memory_imports import (
    STANDARD_LIBRARY,
    by_package,
    importtime_by_package,
    package_of,
)
from hack.bench.memory_runtime import phase_cells
from hack.bench.memory_sites import NO_PROJECT_FRAME, Site, growth, module_of, short_path

GROWTH = {"fakepkg": 1000, "fakepkg.a": 200, "fakepkg.b": 30, "fakepkg.b.c": 4, "otherpkg": 50000}
"""Bytes of 'RSS' each made-up module adds while its own body runs."""


@pytest.fixture
def fake_packages(tmp_path: Path) -> Iterator[list[int]]:
    """Packages whose modules add `GROWTH` to a counter (the meter's RSS; yielded) as they run:
    fakepkg imports fakepkg.a and fakepkg.b; fakepkg.b imports fakepkg.b.c and otherpkg."""
    bodies = {
        "fakepkg/__init__.py": "import fakepkg.a\nimport fakepkg.b\n",
        "fakepkg/a.py": "",
        "fakepkg/b/__init__.py": "import fakepkg.b.c\nimport otherpkg\n",
        "fakepkg/b/c.py": "",
        "otherpkg/__init__.py": "",
    }
    (tmp_path / "fakecounter.py").write_text("value = [0]\n")
    for path, body in bodies.items():
        file = tmp_path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        file.write_text(f"import fakecounter\nfakecounter.value[0] += {GROWTH[module]}\n{body}")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("fakecounter").value
    finally:
        sys.path.remove(str(tmp_path))
        for name in list(sys.modules):
            if name.split(".")[0] in ("fakepkg", "otherpkg", "fakecounter"):
                del sys.modules[name]


def test_the_meter_splits_growth_into_exclusive_costs(fake_packages: list[int]) -> None:
    with ImportMeter(read_rss=lambda: fake_packages[0]) as meter:
        __import__("fakepkg")
    costs = {cost.module: cost for cost in meter.costs}
    assert set(costs) == set(GROWTH)
    assert {name: cost.exclusive for name, cost in costs.items()} == GROWTH
    assert costs["fakepkg"].inclusive == sum(GROWTH.values())
    assert costs["fakepkg.b"].inclusive == 30 + 4 + 50000
    assert costs["otherpkg"].importer == "fakepkg.b"
    assert costs["fakepkg"].importer == ""
    started = sorted(costs.values(), key=lambda cost: cost.started)
    assert [cost.module for cost in started] == [
        "fakepkg",
        "fakepkg.a",
        "fakepkg.b",
        "fakepkg.b.c",
        "otherpkg",
    ]


def test_the_meter_restores_the_import_system(fake_packages: list[int]) -> None:
    import importlib._bootstrap as bootstrap

    before = bootstrap._find_and_load  # type: ignore[attr-defined]
    with ImportMeter(read_rss=lambda: fake_packages[0]):
        pass
    assert bootstrap._find_and_load is before  # type: ignore[attr-defined]


def test_by_package_sums_exclusive_costs_and_names_the_first_importer() -> None:
    costs = [
        ImportCost("scheduler.kube.client", 0, 10, "scheduler.cli", started=3),
        ImportCost("aiohttp.client", 0, 300, "aiohttp", started=2),
        ImportCost("aiohttp", 500, 200, "scheduler.kube.client", started=1),
        ImportCost("json.decoder", 0, 7, "json", started=4),
        ImportCost("scheduler.kube.informer", 0, 5, "scheduler.daemon", started=5),
    ]
    found = {cost.package: cost for cost in by_package(costs)}
    assert list(found) == ["aiohttp", "scheduler.kube", STANDARD_LIBRARY]
    assert (found["aiohttp"].exclusive, found["aiohttp"].modules) == (500, 2)
    assert found["aiohttp"].first_importer == "scheduler.kube.client"
    assert found["scheduler.kube"].first_importer == "scheduler.cli"


@pytest.mark.parametrize(
    ("module", "package"),
    [
        ("scheduler.kube.informer", "scheduler.kube"),
        ("scheduler", "scheduler"),
        ("topology.scoring", "topology.scoring"),
        ("asyncio.sslproto", STANDARD_LIBRARY),
        ("_ssl", STANDARD_LIBRARY),
        ("kubernetes_asyncio.client.api.core_v1_api", "kubernetes_asyncio"),
    ],
)
def test_package_of(module: str, package: str) -> None:
    assert package_of(module) == package


def test_importtime_lines_are_summed_by_package() -> None:
    stderr = textwrap.dedent(
        """\
        import time: self [us] | cumulative | imported package
        import time:       100 |        100 |   _io
        import time:      2000 |       2500 |     aiohttp.client
        import time:       500 |       3000 |   aiohttp
        something else
        import time:        40 |         40 | scheduler.kube.informer
        """
    )
    found = [(cost.package, cost.self_us, cost.modules) for cost in importtime_by_package(stderr)]
    assert found == [
        ("aiohttp", 2500, 2),
        (STANDARD_LIBRARY, 100, 1),
        ("scheduler.kube", 40, 1),
    ]


def test_paths_are_shortened_to_their_package() -> None:
    assert short_path("/x/venv/lib/python3.11/site-packages/aiohttp/client.py") == (
        "aiohttp/client.py"
    )
    assert short_path(str(memory.REPO_ROOT / "scheduler" / "daemon.py")) == "scheduler/daemon.py"
    assert short_path("/usr/lib/python3.11/asyncio/sslproto.py") == "asyncio/sslproto.py"
    assert module_of("/v/lib/python3.11/site-packages/kubernetes_asyncio/__init__.py") == (
        "kubernetes_asyncio"
    )
    assert module_of("<frozen importlib._bootstrap>") == "<frozen importlib._bootstrap>"


def _allocate_in_scheduler_frame() -> list[bytearray]:
    return [bytearray(4096) for _ in range(50)]


def test_groupings_find_the_allocating_lines() -> None:
    here = f"{Path(__file__).resolve()}"
    traceback = tracemalloc.Traceback(
        (
            ("/v/lib/python3.11/site-packages/orjson/__init__.py", 3),
            (f"{memory.REPO_ROOT}/scheduler/kube/informer.py", 70),
            (here, 10),
        )
    )
    assert memory_sites.line_key(traceback) == "orjson/__init__.py:3"
    assert memory_sites.package_key(traceback) == "orjson"
    assert memory_sites.project_frame_key(traceback) == "scheduler/kube/informer.py:70"
    alone = tracemalloc.Traceback(((here, 10),))
    assert memory_sites.project_frame_key(alone) == NO_PROJECT_FRAME
    totals = memory_sites.group(
        [(traceback, 100, 2), (alone, 5, 1), (traceback, 1, 1)], memory_sites.line_key
    )
    assert totals == {
        "orjson/__init__.py:3": (101, 3),
        "tests/unit/test_bench_memory_pure.py:10": (5, 1),
    }


def test_a_real_snapshot_charges_the_allocating_line(tmp_path: Path) -> None:
    tracemalloc.start(4)
    try:
        kept = _allocate_in_scheduler_frame()
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    path = tmp_path / "s.tracemalloc"
    snapshot.dump(str(path))
    groupings = memory_sites.snapshot_groupings(path)
    assert set(groupings) == set(memory_sites.GROUPINGS)
    line = _allocate_in_scheduler_frame.__code__.co_firstlineno + 1
    size, count = groupings["line"][f"tests/unit/test_bench_memory_pure.py:{line}"]
    assert count >= len(kept) and size >= 4096 * len(kept)


def test_growth_lists_what_changed_largest_first() -> None:
    before = {"a": (100, 1), "b": (50, 5), "same": (7, 7)}
    after = {"a": (400, 3), "b": (10, 1), "same": (7, 7), "new": (200, 2)}
    assert growth(before, after) == [Site("a", 300, 2), Site("new", 200, 2), Site("b", -40, -4)]


def test_the_recorder_writes_each_phase_and_stops_at_the_last(tmp_path: Path) -> None:
    report = tmp_path / "daemon.json"
    recorder = PhaseRecorder(report)
    recorder.record(PHASES[0])
    for _ in range(len(PHASES) + 2):
        recorder.on_signal(0, None)
    phases = json.loads(report.read_text())["phases"]
    assert [p["phase"] for p in phases] == list(PHASES)
    assert all(0 < p["rss_mib"] <= p["hwm_mib"] and p["snapshot"] is None for p in phases)


def test_a_traced_phase_dumps_a_snapshot(tmp_path: Path) -> None:
    report = tmp_path / "daemon.json"
    tracemalloc.start(2)
    try:
        PhaseRecorder(report).record("imported")
    finally:
        tracemalloc.stop()
    [phase] = json.loads(report.read_text())["phases"]
    assert phase["traced_mib"] > 0
    assert Path(phase["snapshot"]).is_file()


def test_trees_must_name_a_checkout(tmp_path: Path) -> None:
    assert memory.trees_of([]) == [(memory.THIS_TREE, memory.REPO_ROOT)]
    assert memory.trees_of([f"again:{memory.REPO_ROOT}"])[1] == ("again", memory.REPO_ROOT)
    for spec in ("no-label", ":path", f"empty:{tmp_path}"):
        with pytest.raises(ValueError, match="--tree"):
            memory.trees_of([spec])


def test_the_imports_of_this_checkout_are_measured_in_a_fresh_interpreter() -> None:
    report = memory.measure_imports(memory.trees_of([]))
    [tree] = report["trees"]
    assert [step["step"] for step in tree["steps"]] == [
        "import scheduler.cli",
        "build its parser (every command)",
        "import what `run` imports",
    ]
    assert tree["modules"] > 100
    assert tree["steps"][-1]["rss"] > tree["start_rss"]
    packages = {cost["package"] for cost in tree["packages"]}
    assert {"numpy", "aiohttp", "scheduler.kube"} <= packages
    assert not packages & {"cel_expr_python", "kopf", "cryptography"}
    assert any(cost["package"] == "scheduler.model" for cost in tree["importtime"])


def test_a_traced_phase_prints_without_pymalloc_figures() -> None:
    entry = {"rss_mib": 2.0, "hwm_mib": 3.0, "threads": 1, "sockets": 4, "pymalloc": {}}
    traced = phase_cells({**entry, "glibc": {}, "traced_mib": 1.5}).split()
    assert traced == ["2.0", "3.0", "1", "4", "-", "-", "-", "1.5"]
    plain = {
        **entry,
        "pymalloc": {"arenas": 30, "in_use": 28 * 2**20},
        "glibc": {"heap": 16 * 2**20, "in_use": 15 * 2**20, "mmapped": 2**20},
    }
    assert phase_cells(plain).split() == [
        "2.0",
        "3.0",
        "1",
        "4",
        "30",
        "(28.0)",
        "16.0",
        "(15.0)",
        "1.0",
        "-",
    ]
