"""The sole-leader freeze with DRA pods: the replica is frozen while it writes a pod's
ResourceClaim (the finalizer, the allocation and reservation) or its Binding.

`sole_leader_freeze_dra` is `scenarios.sole_leader_freeze` on a scene that also has one `D8`
node, whose eight GPUs are published through DRA, and whose probe pods each take one GPU through
a ResourceClaimTemplate instead of a device-plugin request. The churn workload runs on the
device-plugin nodes as before, so the replica stays busy; the `D8` node is tainted `DRA_ONLY`,
which only the probe pods tolerate. Besides the scene's invariants (every
pod that fits bound at rest, no stale write: claim writes are writes like any other, judged by
when they were sent), the claims are checked at rest (`claims_at_rest`): `device_shared`,
`claim_stranded`, `claim_unreserved` and `pod_without_claims` of `hack.faults.dra_invariants`.

The other DRA fault families (`hack.faults.dra_faults`) share this module's scene: `dra_nodes`
(`D8` nodes and the template), `dra_pod` and `extended_pod` (one GPU through the template, or
`nvidia.com/gpu: 1`, which the DeviceClass serves through a claim gpu-scheduler creates), and
`claims_at_rest`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, cast

from kubernetes_asyncio import client

from hack.faults.dra_invariants import check_claims, check_pods_claims, check_unreserved
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
from hack.localcluster.dra import API_VERSION, EXTENDED_RESOURCE, GPU_CLASS

Obj = Mapping[str, Any]
TEMPLATE = "one-gpu"
"""The ResourceClaimTemplate of the probe pods: one GPU of the DeviceClass `GPU_CLASS`."""
DRA_ONLY = "faults.gpu-scheduler.io/dra-only"
"""Taint (NoSchedule) keeping the churn workload's `nvidia.com/gpu` pods off the DRA node of a
scene that also has device-plugin nodes: the DeviceClass serves `nvidia.com/gpu` there too, and
they would take the GPUs the probe pods need. DRA pods tolerate it."""


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
    """A pod of `scheduler` taking one GPU through `TEMPLATE`; it tolerates `DRA_ONLY`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(node_selector),
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}],
            "tolerations": [{"key": DRA_ONLY, "operator": "Exists", "effect": "NoSchedule"}],
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


def extended_pod(name: str, scheduler: str, node_selector: Mapping[str, str]) -> dict[str, Any]:
    """A pod of `scheduler` asking for `nvidia.com/gpu: 1`; on a DRA node gpu-scheduler serves it
    through a claim it creates (the DeviceClass's `extendedResourceName`)."""
    pod = dra_pod(name, scheduler, node_selector)
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {EXTENDED_RESOURCE: "1"},
    }
    return pod


async def dra_nodes(scene: Scene, count: int = 1, dra_only: bool = False) -> list[str]:
    """`count` `D8` nodes of the scene (eight GPUs each, through DRA), tainted `DRA_ONLY` when
    `dra_only`, and the template."""
    spec = scene.spec(D8, count, "d")
    if dra_only:
        spec = replace(spec, taints=[{"key": DRA_ONLY, "value": "true", "effect": "NoSchedule"}])
    names = await scene.nodes([spec])
    await client.ResourceV1Api(scene.api).create_namespaced_resource_claim_template(
        scene.namespace, cast(Any, one_gpu_template())
    )
    return names


async def list_claims(scene: Scene) -> list[dict[str, Any]]:
    resource = client.ResourceV1Api(scene.api)
    return await list_json(resource.list_namespaced_resource_claim, scene.namespace)


async def claims_at_rest(scene: Scene, gap_s: float = 3.0) -> list[Violation]:
    """Every invariant of `hack.faults.dra_invariants` at rest: the claims listed twice `gap_s`
    apart (longer than a scheduling cycle, for `claim_unreserved`), the pods in between."""
    first = await list_claims(scene)
    await asyncio.sleep(gap_s)
    pods = await list_json(scene.core.list_namespaced_pod, scene.namespace)
    claims = await list_claims(scene)
    return [
        *check_claims(claims, pods),
        *check_unreserved(first, claims),
        *check_pods_claims(pods, claims, {scene.namespace}),
    ]


async def list_json(call: Any, *args: Any) -> list[dict[str, Any]]:
    response = await call(*args, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(await response.read()).get("items") or []
    return items


async def sole_leader_freeze_dra(scene: Scene, pods: int, rounds: int = 3) -> Outcome:
    """`scenarios.sole_leader_freeze` with DRA probe pods on a `D8` node (module docstring)."""
    await scene.churn_nodes()
    await dra_nodes(scene, dra_only=True)
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
    violations = [*violations, *await claims_at_rest(scene)]
    listed = await list_json(scene.core.list_namespaced_pod, scene.namespace)
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
