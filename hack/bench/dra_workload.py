"""The DRA mode of the control-plane benchmark (`python -m hack.bench.control_plane --dra`):
its nodes, claim templates and pods, what it reads back from the claims, and the NVLink quality
of the allocations.

- Nodes (`dra_node_specs`): `count` kwok nodes of the local cluster's `D8` type (8 H200 GPUs,
  NVLink domains gpu-0..3 and gpu-4..7), published as one ResourceSlice each (driver
  `gpu.nvidia.com`) with the `gpu.nvidia.com` DeviceClass, by `hack.localcluster.create_nodes`;
  `S8` nodes instead with `--shared` (`hack.bench.dra_shares`).
- Templates (`claim_template_manifest`, `create_templates`): one ResourceClaimTemplate per GPU
  count of the mix, `gpus-<n>`, created once in each run's namespace before its pods: one
  request `gpus` of exactly n devices of the class `gpu.nvidia.com`.
- Pods (`dra_pod_manifest`): the plain benchmark pod without `nvidia.com/gpu`, with one
  `spec.resourceClaims` entry `gpus` naming the template of its size, which the container
  uses; the resourceclaim controller of kube-controller-manager makes the claim.
- `AllocatedClaims`: an informer handler that keeps, per pod owning a claim (the controller
  owner reference the resourceclaim controller sets), the devices and results of the claim's
  `status.allocation`, and when that allocation was seen gone again (`released`: the claim
  updated without it, or deleted), which is when the devices are free under churn (see
  `hack.bench.churn`).
- `dra_quality` (pure): of the bound pods asking for 2 or 4 GPUs, those for which one NVLink
  domain of their node still had that many free devices when they were allocated, and of those,
  the ones whose devices lie inside one domain. "Had room" is decided by replaying the pods'
  allocations and releases per node in time order (`hack.bench.churn.timeline`: the order this
  process saw them bound, and their claims' allocations gone); several binding cycles in flight
  may allocate in a slightly different order than they bind, so the count is exact for one pod
  at a time and close otherwise.

- Extended-resource pods (`extended_pod_manifest`, the share `--dra-extended` of the pods,
  chosen by `extended_indices`, seeded): the plain benchmark pod asking for `nvidia.com/gpu`,
  no claim; the DeviceClass's `extendedResourceName` makes each scheduler create a claim for it
  (owned by the pod, so `AllocatedClaims` reads it like a template's).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from kubernetes_asyncio import client

from hack.bench.churn import Step
from hack.localcluster import D8, S8, NodeSpec
from hack.localcluster.dra import API_VERSION, EXTENDED_RESOURCE, GPU_CLASS
from topology.domains import NodeTopology

Json = dict[str, Any]

REQUEST = "gpus"
"""The request name in every template, and the pod's claim entry name."""
DEVICE_PREFIX = "gpu-"
_DEVICE_RE = re.compile(r"gpu-(\d+)")
CLAIMS_GONE_TIMEOUT_S = 600.0
POLL_S = 0.5


def dra_node_specs(
    count: int, prefix: str = "", labels: Mapping[str, str] | None = None, shared: bool = False
) -> list[NodeSpec]:
    """`count` D8 nodes (8 GPUs in two NVLink domains of 4, published through DRA); `shared`:
    S8 nodes instead (the same GPUs, each allowing multiple allocations by memory)."""
    spec = S8 if shared else D8
    return [
        replace(
            spec,
            type_name=prefix + spec.type_name,
            count=count,
            labels={**spec.labels, **(labels or {})},
        )
    ]


def template_name(gpus: int) -> str:
    return f"gpus-{gpus}"


def claim_template_manifest(gpus: int) -> Json:
    """The ResourceClaimTemplate `gpus-<n>`: one request of exactly `gpus` full GPUs."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(gpus)},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": REQUEST,
                            "exactly": {
                                "deviceClassName": GPU_CLASS,
                                "allocationMode": "ExactCount",
                                "count": gpus,
                            },
                        }
                    ]
                }
            }
        },
    }


def dra_pod_manifest(
    name: str, gpus: int, scheduler_name: str, node_selector: Mapping[str, str]
) -> Json:
    """A pod asking for `gpus` GPUs through the template of that size."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(node_selector),
            "resourceClaims": [{"name": REQUEST, "resourceClaimTemplateName": template_name(gpus)}],
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda-job:1",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "claims": [{"name": REQUEST}],
                    },
                }
            ],
        },
    }


def extended_pod_manifest(
    name: str, gpus: int, scheduler_name: str, node_selector: Mapping[str, str]
) -> Json:
    """A pod asking for `gpus` GPUs as the extended resource `nvidia.com/gpu`, no claim."""
    manifest = dra_pod_manifest(name, gpus, scheduler_name, node_selector)
    del manifest["spec"]["resourceClaims"]
    manifest["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "128Mi", EXTENDED_RESOURCE: str(gpus)},
        "limits": {EXTENDED_RESOURCE: str(gpus)},
    }
    return manifest


def extended_indices(count: int, share: float, seed: int) -> frozenset[int]:
    """Which of `count` pods ask for `nvidia.com/gpu` instead of a template (about `share` of
    them; the same for the same arguments)."""
    rng = random.Random(f"dra-extended-{seed}")
    return frozenset(i for i in range(count) if rng.random() < share)


async def create_templates(
    api: client.ApiClient,
    namespace: str,
    sizes: Sequence[int],
    shares: Iterable[Json] = (),
) -> None:
    """One template per distinct non-zero size of `sizes` in `namespace`, and each of
    `shares` (further template manifests)."""
    resource = client.ResourceV1Api(api)
    templates = [claim_template_manifest(gpus) for gpus in sorted(set(sizes) - {0})]
    for template in [*templates, *shares]:
        await resource.create_namespaced_resource_claim_template(namespace, cast(Any, template))


async def wait_claims_gone(
    api: client.ApiClient, namespace: str, timeout: float = CLAIMS_GONE_TIMEOUT_S
) -> None:
    """Wait until `namespace` lists no ResourceClaim (the resourceclaim controller deallocates
    and deletes a pod's generated claims once the pod is gone), so the next run starts with
    every device free."""
    resource = client.ResourceV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed: Any = await resource.list_namespaced_resource_claim(
            namespace, limit=1, _preload_content=False
        )
        items = json.loads(await listed.read())["items"]
        listed.release()
        if not items:
            return
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"claims of {namespace} still listed after {timeout:.0f} s")


def device_index(device: str) -> int | None:
    """`gpu-3` -> 3; None for a name of another form."""
    match = _DEVICE_RE.fullmatch(device)
    return int(match[1]) if match else None


def owning_pod(obj: Mapping[str, Any]) -> str | None:
    """The pod a claim was generated for (its controller owner reference), if any."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return next(
        (o.get("name") for o in owners if o.get("kind") == "Pod" and o.get("controller")), None
    )


class AllocatedClaims:
    """Informer handler over one namespace's ResourceClaims: `devices[pod]` is the
    (pool, device) list of the allocation of the claim that pod owns, once allocated (the first
    allocation seen), `results[pod]` that allocation's results as written; `released[pod]` is
    when (on `clock`) that allocation was first seen gone, by an update without it or the
    claim's deletion."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.devices: dict[str, tuple[tuple[str, str], ...]] = {}
        self.results: dict[str, tuple[Json, ...]] = {}
        """Per pod, the allocation's results as the claim holds them (with `shareID` and
        `consumedCapacity` on a device that allows multiple allocations)."""
        self.released: dict[str, float] = {}
        self.changed = asyncio.Event()
        """Set whenever an allocation is recorded."""

    def _see(self, obj: Mapping[str, Any]) -> None:
        pod = owning_pod(obj)
        allocation = (obj.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or ()
        if not pod:
            return
        if not results:
            self._release(pod)
            return
        if pod in self.devices:
            return
        self.devices[pod] = tuple((str(r.get("pool")), str(r.get("device"))) for r in results)
        self.results[pod] = tuple(results)
        self.changed.set()

    def _release(self, pod: str) -> None:
        if pod in self.devices and pod not in self.released:
            self.released[pod] = self.clock()

    async def wait_allocated(self, pods: Sequence[str], timeout: float) -> None:
        """Wait (at most `timeout` seconds) until the allocation of each of `pods` was seen: a
        claim's allocation is written before its pod's Binding, but the two watches deliver
        independently."""
        deadline = time.monotonic() + timeout
        while any(p not in self.devices for p in pods):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                return

    def on_add(self, obj: Any) -> None:
        self._see(obj)

    def on_update(self, old: Any, new: Any) -> None:
        self._see(new)

    def on_delete(self, obj: Any) -> None:
        pod = owning_pod(obj)
        if pod:
            self._release(pod)


def dra_quality(
    steps: Sequence[Step],
    sizes: Mapping[str, int],
    nodes: Mapping[str, str],
    devices: Mapping[str, Sequence[tuple[str, str]]],
    topologies: Mapping[str, NodeTopology],
) -> tuple[int, int]:
    """(pods of 2 or more GPUs for which one domain had room, those allocated inside one domain).

    `steps` are the pods' binds and releases in time order (`hack.bench.churn.timeline`, or
    `bind_steps` of the bind order when no pod was deleted), `nodes` where each is bound,
    `devices` its claim's allocated (pool, device) pairs, `topologies` each node's NVLink domains
    over its GPU indices (device `gpu-<i>` is GPU i; the pool is named after the node). Every pod
    with known devices takes them at its bind, whatever its size, and gives them back at its
    release (a release before the bind, or of a pod that took nothing, gives nothing; a pod
    released before its bind takes nothing); a pod counts when it asks for more than one GPU,
    and before it took its devices some domain of its node had at least that many free. Devices
    of another pool or name are taken but lie in no domain.
    """
    # per node, the GPUs each pod holding some took; two may overlap when the watches delivered
    # a release after the bind that reused its devices
    holders: dict[str, dict[str, set[int]]] = {}
    released: set[str] = set()
    eligible = inside = 0
    for name, release in steps:
        node, held = nodes.get(name), devices.get(name)
        if node is None or not held or node not in topologies:
            continue
        on_node = holders.setdefault(node, {})
        if release:
            released.add(name)
            on_node.pop(name, None)
            continue
        if name in released or name in on_node:
            continue
        used = set[int]().union(*on_node.values())
        domains = topologies[node].domains
        gpus = {
            index
            for pool, device in held
            if pool == node and (index := device_index(device)) is not None
        }
        size = sizes[name]
        room = any(len(set(domain) - used) >= size for domain in domains)
        if size > 1 and room:
            eligible += 1
            if len(gpus) == len(held) and any(gpus <= set(domain) for domain in domains):
                inside += 1
        on_node[name] = gpus
    return eligible, inside
