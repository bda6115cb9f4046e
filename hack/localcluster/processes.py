"""Child processes of the local control plane, and their guaranteed teardown.

Each component runs in its own process group with its output in a log file. Three layers make sure
that no component outlives the process that started it:

1. `ProcessGroup.stop()` terminates every component (SIGTERM to its group, SIGKILL after a grace
   period), in the reverse order of starting.
2. An `atexit` hook and SIGTERM/SIGHUP handlers call `stop()` on every group still running, so an
   interrupted test run or demo tears down too.
3. Each child asks the kernel to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`), which covers
   a parent killed with SIGKILL, where no Python code runs.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 10.0


class ComponentError(RuntimeError):
    """A component failed to start or to become ready; the message names it and its log."""


def die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    """One running child process."""

    name: str
    argv: Sequence[str]
    log_path: Path
    process: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Terminate the component's whole process group; SIGKILL it after `grace` seconds."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.process.wait(timeout=grace)


@dataclass
class ProcessGroup:
    """The components of one cluster, stopped together in reverse order of starting."""

    log_dir: Path
    components: list[Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _LIVE_GROUPS.add(self)
        _install_signal_handlers()

    def __hash__(self) -> int:
        return id(self)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Component:
        """Start `argv` with stdout and stderr in `<log_dir>/<name>.log`."""
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        component = Component(name, argv, log_path, process)
        self.components.append(component)
        return component

    def wait_ready(self, component: Component, probe: Callable[[], bool], timeout: float) -> None:
        """Poll `probe` until it returns True.

        Raises ComponentError if the process exits first or `timeout` seconds pass.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not component.alive():
                raise ComponentError(
                    f"{component.name} exited with code {component.process.returncode}; "
                    f"log {component.log_path}:\n{component.log_tail()}"
                )
            if probe():
                return
            time.sleep(0.2)
        raise ComponentError(
            f"{component.name} was not ready after {timeout:.0f} s; "
            f"log {component.log_path}:\n{component.log_tail()}"
        )

    def stop(self) -> None:
        """Stop every component, newest first. Safe to call more than once."""
        while self.components:
            self.components.pop().stop()
        _LIVE_GROUPS.discard(self)


_LIVE_GROUPS: weakref.WeakSet[ProcessGroup] = weakref.WeakSet()
_handlers_installed = False


def stop_all() -> None:
    """Stop every group that is still running (used at exit and on termination signals)."""
    for group in list(_LIVE_GROUPS):
        group.stop()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_signal)
