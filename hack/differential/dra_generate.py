"""Seeded Dynamic Resource Allocation scenarios for the differential test (plain API JSON, no I/O).

`generate_dra(seed, nodes, pods, prefix)` returns a `DraScenario`:

- kwok Nodes whose GPUs are published as one ResourceSlice each, in the shape of NVIDIA's DRA
  driver (`hack.localcluster.dra`): 8 H200 in NVLink domains 0-3 and 4-7 (the local cluster's
  D8), 4 H100 (D4), and variants: 8 H200 on an older driver (570.124.6), 2 H100, 4 of a
  Blackwell-class model (values made up: "NVIDIA B200", 180 GiB), 8 shared H200 (the local
  cluster's S8: devices that allow multiple allocations, memory a consumable capacity), and
  nodes without GPUs (no slice). A few nodes carry a NoSchedule node taint.
- device taints: some devices tainted in their slice (effects NoSchedule, NoExecute, None) and
  DeviceTaintRules that taint one device or a whole pool (always naming the scenario's own
  pools, so a shared cluster's other devices are untouched);
- the driver's `gpu.nvidia.com` DeviceClass (applied, shared with other users of the cluster) and
  a scenario class selecting H100s;
- existing pods bound by `spec.nodeName`, each with a ResourceClaim whose allocation (1 to 4
  devices of its node, chosen here; on a shared node, shares of 40Gi or 100Gi with a `shareID`
  and `consumedCapacity`) and reservation the installer writes, so some devices are in use
  before any candidate is judged;
- namespaces: two plain ones and one labelled `resource.kubernetes.io/admin-access: "true"`
  (admission allows `adminAccess` requests only there);
- candidate pods with one or two pod claims, each a fresh ResourceClaim (`Candidate.claims`,
  created just before the pod), a ResourceClaimTemplate (created at install; the resourceclaim
  controller makes the pod's claim), or an existing pod's allocated claim (shared: the pod can
  only go where that claim's devices are). Claim specs mix ExactCount 1/2/4/8, All,
  firstAvailable, CEL selectors on productName, architecture, memory capacity, driverVersion and
  numaNode, matchAttribute / distinctAttribute on pcieRoot, numaNode and productName, request
  tolerations of device taints, adminAccess, a class that does not exist, and capacity requests
  for memory (shares of the shared GPUs, a filter on the others). Some pods add a
  nodeSelector or a toleration of the node taint, so failure messages mix reasons.

Some candidates ask for `nvidia.com/gpu` (1, 2, 4 or 8) and name no claim: the `gpu.nvidia.com`
DeviceClass serves that extended resource (`extendedResourceName`), so each scheduler makes the
pod a claim of its own on the nodes, which publish their GPUs only through DRA.
Left out, and why: a claim that does not exist
(kube-scheduler's PreEnqueue holds such a pod without a verdict, so there is nothing to
compare); allocated claims reserved for nobody (kube-scheduler's PostFilter would deallocate
them, changing the state under the comparison); partitionable devices and binding conditions
(the fake driver publishes none of them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from hack.differential.generate import Candidate, JsonObject
from hack.localcluster import dra

ADMIN_LABEL = "resource.kubernetes.io/admin-access"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
HOSTNAME = "kubernetes.io/hostname"
PRODUCT_LABEL = "nvidia.com/gpu.product"
NODE_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
ATTR = f"device.attributes['{dra.DRIVER}']"
CAPACITY = f"device.capacity['{dra.DRIVER}']"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"
PRODUCT = f"{dra.DRIVER}/productName"

ALLOCATED_AT = "2026-01-01T00:00:00Z"
"""The existing claims' allocation time: kube-scheduler (binding conditions and device status on)
stamps an unstamped allocation when it reserves the claim for one more pod, which the API server
refuses as a change of the immutable allocation, so every allocation here carries one, as
either scheduler writes it."""

OLD_DRIVER = replace(dra.H200_GPU, driver_version="570.124.6")
B200 = replace(
    dra.H200_GPU, product_name="NVIDIA B200", architecture="Blackwell", memory_mib=184320
)
"""Made up for variety (a newer architecture, more memory); not from a recording."""


@dataclass(frozen=True)
class NodeKind:
    name: str
    model: dra.GpuModel | None
    gpus: int
    domains: str | None
    shared: bool = False


NODE_KINDS = (
    NodeKind("D8", dra.H200_GPU, 8, "0-3,4-7"),
    NodeKind("D8", dra.H200_GPU, 8, "0-3,4-7"),
    NodeKind("D4", dra.H100_GPU, 4, "0-1,2-3"),
    NodeKind("D4", dra.H100_GPU, 4, "0-1,2-3"),
    NodeKind("D8-old-driver", OLD_DRIVER, 8, "0-3,4-7"),
    NodeKind("D2", dra.H100_GPU, 2, None),
    NodeKind("B4", B200, 4, "0-3"),
    NodeKind("cpu", None, 0, None),
    NodeKind("S8", dra.H200_GPU, 8, "0-3,4-7", shared=True),
)

SELECTORS = (
    f"{ATTR}.productName == 'NVIDIA H200'",
    f"{ATTR}.productName == 'NVIDIA H100 80GB HBM3'",
    f"{ATTR}.productName.startsWith('NVIDIA H')",
    f"{ATTR}.architecture == 'Hopper'",
    f"{ATTR}.architecture == 'Blackwell'",
    f"{CAPACITY}.memory.compareTo(quantity('100Gi')) >= 0",
    f"{CAPACITY}.memory.isLessThan(quantity('90Gi'))",
    f"{ATTR}.driverVersion.isGreaterThan(semver('575.0.0'))",
    f"{ATTR}.driverVersion.isLessThan(semver('580.0.0'))",
    f"{ATTR}.cudaComputeCapability.major() >= 9",
    "device.attributes['resource.kubernetes.io'].numaNode == 0",
)

DEVICE_TAINTS = (
    {"key": "gpu.nvidia.com/unhealthy", "value": "xid", "effect": "NoSchedule"},
    {"key": "example.com/maintenance", "effect": "NoExecute"},
    {"key": "example.com/maintenance", "effect": "NoSchedule"},
    {"key": "example.com/observe", "effect": "None"},
)
REQUEST_TOLERATIONS = (
    {
        "key": "gpu.nvidia.com/unhealthy",
        "operator": "Equal",
        "value": "xid",
        "effect": "NoSchedule",
    },
    {"key": "example.com/maintenance", "operator": "Exists"},
    {"key": "example.com/drain", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
    {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"},
)

MEMORY_REQUESTS = ("10Gi", "40Gi", "60Gi", "100Gi", "150Gi", "9.5Gi")
"""A request's `capacity.requests.memory`: shares of a shared H200 (143771Mi, default 140Gi,
1Gi steps), or more than some GPUs have."""
SHARES = ("40Gi", "100Gi")
"""What an existing pod's share of a shared GPU consumes."""

EXTENDED_SHARE = 0.1
"""Candidates that ask for `nvidia.com/gpu` instead of naming a claim."""
DRA_FEATURES = (
    "extended-resource",
    "claim",
    "template",
    "shared-claim",
    "two-claims",
    "exact-1",
    "exact-2",
    "exact-4",
    "exact-8",
    "all",
    "first-available",
    "two-requests",
    "selector-product",
    "selector-architecture",
    "selector-capacity",
    "selector-version",
    "selector-numa",
    "match-attribute",
    "distinct-attribute",
    "request-tolerations",
    "admin-access",
    "h100-class",
    "missing-class",
    "node-selector",
    "node-toleration",
    "capacity-request",
)
"""Feature names a DRA candidate is tagged with (the agreement table's rows)."""


@dataclass
class DraScenario:
    nodes: list[JsonObject] = field(default_factory=list)
    slices: list[JsonObject] = field(default_factory=list)
    """One per GPU node; the installer fills in the owner Node's UID."""
    device_classes: list[JsonObject] = field(default_factory=list)
    taint_rules: list[JsonObject] = field(default_factory=list)
    namespaces: list[JsonObject] = field(default_factory=list)
    templates: list[JsonObject] = field(default_factory=list)
    existing: list[JsonObject] = field(default_factory=list)
    existing_claims: list[JsonObject] = field(default_factory=list)
    """Each existing pod's claim (same index), `status` holding the allocation to write (the
    installer adds reservedFor once the pod has its UID)."""
    candidates: list[Candidate] = field(default_factory=list)
    prefix: str = "dra"
    shared_nodes: set[str] = field(default_factory=set)
    """Nodes whose GPUs allow multiple allocations."""

    @property
    def namespace_names(self) -> list[str]:
        return [str(ns["metadata"]["name"]) for ns in self.namespaces]

    @property
    def admin_namespace(self) -> str:
        return f"{self.prefix}-admin"

    @property
    def h100_class(self) -> str:
        return f"{self.prefix}-h100"


def _node(rng: random.Random, name: str, kind: NodeKind) -> JsonObject:
    labels = {HOSTNAME: name, "kubernetes.io/os": "linux", "type": "kwok", "node-kind": kind.name}
    annotations = {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if kind.model is not None:
        labels[PRODUCT_LABEL] = kind.model.product_name.replace(" ", "-")
    if kind.domains is not None:
        annotations["gpu-scheduler.io/nvlink-domains"] = kind.domains
        annotations[dra.NVLINK_DOMAIN_IDS_ANNOTATION] = dra.nvlink_domain_ids(
            name, kind.domains, kind.gpus
        )
    taints = [dict(NODE_TAINT)] if rng.random() < 0.12 else []
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def _slice(rng: random.Random, name: str, kind: NodeKind) -> tuple[JsonObject, list[str]]:
    """The node's slice (some devices tainted) and the names of its untainted devices."""
    assert kind.model is not None
    body = dra.node_resource_slice(name, "", kind.model, kind.gpus, kind.shared)
    free: list[str] = []
    for device in body["spec"]["devices"]:
        if rng.random() < 0.12:
            device["taints"] = [dict(rng.choice(DEVICE_TAINTS))]
        else:
            free.append(str(device["name"]))
    return body, free


def _taint_rules(rng: random.Random, prefix: str, pools: dict[str, list[str]]) -> list[JsonObject]:
    rules: list[JsonObject] = []
    names = sorted(pools)
    for index in range(min(3, len(names))):
        pool = rng.choice(names)
        selector: JsonObject = {"driver": dra.DRIVER, "pool": pool}
        taint: JsonObject
        if index == 0 and rng.random() < 0.7:
            taint = {"key": "example.com/drain", "effect": "NoSchedule"}
        else:
            selector["device"] = f"gpu-{rng.randrange(len(pools[pool]) or 1)}"
            taint = dict(rng.choice(DEVICE_TAINTS))
        rules.append(
            {
                "apiVersion": dra.API_VERSION,
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{prefix}-rule-{index}"},
                "spec": {"deviceSelector": selector, "taint": taint},
            }
        )
    return rules


def _namespaces(prefix: str) -> list[JsonObject]:
    found = []
    for suffix, labels in (("a", {}), ("b", {}), ("admin", {ADMIN_LABEL: "true"})):
        found.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": f"{prefix}-{suffix}", "labels": labels},
            }
        )
    return found


def _container(claim_names: list[str]) -> JsonObject:
    return {
        "name": "main",
        "image": "busybox",
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "claims": [{"name": n} for n in claim_names],
        },
    }


def _claim(name: str, namespace: str, spec: JsonObject, **metadata: Any) -> JsonObject:
    return {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec,
    }


def _existing(
    rng: random.Random, scenario: DraScenario, free: dict[str, list[str]], index: int
) -> None:
    """One existing pod holding 1-4 free devices of a random GPU node through its claim."""
    node = rng.choice([n for n, devices in free.items() if devices])
    count = min(rng.choice((1, 1, 2, 4)), len(free[node]))
    devices = rng.sample(free[node], count)
    for device in devices:
        free[node].remove(device)
    namespace = rng.choice(scenario.namespace_names[:2])
    name = f"{scenario.prefix}-held-{index}"
    exactly: JsonObject = {
        "deviceClassName": dra.GPU_CLASS,
        "allocationMode": "ExactCount",
        "count": count,
    }
    spec = {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}
    results: list[JsonObject] = [
        {"request": "gpus", "driver": dra.DRIVER, "pool": node, "device": d}
        for d in sorted(devices)
    ]
    if node in scenario.shared_nodes:
        memory = rng.choice(SHARES)
        exactly["capacity"] = {"requests": {"memory": memory}}
        for result in results:
            high, low = rng.getrandbits(32), rng.getrandbits(48)
            result["shareID"] = f"{high:08x}-0000-4000-8000-{low:012x}"
            result["consumedCapacity"] = {"memory": memory}
    claim = _claim(name, namespace, spec, finalizers=[DELETE_PROTECTION])
    claim["status"] = {
        "allocation": {
            "devices": {"results": results},
            "allocationTimestamp": ALLOCATED_AT,
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    scenario.existing_claims.append(claim)
    scenario.existing.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "held"}},
            "spec": {
                "nodeName": node,
                "containers": [_container(["gpus"])],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                "tolerations": [{"operator": "Exists"}],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )


def _exact(
    rng: random.Random, scenario: DraScenario, features: set[str], admin: bool
) -> JsonObject:
    roll = rng.random()
    if roll < 0.04:
        features.add("missing-class")
        class_name = f"{scenario.prefix}-absent"
    elif roll < 0.14:
        features.add("h100-class")
        class_name = scenario.h100_class
    else:
        class_name = dra.GPU_CLASS
    found: JsonObject = {"deviceClassName": class_name}
    if rng.random() < 0.1:
        features.add("all")
        found["allocationMode"] = "All"
    else:
        count = rng.choice((1, 1, 2, 2, 4, 8))
        features.add(f"exact-{count}")
        found["allocationMode"] = "ExactCount"
        found["count"] = count
    expressions = rng.sample(SELECTORS, rng.choice((0, 0, 1, 1, 2)))
    for expression in expressions:
        if "productName" in expression:
            features.add("selector-product")
        elif "architecture" in expression:
            features.add("selector-architecture")
        elif "capacity" in expression:
            features.add("selector-capacity")
        elif "Version" in expression or "Capability" in expression:
            features.add("selector-version")
        else:
            features.add("selector-numa")
    if expressions:
        found["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    if rng.random() < 0.2:
        features.add("request-tolerations")
        found["tolerations"] = [dict(t) for t in rng.sample(REQUEST_TOLERATIONS, 1)]
    if admin and rng.random() < 0.5:
        features.add("admin-access")
        found["adminAccess"] = True
    if rng.random() < 0.2:
        features.add("capacity-request")
        found["capacity"] = {"requests": {"memory": rng.choice(MEMORY_REQUESTS)}}
    return found


def _claim_spec(
    rng: random.Random, scenario: DraScenario, features: set[str], admin: bool
) -> JsonObject:
    requests: list[JsonObject] = []
    for number in range(1 if rng.random() < 0.75 else 2):
        name = f"r{number}"
        if rng.random() < 0.15:
            features.add("first-available")
            alternatives = [
                {"name": f"s{i}", **_exact(rng, scenario, features, admin)}
                for i in range(rng.randint(2, 3))
            ]
            requests.append({"name": name, "firstAvailable": alternatives})
        else:
            requests.append({"name": name, "exactly": _exact(rng, scenario, features, admin)})
    if len(requests) > 1:
        features.add("two-requests")
    devices: JsonObject = {"requests": requests}
    if rng.random() < 0.3:
        attribute = rng.choice((PCIE_ROOT, NUMA_NODE, PRODUCT))
        kind = "matchAttribute" if rng.random() < 0.6 else "distinctAttribute"
        features.add("match-attribute" if kind == "matchAttribute" else "distinct-attribute")
        constraint: JsonObject = {kind: attribute}
        if len(requests) > 1 and rng.random() < 0.5:
            constraint["requests"] = [r["name"] for r in requests]
        devices["constraints"] = [constraint]
    return {"devices": devices}


def _extended_candidate(rng: random.Random, namespace: str, name: str) -> Candidate:
    """A pod asking for whole GPUs as the extended resource `nvidia.com/gpu`, no claim."""
    gpus = str(rng.choice((1, 2, 4, 8)))
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi", dra.EXTENDED_RESOURCE: gpus},
            "limits": {dra.EXTENDED_RESOURCE: gpus},
        },
    }
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "dra"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    return Candidate(manifest, ("extended-resource",), [])


def _candidate(rng: random.Random, scenario: DraScenario, index: int) -> Candidate:
    prefix = scenario.prefix
    namespace = rng.choice(scenario.namespace_names)
    admin = namespace == scenario.admin_namespace
    name = f"{prefix}-pod-{index}"
    if rng.random() < EXTENDED_SHARE:
        return _extended_candidate(rng, namespace, name)
    features: set[str] = set()
    pod_claims: list[JsonObject] = []
    fresh: list[JsonObject] = []
    shared = [c for c in scenario.existing_claims if c["metadata"]["namespace"] == namespace]
    count = 1 if rng.random() < 0.8 else 2
    if count == 2:
        features.add("two-claims")
    for number in range(count):
        entry = f"c{number}"
        roll = rng.random()
        if roll < 0.12 and shared:
            features.add("shared-claim")
            target = rng.choice(shared)["metadata"]["name"]
            pod_claims.append({"name": entry, "resourceClaimName": target})
        elif roll < 0.5:
            features.add("template")
            template = f"{name}-{entry}"
            scenario.templates.append(
                {
                    "apiVersion": dra.API_VERSION,
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": template, "namespace": namespace},
                    "spec": {"spec": _claim_spec(rng, scenario, features, admin)},
                }
            )
            pod_claims.append({"name": entry, "resourceClaimTemplateName": template})
        else:
            features.add("claim")
            claim_name = f"{name}-{entry}"
            fresh.append(_claim(claim_name, namespace, _claim_spec(rng, scenario, features, admin)))
            pod_claims.append({"name": entry, "resourceClaimName": claim_name})
    spec: JsonObject = {
        "containers": [_container([c["name"] for c in pod_claims])],
        "resourceClaims": pod_claims,
        "terminationGracePeriodSeconds": 0,
    }
    roll = rng.random()
    if roll < 0.15:
        features.add("node-selector")
        product = rng.choice((dra.H200_GPU, dra.H100_GPU)).product_name.replace(" ", "-")
        spec["nodeSelector"] = {PRODUCT_LABEL: product}
    if rng.random() < 0.3:
        features.add("node-toleration")
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "dra"}},
        "spec": spec,
    }
    return Candidate(manifest, tuple(f for f in DRA_FEATURES if f in features), fresh)


def h100_class(name: str) -> JsonObject:
    """A DeviceClass of the driver's full GPUs that are H100s."""
    return {
        "apiVersion": dra.API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [
                {"cel": {"expression": dra.GPU_CLASS_SELECTOR}},
                {"cel": {"expression": f"{ATTR}.productName == 'NVIDIA H100 80GB HBM3'"}},
            ]
        },
    }


def generate_dra(seed: int, nodes: int, pods: int, prefix: str = "dra") -> DraScenario:
    """The seeded DRA scenario (see the module docstring); the same arguments give the same
    objects."""
    rng = random.Random(seed)
    scenario = DraScenario(prefix=prefix)
    scenario.namespaces = _namespaces(prefix)
    scenario.device_classes = [h100_class(scenario.h100_class)]
    free: dict[str, list[str]] = {}
    for index in range(nodes):
        name = f"{prefix}-node-{index}"
        kind = NODE_KINDS[index % len(NODE_KINDS)] if index < len(NODE_KINDS) else None
        kind = kind or rng.choice(NODE_KINDS)
        scenario.nodes.append(_node(rng, name, kind))
        if kind.shared:
            scenario.shared_nodes.add(name)
        if kind.model is not None:
            body, untainted = _slice(rng, name, kind)
            scenario.slices.append(body)
            free[name] = untainted
    scenario.taint_rules = _taint_rules(rng, prefix, free)
    for index in range(len(free) * 2 // 3):
        if any(free.values()):
            _existing(rng, scenario, free, index)
    scenario.candidates = [_candidate(rng, scenario, i) for i in range(pods)]
    return scenario
