"""Where the exporter's view of Nodes and Pods comes from, and the loop that refreshes it.

Contract: a :class:`Source` returns plain JSON dicts (camelCase, as the API server sends them)
or raises :class:`SourceError`. :func:`refresh_forever` polls it every ``interval`` seconds,
keeps only kwok fake GPU nodes, hands the view to the exporter and logs new problems; on a
source error it logs and leaves the exporter on its last good view.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import structlog
from kubernetes_asyncio import client, config

from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.holders import Json, is_fake_gpu_node

log = structlog.get_logger("fake_dcgm.source")


class SourceError(Exception):
    """The view could not be read (API unreachable, error status, unparsable body)."""


class Source(Protocol):
    """A view of all Nodes and Pods."""

    async def fetch(self) -> tuple[Sequence[Json], Sequence[Json]]:
        """(nodes, pods) as JSON dicts; raises SourceError on failure."""
        ...


class StaticSource:
    """A fixed view, for tests and for running without a cluster."""

    def __init__(self, nodes: Sequence[Json], pods: Sequence[Json]) -> None:
        self.nodes = list(nodes)
        self.pods = list(pods)

    async def fetch(self) -> tuple[Sequence[Json], Sequence[Json]]:
        return self.nodes, self.pods


class ApiSource:
    """Lists Nodes and Pods from the API server (raw JSON, no model deserialization)."""

    def __init__(self, api: Any) -> None:
        self._core = client.CoreV1Api(api)

    async def _list(self, call: Callable[..., Any], what: str) -> list[Json]:
        try:
            response = await call(_preload_content=False, _request_timeout=10)
            try:
                body = await response.read()
                status = response.status
            finally:
                response.release()
        except (aiohttp.ClientError, OSError, TimeoutError, client.ApiException) as exc:
            raise SourceError(f"listing {what}: {exc!r}") from exc
        if status != 200:
            raise SourceError(f"listing {what}: HTTP {status}: {body[:300]!r}")
        try:
            items = json.loads(body)["items"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"listing {what}: unparsable body: {exc!r}") from exc
        return [item for item in items or [] if isinstance(item, dict)]

    async def fetch(self) -> tuple[Sequence[Json], Sequence[Json]]:
        nodes = await self._list(self._core.list_node, "nodes")
        pods = await self._list(self._core.list_pod_for_all_namespaces, "pods")
        return nodes, pods


@asynccontextmanager
async def api_source(kubeconfig: Path) -> AsyncIterator[ApiSource]:
    """An :class:`ApiSource` for the cluster of ``kubeconfig``; closes its client on exit."""
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield ApiSource(api)
    finally:
        await api.close()


async def refresh_once(source: Source, exporter: Exporter, now: Callable[[], float]) -> bool:
    """One poll: True if the exporter got a new view, False if the source failed (logged)."""
    try:
        nodes, pods = await source.fetch()
    except SourceError as exc:
        log.warning("refresh_failed", error=str(exc), keeping="last good view")
        return False
    fake = [n for n in nodes if is_fake_gpu_node(n)]
    for problem in exporter.update(fake, pods, now()):
        log.warning("view_problem", problem=problem)
    return True


async def refresh_forever(
    source: Source, exporter: Exporter, interval: float, now: Callable[[], float]
) -> None:
    """Call :func:`refresh_once` every ``interval`` seconds until cancelled."""
    while True:
        await refresh_once(source, exporter, now)
        await asyncio.sleep(interval)
