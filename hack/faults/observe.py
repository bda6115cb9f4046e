"""Cluster snapshots and the invariant audit over them, grouped by fault.

    audit = Audit(api_client, scheduler_names={"ns"}, logs=lambda: [p.log_path for p in replicas])
    await audit.check("api resets")            # instant invariants on the whole cluster now
    await audit.settle("api resets", 60)       # + every fitting pending pod bound, bounded wait
    await audit.check_reserved("api resets", "http://127.0.0.1:10261/metrics")  # cache vs API
    audit.violations["api resets"]             # what broke, if anything

Every snapshot lists all pods and nodes of the cluster (every scheduler's pods count), and
remembers the last view of each pod so evictions can be judged on what the victim looked like.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

from hack.faults.invariants import (
    Violation,
    check_evictions,
    check_fitting_bound,
    check_needless_evictions,
    check_reserved_gpus,
    check_state,
    evictions_from_log,
    fitting_pending,
    key_of,
    read_records,
)

Snapshot = tuple[list[dict[str, Any]], list[dict[str, Any]]]
"""(pods, nodes) as the API returned them."""
API_TROUBLE = (client.ApiException, OSError, asyncio.TimeoutError, aiohttp.ClientError)


async def _items(response: Any) -> list[dict[str, Any]]:
    body: dict[str, Any] = json.loads(await response.read())
    if "items" not in body:  # an error Status: the API server is in trouble
        raise client.ApiException(status=response.status, reason=str(body)[:200])
    items: list[dict[str, Any]] = body["items"]
    return items


async def snapshot(core: client.CoreV1Api) -> Snapshot:
    pods = await _items(await core.list_pod_for_all_namespaces(_preload_content=False))
    nodes = await _items(await core.list_node(_preload_content=False))
    return pods, nodes


async def snapshot_retrying(core: client.CoreV1Api, attempts: int = 60) -> Snapshot:
    """A snapshot, retried while the API server is down (e.g. restarting); bounded."""
    for attempt in range(attempts):
        try:
            return await snapshot(core)
        except API_TROUBLE:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def allocated_gpus(metrics_url: str) -> dict[str, float]:
    """Node -> GPUs a scheduler counts allocated, summed over NVLink domains, from its
    `gpu_scheduler_node_gpus{state="allocated"}` samples at `metrics_url`."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(metrics_url) as response,
    ):
        response.raise_for_status()
        text = await response.text()
    allocated: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.name != "gpu_scheduler_node_gpus":
            continue
        for sample in family.samples:
            if sample.labels.get("state") == "allocated":
                allocated[sample.labels["node"]] += sample.value
    return dict(allocated)


class Audit:
    """Invariant checks over the live cluster, with the violations kept per fault label."""

    def __init__(
        self,
        api: client.ApiClient,
        scheduler_names: Iterable[str],
        logs: Callable[[], Iterable[Path]],
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scheduler_names = set(scheduler_names)
        self.logs = logs
        self.seen: dict[str, dict[str, Any]] = {}
        self.violations: dict[str, list[Violation]] = defaultdict(list)
        self.checks = 0

    def records(self) -> list[dict[str, Any]]:
        return [record for path in self.logs() for record in read_records(path)]

    def _remember(self, pods: Iterable[dict[str, Any]]) -> None:
        for pod in pods:
            self.seen[key_of(pod)] = pod

    def _add(self, fault: str, found: Iterable[Violation]) -> list[Violation]:
        new = [v for v in found if v not in self.violations[fault]]
        self.violations[fault].extend(new)
        return new

    async def observe(self) -> Snapshot:
        pods, nodes = await snapshot_retrying(self.core)
        self._remember(pods)
        return pods, nodes

    async def check(self, fault: str) -> list[Violation]:
        """The instant invariants (capacity, GPU indices, binds) now; returns the new ones."""
        pods, nodes = await self.observe()
        self.checks += 1
        return self._add(fault, check_state(pods, nodes, self.records()))

    async def settle(self, fault: str, timeout_s: float = 90.0) -> list[Violation]:
        """Wait (bounded) until no pending pod of ours fits anywhere, then check everything."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            pods, nodes = await self.observe()
            if not fitting_pending(pods, nodes, self.scheduler_names) or loop.time() > deadline:
                break
            await asyncio.sleep(1.0)
        self.checks += 1
        found = [
            *check_state(pods, nodes, self.records()),
            *check_fitting_bound(pods, nodes, self.scheduler_names),
        ]
        return self._add(fault, found)

    async def check_reserved(
        self, fault: str, metrics_url: str, timeout_s: float = 30.0
    ) -> list[Violation]:
        """`reserved_gpus` at rest: the scheduler serving `metrics_url` counts on each node
        exactly the GPUs of the pods bound there. Its informers may lag the API server by a
        moment, so this waits (bounded) for the two to agree before recording what differs."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            pods, nodes = await self.observe()
            try:
                found = check_reserved_gpus(await allocated_gpus(metrics_url), pods, nodes)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                found = [Violation("reserved_gpus", metrics_url, f"unreadable: {error!r}")]
            if not found or loop.time() > deadline:
                break
            await asyncio.sleep(1.0)
        self.checks += 1
        return self._add(fault, found)

    async def watch(self, fault: str, stop: asyncio.Event, interval_s: float = 2.0) -> None:
        """Check the instant invariants every `interval_s` until `stop` is set."""
        while not stop.is_set():
            await self.check(fault)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def check_evictions(self, fault: str) -> list[Violation]:
        """`bad_eviction` over every eviction the schedulers logged, judged on the last view of
        each victim; priority classes and PDBs are read now."""
        scheduling = client.SchedulingV1Api(self.api)
        policy = client.PolicyV1Api(self.api)
        classes = await _items(await scheduling.list_priority_class(_preload_content=False))
        pdbs = await _items(
            await policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False)
        )
        by_name: Mapping[str, dict[str, Any]] = {c["metadata"]["name"]: c for c in classes}
        evictions, unknown = evictions_from_log(self.records(), self.seen)
        before = list(self.seen.values())
        pods, _ = await self.observe()
        return self._add(
            fault,
            [
                *unknown,
                *check_evictions(evictions, by_name, pdbs, before),
                *check_needless_evictions(self.records(), pods),
            ],
        )

    def evicted(self) -> list[str]:
        return [
            str(r.get("pod"))
            for r in self.records()
            if r.get("event") == "reclaim_evict" and r.get("result") == "evicted"
        ]
