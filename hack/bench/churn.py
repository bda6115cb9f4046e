"""Churn for the control-plane benchmark (`python -m hack.bench.control_plane --lifetime L`):
pods deleted while others arrive, and the timeline of binds and releases the NVLink replays read.

- `Reaper`: deletes (grace 0) each pod of a run `lifetime` seconds after this process saw it
  bound, while the run's pods keep arriving; `deleted` records when each delete was sent.
- `Step` and `timeline` (pure): the binds and releases of a run merged into one sequence in
  time order, which `hack.bench.dra_workload.dra_quality` and
  `hack.bench.control_plane_model.nvlink_quality` replay: a pod takes its GPUs at its bind step and
  gives them back at its release step. At equal times a bind goes first: a GPU counts as free
  for a pod only when its release was seen strictly before the pod was bound.
- `peak_held` (pure): the most GPUs held at once over a timeline, to show how close to the
  cluster's capacity a run came.

When a pod's GPUs are free again is a choice per mode, made by the caller: on DRA nodes, when the
claim watch sees the allocation of the pod's claim gone (`status.allocation` cleared, or the claim
deleted). That is the moment a scheduler's claim cache can see the devices free: after the pod is
deleted, the resourceclaim controller removes it from `status.reservedFor` and clears the
allocation in the same status update, then deletes the generated claim
(`k8s.io/kubernetes@v1.37.2 pkg/controller/resourceclaim/controller.go`); until then both
schedulers count the devices as allocated, so the pod's deletion time would call devices free
that no scheduler could use yet. On device-plugin nodes the GPUs are free when the pod watch sees
the pod deleted, which is what both schedulers' pod caches go by.

Load (Little's law): pods arriving at `R` a second and each living `W` seconds on average hold
`R * W` pods at once in the steady state; here `W` is the lifetime plus the create-to-bound
latency plus the release's delay (the controller's claim update, a second or less unloaded).
At the mix's average of 2.6 GPUs a pod (40/30/20/10 % of 1/2/4/8; the seeded draw of 2,000 pods
asks for 5,193), 200 D8 nodes (1,600 GPUs) are held at `R * W * 2.6 / 1,600`: `--rate 10
--lifetime 55` offers about 1,430 GPUs, 89 % of the capacity, before the latency and the release's
delay are added, so that 8-GPU pods need a whole node freed, 4-GPU pods a whole NVLink domain, and
fragmentation decides whether they wait. Above 100 % the pending pods pile up
until arrivals stop; the run still ends when every created pod was bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kubernetes_asyncio import client

TICK_S = 0.1
"""How often the reaper looks for pods due."""


class Step(NamedTuple):
    """One event of a replay: `pod` took its GPUs (a bind) or gave them back (`release`)."""

    pod: str
    release: bool = False


def bind_steps(order: Iterable[str]) -> list[Step]:
    """A timeline of binds only, in `order` (no churn)."""
    return [Step(pod) for pod in order]


def timeline(bound_at: Mapping[str, float], released_at: Mapping[str, float]) -> list[Step]:
    """Binds and releases in time order, a bind before a release at the same time; a release
    of a pod never bound is left out."""
    events = [(at, False, pod) for pod, at in bound_at.items()]
    events += [(at, True, pod) for pod, at in released_at.items() if pod in bound_at]
    events.sort()
    return [Step(pod, release) for _, release, pod in events]


def peak_held(steps: Sequence[Step], sizes: Mapping[str, int]) -> int:
    """The most GPUs held at once: each bind adds its pod's size, each release takes it back
    (a release before its pod's bind, or twice, takes nothing)."""
    held: set[str] = set()
    now = peak = 0
    for pod, release in steps:
        if release:
            if pod in held:
                held.discard(pod)
                now -= sizes[pod]
        elif pod not in held:
            held.add(pod)
            now += sizes[pod]
            peak = max(peak, now)
    return peak


class Reaper:
    """Deletes (grace 0) each pod `lifetime` seconds after `bound_at` says it was seen bound,
    at most `concurrency` requests at a time; a pod already gone (404) counts as deleted.

    `run` goes on until cancelled; `stop` cancels it and waits for the deletes in flight."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        lifetime: float,
        concurrency: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core, self.namespace, self.lifetime, self.clock = core, namespace, lifetime, clock
        self.gate = asyncio.Semaphore(concurrency)
        self.deleted: dict[str, float] = {}
        """Pod -> when its delete request was sent."""
        self.inflight: set[asyncio.Task[None]] = set()
        self.failures: list[BaseException] = []
        self.task: asyncio.Task[None] | None = None

    def due(self, bound_at: Mapping[str, float], now: float) -> list[str]:
        """Pods seen bound at least `lifetime` seconds before `now` and not deleted yet."""
        limit = now - self.lifetime
        return [pod for pod, at in bound_at.items() if at <= limit and pod not in self.deleted]

    def start(self, bound_at: Mapping[str, float]) -> None:
        self.task = asyncio.create_task(self.run(bound_at))

    async def run(self, bound_at: Mapping[str, float]) -> None:
        while True:
            for pod in self.due(bound_at, self.clock()):
                self.deleted[pod] = self.clock()
                task = asyncio.create_task(self.delete(pod))
                self.inflight.add(task)
                task.add_done_callback(self.inflight.discard)
            if self.failures:
                raise self.failures[0]
            await asyncio.sleep(TICK_S)

    async def delete(self, pod: str) -> None:
        async with self.gate:
            try:
                response: Any = await self.core.delete_namespaced_pod(
                    pod, self.namespace, grace_period_seconds=0, _preload_content=False
                )
                status = response.status
                response.release()
            except Exception as error:  # reported by run and stop, not lost in a task
                self.failures.append(error)
                return
            if status != 404 and not 200 <= status <= 299:
                self.failures.append(RuntimeError(f"delete {pod}: HTTP {status}"))

    async def stop(self) -> None:
        """Cancel `run`, wait for the deletes in flight, and raise the first failure."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await asyncio.gather(*list(self.inflight), return_exceptions=True)
        if self.failures:
            raise self.failures[0]
