"""What runs inside the measured process: the daemon's imports, metered, and the daemon with its
memory recorded at named phases. Used by `hack.bench.memory`; run as a script with `python -P`
(no script folder on sys.path) and PYTHONPATH naming the checkout to measure, so it can measure
another checkout than its own:

    python -P hack/bench/memory_child.py imports [--no-meter]
    python -P hack/bench/memory_child.py daemon --report FILE [--trace-frames N] -- RUN_ARGS

`imports` runs `DAEMON_IMPORT_STEPS` under an `ImportMeter` and prints a JSON document: RSS
after each step, and every module's `ImportCost` (`--no-meter`: the steps only, for
`python -X importtime`). `ImportMeter` wraps the import system's one entry for loading a module
that is not loaded yet (`importlib._bootstrap._find_and_load`, which both the `import` statement
and `importlib.import_module` go through) and reads the resident set (/proc/self/statm) before
and after each load: a module's inclusive cost is the growth while it loaded, the modules it
imported included; its exclusive cost leaves those out, so the exclusive costs of all modules add
up to the growth over the whole measurement.

`daemon` runs `scheduler.cli`'s `run RUN_ARGS` after `DAEMON_IMPORT_STEPS`, under tracemalloc
with N frames when N > 0, and records phase "imported" at once, then one phase of `PHASES` per
SIGUSR1, each written to the JSON report (`PhaseRecorder`).

Only the standard library is imported here, so that the measurement costs nothing of its own.
"""

from __future__ import annotations

import argparse
import importlib
import importlib._bootstrap as bootstrap
import json
import os
import signal
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
RUN_IMPORTS = ("scheduler.daemon", "scheduler.kube.client", "scheduler.logging")
"""What `scheduler.cli.run_daemon` imports before it makes the API client."""
PHASES = ("imported", "synced", "scheduled")


def resident_bytes() -> int:
    """This process's resident set size (VmRSS), in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_BYTES


@dataclass(frozen=True)
class ImportCost:
    """One module's load: RSS growth in bytes while it loaded (`inclusive`) and without the
    modules it imported (`exclusive`); `importer` is the module whose load asked for it ("" for
    an import made outside any module load); `started` numbers the loads in the order they
    began (from 0)."""

    module: str
    inclusive: int
    exclusive: int
    importer: str
    started: int = 0


@dataclass
class ImportMeter:
    """Context manager: records an `ImportCost` per module loaded inside it (see the module
    docstring). Not reentrant; restores the import system on exit."""

    read_rss: Callable[[], int] = resident_bytes
    costs: list[ImportCost] = field(default_factory=list)
    _loading: list[tuple[str, int]] = field(default_factory=list)
    """Modules being loaded, outermost first: (name, RSS growth of their finished imports)."""
    _started: int = 0
    _original: Callable[..., Any] | None = None

    def __enter__(self) -> ImportMeter:
        original = self._original = bootstrap._find_and_load  # type: ignore[attr-defined]

        def measured(name: str, import_: Callable[..., Any]) -> Any:
            importer = self._loading[-1][0] if self._loading else ""
            started = self._started
            self._started += 1
            self._loading.append((name, 0))
            before = self.read_rss()
            try:
                return original(name, import_)
            finally:
                inclusive = self.read_rss() - before
                _, nested = self._loading.pop()
                self.costs.append(
                    ImportCost(name, inclusive, inclusive - nested, importer, started)
                )
                if self._loading:
                    outer, grown = self._loading[-1]
                    self._loading[-1] = (outer, grown + inclusive)

        bootstrap._find_and_load = measured  # type: ignore[attr-defined]
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        bootstrap._find_and_load = self._original  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StepCost:
    """RSS after one step of an import sequence and its growth over the step before."""

    step: str
    rss: int
    growth: int


def measure_steps(
    steps: Sequence[tuple[str, Callable[[], object]]], meter: ImportMeter
) -> list[StepCost]:
    """Run each (label, action) inside `meter`, reading RSS after each."""
    found: list[StepCost] = []
    previous = meter.read_rss()
    with meter:
        for label, action in steps:
            action()
            now = meter.read_rss()
            found.append(StepCost(label, now, now - previous))
            previous = now
    return found


def _import_cli() -> object:
    return importlib.import_module("scheduler.cli")


def _build_parser() -> object:
    return importlib.import_module("scheduler.cli").build_parser()


def _import_run() -> object:
    return [importlib.import_module(name) for name in RUN_IMPORTS]


DAEMON_IMPORT_STEPS: Sequence[tuple[str, Callable[[], object]]] = (
    ("import scheduler.cli", _import_cli),
    ("build its parser (every command)", _build_parser),
    ("import what `run` imports", _import_run),
)
"""What `gpu-scheduler run` imports before it reads an object, in its order."""


def metered_imports() -> dict[str, Any]:
    """`DAEMON_IMPORT_STEPS` in this (fresh) process, metered: RSS at the start, after each
    step, and every module's cost."""
    meter = ImportMeter()
    start = meter.read_rss()
    steps = measure_steps(DAEMON_IMPORT_STEPS, meter)
    return {
        "start_rss": start,
        "steps": [asdict(step) for step in steps],
        "costs": [asdict(cost) for cost in meter.costs],
    }


def open_sockets() -> int:
    """Sockets this process holds open (each TLS connection to the API server is one)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue  # closed meanwhile
    return count


def status_value(field_name: str) -> int:
    """A number of /proc/self/status (VmRSS and VmHWM in KiB, Threads)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field_name} in /proc/self/status")


PYMALLOC_FIELDS = {
    "# arenas allocated current": "arenas",
    "# bytes in allocated blocks": "in_use",
    "# bytes in available blocks": "free_in_pools",
}
"""Lines of `sys._debugmallocstats()` kept by `pymalloc_stats`, and their keys."""


def pymalloc_stats() -> dict[str, int]:
    """Python's small-object allocator (objects of 512 bytes and less): arenas held (1 MiB each
    on 64-bit Linux), bytes in live blocks, and bytes free inside pools in use. Read from
    `sys._debugmallocstats()`, which writes to the C-level stderr."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    stats: dict[str, int] = {}
    for line in text.splitlines():
        label, _, value = line.partition("=")
        key = PYMALLOC_FIELDS.get(label.strip())
        if key is not None:
            stats[key] = int(value.strip().replace(",", ""))
    return stats


MALLINFO2_FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)
"""struct mallinfo2 (malloc.h), in order."""


def glibc_stats() -> dict[str, int]:
    """glibc's malloc, over all its arenas (mallinfo2, glibc >= 2.33): heap bytes obtained with
    brk/arenas, of them in use and free, and bytes in blocks it mmapped on their own (large
    allocations). Empty when the C library has no mallinfo2."""
    import ctypes  # here, not at the top: the measured imports must not include it

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2_FIELDS]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return {}
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return {
        "heap": info.arena,
        "in_use": info.uordblks,
        "free": info.fordblks,
        "mmapped": info.hblkhd,
    }


@dataclass
class PhaseRecorder:
    """Writes this process's memory at each phase of `PHASES` to the JSON `report`: VmRSS,
    VmHWM, threads, open sockets, the allocators' own figures (`pymalloc_stats`,
    `glibc_stats`, in bytes) and, while tracemalloc traces, the traced memory and the path of a
    snapshot dumped next to the report. `on_signal` (a SIGUSR1 handler) records the next
    phase."""

    report: Path
    phases: list[dict[str, Any]] = field(default_factory=list)

    def record(self, name: str) -> None:
        entry: dict[str, Any] = {
            "phase": name,
            "rss_mib": status_value("VmRSS") / 1024,
            "hwm_mib": status_value("VmHWM") / 1024,
            "threads": status_value("Threads"),
            "sockets": open_sockets(),
            "pymalloc": pymalloc_stats(),
            "glibc": glibc_stats(),
            "snapshot": None,
        }
        if tracemalloc.is_tracing():
            current, peak = tracemalloc.get_traced_memory()
            snapshot = self.report.with_name(f"{self.report.stem}-{name}.tracemalloc")
            tracemalloc.take_snapshot().dump(str(snapshot))
            entry.update(traced_mib=current / MIB, traced_peak_mib=peak / MIB)
            entry["snapshot"] = str(snapshot)
        self.phases.append(entry)
        partial = self.report.with_suffix(".partial")
        partial.write_text(json.dumps({"phases": self.phases}))
        partial.replace(self.report)

    def on_signal(self, signum: int, frame: object) -> None:
        if len(self.phases) < len(PHASES):
            self.record(PHASES[len(self.phases)])


def run_daemon(report: Path, trace_frames: int, run_args: Sequence[str]) -> int:
    """`gpu-scheduler run RUN_ARGS` in this process, phases recorded into `report`."""
    if trace_frames:
        tracemalloc.start(trace_frames)
    recorder = PhaseRecorder(report)
    for _, action in DAEMON_IMPORT_STEPS:
        action()
    recorder.record(PHASES[0])
    signal.signal(signal.SIGUSR1, recorder.on_signal)
    cli = importlib.import_module("scheduler.cli")
    code: int = cli.main(["run", *run_args])
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memory_child.py", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    imports = commands.add_parser("imports")
    imports.add_argument("--no-meter", action="store_true")
    daemon = commands.add_parser("daemon")
    daemon.add_argument("--report", type=Path, required=True)
    daemon.add_argument("--trace-frames", type=int, default=0)
    daemon.add_argument("run_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "daemon":
        return run_daemon(args.report, args.trace_frames, [a for a in args.run_args if a != "--"])
    if args.no_meter:
        for _, action in DAEMON_IMPORT_STEPS:
            action()
    else:
        print(json.dumps(metered_imports()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
