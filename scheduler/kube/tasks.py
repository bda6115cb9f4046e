"""Background tasks that are never lost: spawned, tracked, their failures logged.

A bare `loop.create_task(...)` whose result nobody awaits ends unseen when it raises (asyncio
prints "Task exception was never retrieved" to stderr at garbage collection, if ever), and the
work it owned (an assumed pod, an in-flight queue entry) stays stuck. `TaskSet.spawn` is the one
way the scheduler starts a background coroutine:

- the task is kept in the set until it finishes, so it is not garbage-collected mid-flight and
  `close` can wait for or cancel it;
- when it finishes with an exception, the exception is retrieved and logged as one structured
  event (`background_task_failed`, with the task's name and the traceback as JSON), never as a
  raw traceback on stderr;
- with a `limit`, `spawn` refuses (returns None, counts it in `refused`) while that many tasks
  are running, so a burst cannot grow the set without bound.

The coroutine itself should still handle its expected errors; the guard is the last line for the
unexpected ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("gpu-scheduler.tasks")

T = TypeVar("T")


class TaskSet:
    """Tracked background tasks of one owner (e.g. "binding", "events")."""

    def __init__(self, owner: str, limit: int | None = None) -> None:
        if limit is not None and limit <= 0:
            raise ValueError("limit must be positive")
        self.owner = owner
        self.limit = limit
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failed = 0
        """Tasks that ended with an exception (each logged)."""
        self.refused = 0
        """`spawn` calls refused because `limit` tasks were running."""

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self._tasks) >= self.limit

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T] | None:
        """Start `coroutine` as a tracked task; None (the coroutine closed unstarted) when the
        set is full."""
        if self.full:
            coroutine.close()
            self.refused += 1
            return None
        task = asyncio.get_running_loop().create_task(coroutine, name=f"{self.owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.failed += 1
            log.error(
                "background_task_failed",
                task=task.get_name(),
                error=f"{type(error).__name__}: {error}",
                exc_info=error,
            )

    async def wait(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for the running tasks; returns how many still run."""
        if not self._tasks:
            return 0
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return len(pending)

    async def close(self, timeout: float = 0.0) -> None:
        """Let the tasks finish for up to `timeout` seconds, then cancel the rest and wait for
        them to unwind (their own cleanup runs)."""
        await self.wait(timeout)
        while self._tasks:  # a task that unwinds may start another in the same set
            pending = set(self._tasks)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)
