"""Where the exporter's view of Nodes, Pods, ResourceClaims and ResourceSlices comes from, and the
loop that refreshes it.

Contract: a :class:`Source` returns a :class:`View` of plain JSON dicts (camelCase, as the API
server sends them) or raises :class:`SourceError`. :func:`refresh_forever` polls it every
``interval`` seconds, keeps only kwok fake GPU nodes (GPU capacity, or GPUs in a ResourceSlice),
hands the view to the exporter and logs new problems; on a source error it logs and leaves the
exporter on its last good view.

:class:`ApiSource` lists (no watch: a poll a second is the exporter's refresh) Nodes and Pods,
and resource.k8s.io/v1 ResourceClaims and ResourceSlices. The exporter's account needs get/list
on all four; a cluster that does not serve resource.k8s.io/v1 (404) or refuses the account the
DRA lists (403) gives an empty DRA view, logged once, so device-plugin GPUs are still served.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import structlog
from kubernetes_asyncio import client, config

from hack.fake_dcgm.dra_holders import gpu_nodes
from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.holders import Json, is_fake_gpu_node

log = structlog.get_logger("fake_dcgm.source")


class SourceError(Exception):
    """The view could not be read (API unreachable, error status, unparsable body)."""


@dataclass(frozen=True)
class View:
    """What one poll read: Nodes, Pods, ResourceClaims and ResourceSlices as JSON dicts."""

    nodes: Sequence[Json]
    pods: Sequence[Json]
    claims: Sequence[Json] = ()
    slices: Sequence[Json] = ()


class Source(Protocol):
    """A view of all Nodes, Pods, ResourceClaims and ResourceSlices."""

    async def fetch(self) -> View:
        """The view; raises SourceError on failure."""
        ...


class StaticSource:
    """A fixed view, for tests and for running without a cluster."""

    def __init__(
        self,
        nodes: Sequence[Json],
        pods: Sequence[Json],
        claims: Sequence[Json] = (),
        slices: Sequence[Json] = (),
    ) -> None:
        self.view = View(list(nodes), list(pods), list(claims), list(slices))

    async def fetch(self) -> View:
        return self.view


DRA_NOT_LISTED = frozenset({403, 404})
"""Statuses of a DRA list that leave the DRA view empty instead of failing the poll."""


class ApiSource:
    """Lists Nodes, Pods, ResourceClaims and ResourceSlices from the API server (raw JSON, no
    model deserialization)."""

    def __init__(self, api: Any) -> None:
        self._core = client.CoreV1Api(api)
        self._resource = client.ResourceV1Api(api)
        self._dra_refused: set[str] = set()

    async def _list(
        self, call: Callable[..., Any], what: str, tolerated: frozenset[int] = frozenset()
    ) -> list[Json]:
        try:
            response = await call(_preload_content=False, _request_timeout=10)
            try:
                body = await response.read()
                status = response.status
            finally:
                response.release()
        except client.ApiException as exc:
            if exc.status in tolerated:
                return self._refused(what, exc.status)
            raise SourceError(f"listing {what}: {exc!r}") from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise SourceError(f"listing {what}: {exc!r}") from exc
        if status in tolerated:
            return self._refused(what, status)
        if status != 200:
            raise SourceError(f"listing {what}: HTTP {status}: {body[:300]!r}")
        try:
            items = json.loads(body)["items"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"listing {what}: unparsable body: {exc!r}") from exc
        return [item for item in items or [] if isinstance(item, dict)]

    def _refused(self, what: str, status: int) -> list[Json]:
        if what not in self._dra_refused:
            self._dra_refused.add(what)
            log.warning("dra_not_listed", what=what, status=status, serving="no DRA GPUs")
        return []

    async def fetch(self) -> View:
        nodes = await self._list(self._core.list_node, "nodes")
        pods = await self._list(self._core.list_pod_for_all_namespaces, "pods")
        claims = await self._list(
            self._resource.list_resource_claim_for_all_namespaces, "resourceclaims", DRA_NOT_LISTED
        )
        slices = await self._list(
            self._resource.list_resource_slice, "resourceslices", DRA_NOT_LISTED
        )
        return View(nodes, pods, claims, slices)


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
        view = await source.fetch()
    except SourceError as exc:
        log.warning("refresh_failed", error=str(exc), keeping="last good view")
        return False
    dra_nodes = gpu_nodes(view.slices)
    fake = [n for n in view.nodes if is_fake_gpu_node(n, dra_nodes)]
    for problem in exporter.update(fake, view.pods, now(), view.claims, view.slices):
        log.warning("view_problem", problem=problem)
    return True


async def refresh_forever(
    source: Source, exporter: Exporter, interval: float, now: Callable[[], float]
) -> None:
    """Call :func:`refresh_once` every ``interval`` seconds until cancelled."""
    while True:
        await refresh_once(source, exporter, now)
        await asyncio.sleep(interval)
