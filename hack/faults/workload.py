"""A seeded stream of GPU pods for one scheduler, with churn: once `max_live` pods of the stream
exist, each new pod first deletes an older one (a bound one when there is one), so the cluster
keeps turning over instead of filling up.

    workload = ChurnWorkload(core, WorkloadSpec("ns", "ns", {"pool": "ns"}, seed=1))
    await workload.run(200)            # 200 pods created, churn included
    workload.created, workload.deleted

Pod names (`<prefix>-<seq>`) are never reused, so a pod's key names one UID for the log audit.
The sizes are drawn from `sizes` with `weights` by a `random.Random(seed)`; the choice of which
pod to delete depends on which are bound at that moment, so two runs with one seed create the same
pods but may delete different ones.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client

WORKLOAD_LABEL = "faults.gpu-scheduler.io/workload"


@dataclass(frozen=True)
class WorkloadSpec:
    """What to create: for which scheduler, in which namespace, on which nodes."""

    scheduler_name: str
    namespace: str
    node_selector: Mapping[str, str]
    seed: int = 1
    sizes: Sequence[int] = (1, 2, 4, 8)
    weights: Sequence[float] = (0.45, 0.3, 0.17, 0.08)
    max_live: int = 24
    """Pods of the stream that may exist at once before each new one deletes an older one."""
    prefix: str = "w"
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority_class: str | None = None


def churn_pod(spec: WorkloadSpec, name: str, gpus: int) -> dict[str, Any]:
    """A pod asking for `gpus` whole GPUs (as a limit, like the device plugin wants) and a little
    cpu and memory, for `spec.scheduler_name`, held to `spec.node_selector`."""
    pod_spec: dict[str, Any] = {
        "schedulerName": spec.scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": dict(spec.node_selector),
        "containers": [
            {
                "name": "main",
                "image": "example.invalid/cuda-job:1",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {WORKLOAD_LABEL: spec.prefix},
            "annotations": dict(spec.annotations),
        },
        "spec": pod_spec,
    }


class ChurnWorkload:
    """See the module docstring. API errors while the control plane is faulted are counted and
    retried a bounded number of times, never raised, so a fault does not end the stream."""

    def __init__(self, core: client.CoreV1Api, spec: WorkloadSpec) -> None:
        self.core = core
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.sequence = 0
        self.live: list[str] = []
        self.created = 0
        self.deleted = 0
        self.api_errors = 0

    def next_size(self) -> int:
        return self.rng.choices(list(self.spec.sizes), weights=list(self.spec.weights))[0]

    async def _bound(self) -> set[str]:
        response: Any = await self.core.list_namespaced_pod(
            self.spec.namespace,
            label_selector=f"{WORKLOAD_LABEL}={self.spec.prefix}",
            _preload_content=False,
        )
        body = json.loads(await response.read())
        if "items" not in body:  # an error Status: the API server is in trouble
            raise client.ApiException(status=response.status, reason=str(body)[:200])
        items = body["items"]
        return {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")}

    async def _retrying(self, what: str, call: Any) -> bool:
        for attempt in range(20):
            try:
                await call()
                return True
            except client.ApiException as error:
                if error.status in (404, 409):
                    return error.status == 409 and what == "create"
                self.api_errors += 1
            except (TimeoutError, OSError, aiohttp.ClientError):
                self.api_errors += 1
            await asyncio.sleep(min(0.25 * 2**attempt, 2.0))
        return False

    async def churn_one(self) -> None:
        """Delete one live pod of the stream, a bound one when there is one."""
        try:
            bound = await self._bound()
        except (TimeoutError, client.ApiException, OSError, aiohttp.ClientError):
            self.api_errors += 1
            bound = set()
        candidates = sorted(name for name in self.live if name in bound) or sorted(self.live)
        victim = candidates[self.rng.randrange(len(candidates))]
        self.live.remove(victim)

        async def delete() -> None:
            await self.core.delete_namespaced_pod(
                victim, self.spec.namespace, grace_period_seconds=0
            )

        if await self._retrying("delete", delete):
            self.deleted += 1

    def manifest(self, name: str) -> dict[str, Any]:
        """The pod `name` of the stream; a subclass may make other pods (it keeps the
        `WORKLOAD_LABEL` label, which churn lists by)."""
        return churn_pod(self.spec, name, self.next_size())

    async def create_one(self) -> str:
        self.sequence += 1
        name = f"{self.spec.prefix}-{self.sequence:05d}"
        manifest = self.manifest(name)

        async def create() -> None:
            await self.core.create_namespaced_pod(self.spec.namespace, cast(Any, manifest))

        if await self._retrying("create", create):
            self.created += 1
            self.live.append(name)
        return name

    async def run(self, pods: int, pause_s: float = 0.05) -> None:
        """Create `pods` pods, churning once `max_live` are live, `pause_s` apart."""
        for _ in range(pods):
            if len(self.live) >= self.spec.max_live:
                await self.churn_one()
            await self.create_one()
            await asyncio.sleep(pause_s)
