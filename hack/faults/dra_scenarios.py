"""The sole-leader freeze with DRA pods: the replica is frozen while it writes a pod's
ResourceClaim (the finalizer, the allocation and reservation) or its Binding.

`sole_leader_freeze_dra` is `scenarios.sole_leader_freeze` on a scene that also has one `D8`
node, whose eight GPUs are published through DRA, and whose probe pods each take one GPU through
a ResourceClaimTemplate instead of a device-plugin request. The churn workload runs on the
device-plugin nodes as before, so the replica stays busy. Besides the scene's invariants (every
pod that fits bound at rest, no stale write: claim writes are writes like any other, judged by
when they were sent), the claims are checked at rest (`check_claims`):

- `device_shared`: one device allocated to two claims that conflict (either holds it whole, or
  both the same share; an `adminAccess` result takes nothing), as
  `scheduler.core.conflicts.find_device_conflicts` judges it;
- `claim_stranded`: a claim allocated and reserved for a pod that exists and is not bound: the
  undo of a failed PreBind left it behind and nothing retries the pod onto its node.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, cast

from kubernetes_asyncio import client

from hack.faults.invariants import Violation, check_stale_writes
from hack.faults.scenarios import (
    NODE_LABEL,
    Freezes,
    Outcome,
    Scene,
    churn_under_fault,
    eventually,
    freeze_rounds,
    leader,
    sole_leader_config,
    synced,
)
from hack.localcluster import D8
from hack.localcluster.dra import API_VERSION, GPU_CLASS

Obj = Mapping[str, Any]
TEMPLATE = "one-gpu"
"""The ResourceClaimTemplate of the probe pods: one GPU of the DeviceClass `GPU_CLASS`."""


def one_gpu_template() -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def dra_pod(name: str, scheduler: str, node_selector: Mapping[str, str]) -> dict[str, Any]:
    """A pod of `scheduler` taking one GPU through `TEMPLATE`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(node_selector),
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda-job:1",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
        },
    }


def _key(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def check_claims(claims: Iterable[Obj], pods: Iterable[Obj]) -> list[Violation]:
    """`device_shared` and `claim_stranded` (see the module docstring) over ResourceClaims and
    the pods of their namespaces, as JSON."""
    bound = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        bound[str(metadata.get("uid", ""))] = bool((pod.get("spec") or {}).get("nodeName"))
    holders: dict[tuple[str, str, str], list[tuple[str, set[str]]]] = defaultdict(list)
    found = []
    for claim in claims:
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            continue
        shares: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        for result in (allocation.get("devices") or {}).get("results") or ():
            if not result.get("adminAccess"):
                device = (str(result["driver"]), str(result["pool"]), str(result["device"]))
                shares[device].add(str(result.get("shareID") or ""))
        for device, taken in shares.items():
            holders[device].append((_key(claim), taken))
        waiting = [
            str(ref.get("name"))
            for ref in status.get("reservedFor") or ()
            if ref.get("resource") == "pods" and bound.get(str(ref.get("uid"))) is False
        ]
        if waiting:
            found.append(
                Violation(
                    "claim_stranded",
                    _key(claim),
                    f"allocated and reserved for unbound pods {sorted(waiting)}",
                )
            )
    for device, held in sorted(holders.items()):
        clashing: set[str] = set()
        for index, (first, first_shares) in enumerate(held):
            for second, second_shares in held[index + 1 :]:
                if "" in first_shares or "" in second_shares or first_shares & second_shares:
                    clashing.update((first, second))
        if clashing:
            found.append(Violation("device_shared", "/".join(device), f"claims {sorted(clashing)}"))
    return found


async def list_json(call: Any, *args: Any) -> list[dict[str, Any]]:
    response = await call(*args, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(await response.read()).get("items") or []
    return items


async def sole_leader_freeze_dra(scene: Scene, pods: int, rounds: int = 3) -> Outcome:
    """`scenarios.sole_leader_freeze` with DRA probe pods on a `D8` node (module docstring)."""
    await scene.churn_nodes()
    await scene.nodes([scene.spec(D8, 1, "d")])
    resource = client.ResourceV1Api(scene.api)
    await resource.create_namespaced_resource_claim_template(
        scene.namespace, cast(Any, one_gpu_template())
    )
    config = sole_leader_config(scene)
    replica = scene.launch("solo", config)
    lease = str(config["leaderElection"]["leaseName"])
    await eventually(lambda: leader(scene.api, scene.namespace, lease), 60, "the replica leading")
    await synced(replica)
    audit = scene.audit()
    freezes = Freezes()
    selector = {NODE_LABEL: scene.namespace}

    def probe(index: int) -> dict[str, Any]:
        return dra_pod(f"dra-freeze-{index}", scene.namespace, selector)

    fault = "sole leader sigstop, dra"
    workload = scene.workload(max_live=6)
    inject = partial(freeze_rounds, scene, replica, probe, rounds, freezes)
    violations = await churn_under_fault(audit, workload, fault, inject, pods)
    claims = await list_json(resource.list_namespaced_resource_claim, scene.namespace)
    listed = await list_json(scene.core.list_namespaced_pod, scene.namespace)
    violations = [*violations, *check_claims(claims, listed)]
    records = replica.records()
    stale = [v for at in freezes.resumed for v in check_stale_writes(records, at)]
    probes = [p for p in listed if str(p["metadata"]["name"]).startswith("dra-freeze-")]
    notes = {
        "delays_ms": freezes.delays_ms,
        "alive": replica.alive(),
        "probes_bound": sum(1 for p in probes if (p.get("spec") or {}).get("nodeName")),
        "probes": len(probes),
        "claim_releases": sum(1 for r in records if r.get("event") == "claim_released"),
        "bind_failures": sum(1 for r in records if r.get("event") == "bind_failed"),
        "claim_writes": sum(
            1
            for r in records
            if r.get("event") in ("write_done", "write_failed")
            and "/resourceclaims/" in str(r.get("path", ""))
        ),
    }
    return Outcome(
        "sole leader SIGSTOP mid-bind, DRA pods",
        len(freezes.delays_ms),
        pods,
        violations + stale,
        notes,
    )
