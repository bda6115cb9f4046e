"""Freezing a process at an exact point of its work: SIGSTOP as soon as its JSON log shows an event.

A scheduler that logs `pod_placed` starts the pod's binding task on the next turn of its event
loop, so a SIGSTOP sent within a few milliseconds of that line catches the Binding in flight
(waiting for a connection, being sent, or waiting for its answer). A thread polls the log file
every half millisecond and sends the signal itself, so the delay does not depend on the caller's
event loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

POLL_S = 0.0005


def _stop_on_event(
    path: Path, event: str, pid: int, timeout_s: float, after_s: float
) -> float | None:
    """Block until a line logged from now on in `path` names `event`, wait `after_s` more
    (spinning: a sleep that short oversleeps), then SIGSTOP `pid`. Returns the delay between
    seeing the line and the signal in milliseconds, or None when no such line came within
    `timeout_s` (nothing is signalled then)."""
    marker = f'"event": "{event}"'
    deadline = time.monotonic() + timeout_s
    with path.open("rb") as log:
        log.seek(0, os.SEEK_END)
        pending = b""
        while time.monotonic() < deadline:
            chunk = log.read()
            if not chunk:
                time.sleep(POLL_S)
                continue
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()  # a line still being written
            for line in lines:
                if marker in line.decode(errors="replace"):
                    seen = time.monotonic()
                    while time.monotonic() - seen < after_s:
                        pass
                    os.kill(pid, signal.SIGSTOP)
                    return (time.monotonic() - seen) * 1000.0
    return None


async def stop_on_event(
    path: Path, event: str, pid: int, timeout_s: float, after_s: float = 0.0
) -> float | None:
    """`_stop_on_event` in a worker thread: SIGSTOP `pid` `after_s` seconds after its log at
    `path` shows `event`; the signal's delay in ms, or None when the event did not come in
    time."""
    return await asyncio.to_thread(_stop_on_event, path, event, pid, timeout_s, after_s)
