"""An informer of a resource the API server does not serve (an optional CRD not installed): one
info line, no warning per retry, and the informer syncs once the resource appears."""

from __future__ import annotations

import asyncio
from typing import Any

from structlog.testing import capture_logs

from scheduler.kube.informer import Informer, InformerOptions
from tests.unit.scheduler.test_core_cache import Answer

NOT_SERVED_LISTS = 5


class Recorder:
    def __init__(self) -> None:
        self.added: list[str] = []

    def on_add(self, obj: Any) -> None:
        self.added.append(obj["metadata"]["name"])

    def on_update(self, old: Any, new: Any) -> None:
        pass

    def on_delete(self, obj: Any) -> None:
        pass


class AppearsLater:
    """404 for the first lists (the CRD is not installed), then one object; watches hang."""

    def __init__(self) -> None:
        self.lists = 0
        self.never = asyncio.Event()

    async def __call__(self, **kwargs: Any) -> Answer:
        if kwargs.get("watch"):
            await self.never.wait()
        self.lists += 1
        if self.lists <= NOT_SERVED_LISTS:
            return Answer(404)
        item = {"metadata": {"name": "pg", "namespace": "default", "resourceVersion": "1"}}
        return Answer(200, {"metadata": {"resourceVersion": "1"}, "items": [item]})


async def test_a_resource_not_served_is_said_once_then_synced_when_it_appears() -> None:
    source, handler = AppearsLater(), Recorder()
    informer = Informer(
        "podgroups", source, handler, InformerOptions(backoff_initial=0.001, backoff_max=0.001)
    )
    with capture_logs() as logs:
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
        finally:
            task.cancel()
            await asyncio.wait([task])
    events = [entry["event"] for entry in logs]
    assert source.lists == NOT_SERVED_LISTS + 1
    assert events.count("informer_resource_not_served") == 1
    assert "informer_reconnect" not in events
    assert handler.added == ["pg"] and not informer.absent


async def test_an_optional_resource_not_served_counts_as_synced_and_fills_in_later() -> None:
    """A DRA kind on a cluster that does not serve it must not keep the scheduler from
    starting: an optional informer is synced at the first 404, empty, and takes the objects
    once the kind is served."""
    source, handler = AppearsLater(), Recorder()
    options = InformerOptions(backoff_initial=0.001, backoff_max=0.001, optional=True)
    informer = Informer("resourceslices", source, handler, options)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        assert source.lists == 1 and informer.absent and len(informer) == 0
        for _ in range(10_000):  # the retries run every millisecond
            if handler.added:
                break
            await asyncio.sleep(0.001)
    finally:
        task.cancel()
        await asyncio.wait([task])
    assert handler.added == ["pg"] and not informer.absent
