"""Seeded random cluster state and pods for the differential test (plain API JSON, no I/O).

`generate(seed, nodes, pods, prefix)` returns a `Scenario`: kwok Nodes with zone and rack labels
(some missing either), taints of every effect, a few cordoned nodes, `nvidia.com/gpu` capacity
with NVLink domain annotations; labelled Namespaces (for namespaceSelector); existing pods bound
by `spec.nodeName` that requests, host ports, labels and required anti-affinity of their own; and
the candidate pods, each a random mix of the features in `FEATURES` (the names the report groups
agreement by). Every name starts with `prefix`, so a run can share a cluster with other objects.

What the generator leaves out, and why:
- ScheduleAnyway spread constraints appear (they are scores, never filters), but kube-scheduler's
  cluster-default constraints are switched off on the reference profile (gpu-scheduler does not
  apply them, docs/compatibility.md), so a pod without constraints is not spread by either.
- No existing pod is terminating: kwok removes a deleted pod's finalizers and the pod soon after,
  so such a pod would change the state under the comparison.
- Existing pods never exceed a node's capacity (kube-scheduler and gpu-scheduler would both count
  an overcommitted node, but a real kubelet would not run such pods).
- The gpu-scheduler-only annotation `gpu-scheduler.io/nvlink-policy: required` is set on a few GPU
  pods (feature "nvlink-required"): there gpu-scheduler may refuse a node kube-scheduler accepts,
  which the report lists as justified, never as a disagreement.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
TOPOLOGY_KEYS = (HOSTNAME, ZONE, RACK)
NVLINK_POLICY = "gpu-scheduler.io/nvlink-policy"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NVLINK_ANNOTATION = "gpu-scheduler.io/nvlink-domains"
FPGA = "example.com/fpga"
MIG = "nvidia.com/mig-1g.10gb"
RUNTIME_CLASS = "differential-overhead"
APPS = ("web", "db", "cache", "batch", "train")
TIERS = ("gold", "silver", "bronze")
TEAMS = ("a", "b", "c")
PORTS = (8080, 9090, 9100)

FEATURES = (
    "resources",
    "init-containers",
    "gpu",
    "node-selector",
    "required-node-affinity",
    "preferred-node-affinity",
    "tolerations",
    "host-ports",
    "pod-affinity",
    "pod-anti-affinity",
    "preferred-pod-affinity",
    "namespace-selector",
    "affinity-match-label-keys",
    "topology-spread",
    "spread-min-domains",
    "spread-policies",
    "spread-match-label-keys",
    "nvlink-required",
    "mig",
    "runtime-class-overhead",
)
"""Feature names a candidate pod is tagged with ("resources" on every pod)."""

# gpus -> NVLink domains, as the project's node types have them
GPU_SHAPES = ((0, None), (2, "0-1"), (4, "0-1,2-3"), (8, "0-3,4-7"))


@dataclass
class Candidate:
    """One generated pod: its manifest (no schedulerName yet) and the features it uses."""

    manifest: JsonObject
    features: tuple[str, ...]
    claims: list[JsonObject] = field(default_factory=list)  # DRA: made just before the pod

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


def runtime_class() -> JsonObject:
    """A RuntimeClass whose admission adds pod overhead (spec.overhead) to the pods using it."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": "runc",
        "overhead": {"podFixed": {"cpu": "1500m", "memory": "512Mi"}},
    }


@dataclass
class Scenario:
    nodes: list[JsonObject] = field(default_factory=list)
    namespaces: list[JsonObject] = field(default_factory=list)
    existing: list[JsonObject] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    prefix: str = "d"

    @property
    def namespace_names(self) -> list[str]:
        return [str(ns["metadata"]["name"]) for ns in self.namespaces]


@dataclass
class _Room:
    """What is left on a node while placing existing pods."""

    cpu_m: int
    memory_mi: int
    gpus: int
    pods: int = 110
    ports: set[tuple[int, str]] = field(default_factory=set)


def _node(rng: random.Random, name: str, zones: int, racks: int) -> tuple[JsonObject, _Room]:
    gpus, domains = rng.choice(GPU_SHAPES)
    cpu = rng.choice((8, 16, 32, 64))
    memory_gi = rng.choice((32, 64, 256))
    zone = rng.randrange(zones)
    labels = {
        HOSTNAME: name,
        "kubernetes.io/os": "linux",
        "type": "kwok",
        "tier": rng.choice(TIERS),
        "disk": rng.choice(("ssd", "hdd")),
        "example.com/generation": str(rng.randrange(1, 6)) if rng.random() > 0.03 else "new",
    }
    roll = rng.random()
    if roll > 0.07:
        labels[ZONE] = f"zone-{zone}"
    elif roll > 0.05:
        labels[ZONE] = ""
    if rng.random() > 0.08:
        labels[RACK] = f"rack-{zone}-{rng.randrange(racks)}"
    if gpus:
        labels["nvidia.com/gpu.count"] = str(gpus)
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if domains and rng.random() < 0.05:  # an annotation that disagrees with the GPU count
        domains = rng.choice(("0-3,4-7", "0-1"))
    if domains and rng.random() > 0.05:  # else the default layout for the GPU count applies
        annotations[NVLINK_ANNOTATION] = domains
    taints: list[JsonObject] = []
    roll = rng.random()
    if roll < 0.03:
        taints.append({"key": "dedicated", "value": "gpu", "effect": "NoExecute"})
        taints.append({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
    elif roll < 0.12:
        taints.append(
            {"key": "dedicated", "value": rng.choice(("gpu", "infra")), "effect": "NoSchedule"}
        )
    elif roll < 0.17:
        taints.append({"key": "maintenance", "effect": "NoExecute"})
    elif roll < 0.25:
        taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
    resources = {
        "cpu": str(cpu),
        "memory": f"{memory_gi}Gi",
        "pods": str(rng.choice((110, 110, 110, 4))),
        "ephemeral-storage": rng.choice(("1Ti", "20Gi")),
        "nvidia.com/gpu": str(gpus),
    }
    if not gpus and rng.random() < 0.5:
        del resources["nvidia.com/gpu"]
    if rng.random() < 0.2:
        resources[FPGA] = str(rng.randint(1, 2))
    if rng.random() < 0.15:  # MIG-only nodes, or mixed (whole GPUs and MIG slices)
        resources[MIG] = str(rng.choice((3, 7)))
    allocatable = dict(resources)
    if rng.random() < 0.3:  # system reserved
        allocatable["cpu"] = f"{cpu * 1000 - 500}m"
        allocatable["memory"] = f"{memory_gi * 1024 - 1024}Mi"
        cpu_m = cpu * 1000 - 500
    else:
        cpu_m = cpu * 1000
    if gpus and rng.random() < 0.08:  # an unhealthy GPU: the device plugin reports one less
        gpus -= 1
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: JsonObject = {"taints": taints}
    if rng.random() < 0.03:
        spec["unschedulable"] = True
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": allocatable,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }
    return node, _Room(cpu_m, memory_gi * 1024 - 1024, gpus, pods=int(resources["pods"]))


def _namespaces(prefix: str) -> list[JsonObject]:
    envs = {"a": "prod", "b": "dev", "c": "prod"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": f"{prefix}-{team}",
                "labels": {f"{prefix}-team": team, f"{prefix}-env": envs[team]},
            },
        }
        for team in TEAMS
    ]


def _container(
    cpu_m: int,
    memory_mi: int,
    gpus: int,
    ports: list[tuple[int, str]] | None = None,
    host_ip: str = "",
) -> JsonObject:
    requests: JsonObject = {"cpu": f"{cpu_m}m", "memory": f"{memory_mi}Mi"}
    if cpu_m % 1000 == 0 and cpu_m % 3 == 0:  # quantities in several spellings
        requests["cpu"] = str(cpu_m // 1000)
    elif cpu_m % 500 == 0 and cpu_m % 1000:
        requests["cpu"] = f"{cpu_m / 1000:g}"
    if memory_mi % 8 == 0 and memory_mi % 5 == 0:
        requests["memory"] = f"{memory_mi * 1024}Ki"
    elif memory_mi % 1024 == 0 and memory_mi % 3 == 0:
        requests["memory"] = f"{memory_mi * 1048576 // 1000000}M"
    if cpu_m == 0:
        requests = {}  # no requests at all
    container: JsonObject = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": requests},
    }
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if ports:
        container["ports"] = [
            {"containerPort": port, "hostPort": port, "protocol": protocol}
            for port, protocol in ports
        ]
        if host_ip:
            for entry in container["ports"]:
                entry["hostIP"] = host_ip
    return container


def _selector(rng: random.Random) -> JsonObject:
    apps = rng.sample(APPS, rng.randint(1, 2))
    roll = rng.random()
    if roll < 0.04:
        return {}  # selects every pod
    if roll < 0.1:
        return {
            "matchExpressions": [
                {"key": "app", "operator": "NotIn", "values": apps},
                {"key": "tier", "operator": rng.choice(("Exists", "DoesNotExist"))},
            ]
        }
    if roll < 0.5:
        return {"matchExpressions": [{"key": "app", "operator": "In", "values": apps}]}
    return {"matchLabels": {"app": apps[0]}}


def _existing(
    rng: random.Random, scenario: Scenario, rooms: dict[str, _Room], count: int
) -> list[JsonObject]:
    pods: list[JsonObject] = []
    names = list(rooms)
    for index in range(count):
        node = rng.choice(names)
        room = rooms[node]
        cpu_m = rng.choice((100, 500, 1000, 4000))
        memory_mi = rng.choice((128, 1024, 8192))
        gpus = rng.choice((0, 0, 1, 1, 2, 4)) if room.gpus else 0
        if cpu_m > room.cpu_m or memory_mi > room.memory_mi or gpus > room.gpus or room.pods < 1:
            continue
        room.pods -= 1
        ports: list[tuple[int, str]] = []
        host_ip = ""
        if rng.random() < 0.15:
            port = (rng.choice(PORTS), rng.choice(("TCP", "UDP")))
            if port not in room.ports:
                ports.append(port)
                host_ip = rng.choice(("", "", "127.0.0.1", "0.0.0.0"))
        room.cpu_m -= cpu_m
        room.memory_mi -= memory_mi
        room.gpus -= gpus
        room.ports.update(ports)
        labels = {"app": rng.choice(APPS), "tier": rng.choice(TIERS)}
        if rng.random() < 0.3:
            labels["pod-template-hash"] = rng.choice(("h1", "h2"))
        spec: JsonObject = {
            "nodeName": node,
            "containers": [_container(cpu_m, memory_mi, gpus, ports, host_ip)],
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
        }
        if ports and rng.random() < 0.3:  # the port on a sidecar instead
            sidecar = _container(10, 16, 0, ports, host_ip)
            sidecar["name"] = "sidecar"
            sidecar["restartPolicy"] = "Always"
            spec["initContainers"] = [sidecar]
            del spec["containers"][0]["ports"]
        if rng.random() < 0.06:
            spec["affinity"] = {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": _selector(rng),
                            "topologyKey": rng.choice(TOPOLOGY_KEYS),
                            **rng.choice(
                                (
                                    {},
                                    {"namespaceSelector": {}},
                                    {
                                        "namespaceSelector": {
                                            "matchLabels": {f"{scenario.prefix}-env": "dev"}
                                        }
                                    },
                                )
                            ),
                        }
                    ]
                }
            }
        metadata: JsonObject = {
            "name": f"{scenario.prefix}-existing-{index}",
            "namespace": rng.choice(scenario.namespace_names),
            "labels": labels,
        }
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    return pods


def _pod_term(
    rng: random.Random, prefix: str, features: set[str], labels: dict[str, str]
) -> JsonObject:
    selector = _selector(rng)
    if rng.random() < 0.3:  # selects the pod itself (kube-scheduler's first-pod rule)
        selector = {"matchLabels": {"app": labels["app"]}}
    term: JsonObject = {"labelSelector": selector, "topologyKey": rng.choice(TOPOLOGY_KEYS)}
    if rng.random() < 0.04:
        del term["labelSelector"]  # selects no pod
    if "pod-template-hash" in labels and "labelSelector" in term and rng.random() < 0.3:
        features.add("affinity-match-label-keys")
        term[rng.choice(("matchLabelKeys", "mismatchLabelKeys"))] = ["pod-template-hash"]
    roll = rng.random()
    if roll < 0.25:
        features.add("namespace-selector")
        term["namespaceSelector"] = rng.choice(
            (
                {},
                {"matchLabels": {f"{prefix}-env": "prod"}},
                {
                    "matchExpressions": [
                        {"key": f"{prefix}-team", "operator": "In", "values": ["b"]}
                    ]
                },
            )
        )
    if 0.15 < roll < 0.4:
        term["namespaces"] = rng.sample([f"{prefix}-{t}" for t in TEAMS], rng.randint(1, 2))
    return term


def _node_requirement(rng: random.Random) -> JsonObject:
    kind = rng.randrange(7)
    if kind == 0:
        return {"key": "tier", "operator": "In", "values": rng.sample(TIERS, rng.randint(1, 2))}
    if kind == 1:
        return {"key": "disk", "operator": "NotIn", "values": ["hdd"]}
    if kind == 2:
        return {"key": RACK, "operator": rng.choice(("Exists", "DoesNotExist"))}
    if kind == 3:
        return {
            "key": "example.com/generation",
            "operator": rng.choice(("Gt", "Lt")),
            "values": [str(rng.randrange(1, 6))],
        }
    if kind == 4:
        return {"key": ZONE, "operator": "In", "values": [f"zone-{rng.randrange(4)}"]}
    if kind == 5:
        return {"key": "nvidia.com/gpu.count", "operator": "In", "values": ["4", "8"]}
    return {"key": "tier", "operator": "NotIn", "values": ["bronze"]}


def _node_affinity(rng: random.Random, names: list[str], features: set[str]) -> JsonObject:
    affinity: JsonObject = {}
    if rng.random() < 0.6:
        features.add("required-node-affinity")
        terms = []
        for _ in range(rng.randint(1, 2)):
            term: JsonObject = {
                "matchExpressions": [_node_requirement(rng) for _ in range(rng.randint(1, 2))]
            }
            if rng.random() < 0.1:
                term["matchFields"] = [
                    {
                        "key": "metadata.name",
                        "operator": rng.choice(("In", "NotIn")),
                        "values": [rng.choice(names)],
                    }
                ]
            terms.append(term)
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if rng.random() < 0.5 or not affinity:
        features.add("preferred-node-affinity")
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": rng.randint(1, 100),
                "preference": {"matchExpressions": [_node_requirement(rng)]},
            }
        ]
    return affinity


def _tolerations(rng: random.Random) -> list[JsonObject]:
    options: list[JsonObject] = [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists"},
        {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Equal", "value": "true"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "maintenance",
            "operator": "Equal",
            "value": "",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
        {"key": "dedicated", "operator": "Equal", "value": "infra"},
    ]
    return rng.sample(options, rng.randint(1, 2))


def _spread(rng: random.Random, labels: dict[str, str], features: set[str]) -> list[JsonObject]:
    constraints: list[JsonObject] = []
    keys = rng.sample(TOPOLOGY_KEYS, rng.randint(1, 2))
    for key in keys:
        constraint: JsonObject = {
            "maxSkew": rng.randint(1, 3),
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule" if rng.random() < 0.85 else "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": labels["app"]}}
            if rng.random() < 0.7
            else _selector(rng),
        }
        if rng.random() < 0.05:
            del constraint["labelSelector"]  # selects no pod
        if constraint["whenUnsatisfiable"] == "DoNotSchedule" and rng.random() < 0.3:
            features.add("spread-min-domains")
            constraint["minDomains"] = rng.randint(1, 6)
        if rng.random() < 0.35:
            features.add("spread-policies")
            constraint["nodeAffinityPolicy"] = rng.choice(("Honor", "Ignore"))
            constraint["nodeTaintsPolicy"] = rng.choice(("Honor", "Ignore"))
        if "pod-template-hash" in labels and "labelSelector" in constraint and rng.random() < 0.6:
            features.add("spread-match-label-keys")
            constraint["matchLabelKeys"] = ["pod-template-hash"]
        constraints.append(constraint)
    return constraints


def _candidate(rng: random.Random, scenario: Scenario, index: int, names: list[str]) -> Candidate:
    prefix = scenario.prefix
    features = {"resources"}
    labels = {"app": rng.choice((*APPS, "solo"))}
    if rng.random() < 0.4:
        labels["pod-template-hash"] = rng.choice(("h1", "h2"))
    gpus = rng.choice((0, 0, 1, 1, 2, 4, 8))
    if gpus:
        features.add("gpu")
    cpu_m = rng.choice((0, 100, 500, 1500, 2000, 3000, 8000, 30000))
    memory_mi = rng.choice((256, 4096, 32768, 200000))
    ports: list[tuple[int, str]] = []
    if rng.random() < 0.15:
        features.add("host-ports")
        ports.append((rng.choice(PORTS), rng.choice(("TCP", "UDP"))))
    host_ip = rng.choice(("", "", "127.0.0.1", "10.0.0.7", "0.0.0.0")) if ports else ""
    spec: JsonObject = {"containers": [_container(cpu_m, memory_mi, gpus, ports, host_ip)]}
    requests = spec["containers"][0]["resources"]["requests"]
    if rng.random() < 0.1:
        requests["ephemeral-storage"] = rng.choice(("1Gi", "50Gi"))
    if rng.random() < 0.08:
        requests[FPGA] = str(rng.randint(1, 2))
        spec["containers"][0]["resources"].setdefault("limits", {})[FPGA] = requests[FPGA]
    if rng.random() < 0.06:
        features.add("mig")
        requests[MIG] = str(rng.randint(1, 4))
        spec["containers"][0]["resources"].setdefault("limits", {})[MIG] = requests[MIG]
    if rng.random() < 0.06:
        features.add("runtime-class-overhead")
        spec["runtimeClassName"] = RUNTIME_CLASS
    if rng.random() < 0.15:
        features.add("init-containers")
        spec["initContainers"] = []
        for number in range(rng.randint(1, 3)):  # regular and sidecar, in random order
            init_gpus = rng.choice((0, 0, 1, 4))
            init = _container(
                rng.choice((1000, 6000, 16000, 40000)), rng.choice((128, 8192, 65536)), init_gpus
            )
            init["name"] = f"init-{number}"
            if rng.random() < 0.2:
                features.add("host-ports")
                port = rng.choice(PORTS)
                init["ports"] = [{"containerPort": port, "hostPort": port, "protocol": "TCP"}]
            if rng.random() < 0.5:
                init["restartPolicy"] = "Always"  # a sidecar
            spec["initContainers"].append(init)
    if rng.random() < 0.05:  # requests defaulted from limits by the API server
        main = spec["containers"][0]["resources"]
        main.setdefault("limits", {}).update(
            {k: v for k, v in main["requests"].items() if k in ("cpu", "memory")}
        )
        main["requests"] = {k: v for k, v in main["requests"].items() if k not in ("cpu", "memory")}
    if rng.random() < 0.05 and "initContainers" not in spec:
        spec["resources"] = {
            "requests": {"cpu": f"{cpu_m + 1000}m", "memory": f"{memory_mi + 1024}Mi"}
        }
    annotations: dict[str, str] = {}
    if rng.random() < 0.04:  # the API server sets each hostPort to its containerPort
        features.add("host-ports")
        spec["hostNetwork"] = True
        spec["containers"][0]["ports"] = [{"containerPort": rng.choice(PORTS), "protocol": "TCP"}]
    if rng.random() < 0.25:
        features.add("node-selector")
        spec["nodeSelector"] = rng.choice(
            ({"tier": rng.choice(TIERS)}, {"disk": "ssd"}, {ZONE: f"zone-{rng.randrange(4)}"})
        )
    affinity: JsonObject = {}
    if rng.random() < 0.35:
        affinity["nodeAffinity"] = _node_affinity(rng, names, features)
    if rng.random() < 0.25:
        features.add("pod-affinity")
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                _pod_term(rng, prefix, features, labels) for _ in range(rng.randint(1, 2))
            ]
        }
    if rng.random() < 0.25:
        features.add("pod-anti-affinity")
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                _pod_term(rng, prefix, features, labels)
            ]
        }
    if rng.random() < 0.1:
        features.add("preferred-pod-affinity")
        kind = rng.choice(("podAffinity", "podAntiAffinity"))
        affinity.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": rng.randint(1, 100),
                "podAffinityTerm": _pod_term(rng, prefix, features, labels),
            }
        ]
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.4:
        features.add("tolerations")
        spec["tolerations"] = _tolerations(rng)
    if rng.random() < 0.35:
        features.add("topology-spread")
        spec["topologySpreadConstraints"] = _spread(rng, labels, features)
    if gpus and rng.random() < 0.08:
        features.add("nvlink-required")
        annotations[NVLINK_POLICY] = "required"
    metadata: JsonObject = {
        "name": f"{prefix}-pod-{index}",
        "namespace": rng.choice(scenario.namespace_names),
        "labels": labels,
    }
    if annotations:
        metadata["annotations"] = annotations
    spec["terminationGracePeriodSeconds"] = 0
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    return Candidate(manifest, tuple(f for f in FEATURES if f in features))


def generate(seed: int, nodes: int, pods: int, prefix: str = "d") -> Scenario:
    """The seeded scenario (see the module docstring); the same arguments give the same objects."""
    rng = random.Random(seed)
    scenario = Scenario(prefix=prefix)
    scenario.namespaces = _namespaces(prefix)
    zones = max(2, min(4, nodes // 15))
    racks = max(2, min(8, nodes // 20))
    rooms: dict[str, _Room] = {}
    for index in range(nodes):
        name = f"{prefix}-node-{index}"
        node, room = _node(rng, name, zones, racks)
        scenario.nodes.append(node)
        rooms[name] = room
    scenario.existing = _existing(rng, scenario, rooms, int(nodes * 1.5))
    names = list(rooms)
    scenario.candidates = [_candidate(rng, scenario, i, names) for i in range(pods)]
    return scenario
