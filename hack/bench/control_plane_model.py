"""The control-plane benchmark's data (`python -m hack.bench.control_plane`): its knobs, what
one run measured, the cluster and the pod set, and the pure replays over them.

- `Options` (one benchmark's knobs, the same for every run) and `RunResult` (one run's figures);
  `mode_name` labels an arrival mode.
- `node_specs`, `topologies_of`: the cluster's kwok nodes of the seed types and their NVLink
  domains; `pod_sizes`, `pod_name`, `pod_manifest`: the seeded pod set, in creation order.
- `plan_bindings` (the ceiling's next-fit plan) and `nvlink_quality` (the one-domain replay of a
  run's bindings), pure.
- The run labels and scheduler names shared by the benchmarks (`KUBE_SCHEDULER`,
  `KUBE_DEFAULTS`, `BASELINES`, `NOBODY`) and the pods' node selector (`KWOK_SELECTOR`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hack.bench.churn import Step
from hack.bench.dra_shares import DraPods, ShareUse, share_requests, shared_sizes
from hack.bench.dra_workload import dra_node_specs, extended_indices
from hack.localcluster import SEED_NODE_TYPES, NodeSpec
from topology.domains import NodeTopology, parse_domains
from topology.occupancy import choose_gpus, parse_gpus_annotation

POD_SIZES = (1, 2, 4, 8)
DEFAULT_MIX = (0.4, 0.3, 0.2, 0.1)
NOBODY = "bench-nobody"
KUBE_SCHEDULER = "default-scheduler"
KUBE_DEFAULTS = "kube-defaults"
"""The run label, component and scheduler name of the kube-scheduler at its own client limits."""
BASELINES = ("kube-scheduler", KUBE_DEFAULTS)
KWOK_SELECTOR: Mapping[str, str] = {"type": "kwok"}


@dataclass(frozen=True)
class Options:
    """One benchmark's knobs; the same for every run of it."""

    pods: int = 5000
    qps: int = 400
    """Client rate limit of kube-scheduler and of the ceiling loop (burst twice this)."""
    seed: int = 0
    mix: tuple[float, ...] = DEFAULT_MIX
    """Shares of pods asking for 1, 2, 4 and 8 GPUs."""
    settle_s: float = 15.0
    """A run with pods left unbound ends this long after the last pod was bound or created."""
    create_concurrency: int = 32
    bind_concurrency: int = 64
    """Bindings in flight at once in the ceiling loop."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: dict(KWOK_SELECTOR))
    gpu_scheduler_name: str = "gpu-scheduler"
    namespace_prefix: str = "bench"
    rates: tuple[float, ...] = ()
    """Steady arrival rates (pods created a second), each a mode of its own besides the burst."""
    burst: bool = True
    """Whether the burst mode (all pods at once) runs."""
    variants: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """Extra gpu-scheduler runs: (label, configuration overrides merged into its config file)."""
    features: bool = False
    """The feature mix (`feature_kinds`): pods with pod affinity, topology spread and gangs
    instead of plain pods."""
    trees: tuple[tuple[str, str], ...] = ()
    """Extra gpu-scheduler runs from other checkouts of the repository: (label, path), default
    settings; e.g. the tree before a change, measured side by side with the current one."""
    dra: bool = False
    """DRA nodes and pods with claims from templates (`hack.bench.dra_workload`)."""
    profile: str = ""
    """When set, one more gpu-scheduler run (default settings, burst mode only, label
    "cprofile") under `python -m cProfile -o <profile>`; its figures include cProfile's cost."""
    profile_variant: str = ""
    """When set, the cprofile run takes the settings of the variant of this label."""
    lifetime: float | None = None
    """Churn: each pod is deleted (grace 0) this many seconds after it was seen bound, while
    the others keep arriving (`hack.bench.churn`); no ceiling run then."""
    dra_extended: float = 0.0
    """With `dra`: the share of pods asking for `nvidia.com/gpu` (served through the
    DeviceClass's `extendedResourceName`) instead of naming a template."""
    shared: float = 0.0
    """With `dra`: S8 nodes, and the share of pods asking for part of one GPU's memory
    (`hack.bench.dra_shares`)."""
    share_sizes: tuple[int, ...] = ()
    """With `shared`: the sizes (Gi) shares are drawn from; empty: the openb trace's."""
    kube_defaults: bool = False
    """One more kube-scheduler run per mode: a second kube-scheduler (profile `kube-defaults`)
    at its own client defaults, qps 50 and burst 100, so that each scheduler is also measured
    at its defaults."""

    def dra_pods(self) -> DraPods:
        """What each pod of the set asks for in the DRA mode."""
        extended = extended_indices(self.pods, self.dra_extended, self.seed)
        shares = share_requests(self.pods, self.shared, self.seed, self.share_sizes)
        return DraPods(shares, extended)

    def cluster_nodes(self, count: int) -> list[NodeSpec]:
        """A cluster's `count` nodes: the seed types, D8 with `dra`, S8 with `shared`."""
        return dra_node_specs(count, shared=self.shared > 0) if self.dra else node_specs(count)

    def sizes(self) -> list[int]:
        """Whole GPUs asked by each pod of the set, in creation order (0 for a share pod)."""
        return shared_sizes(pod_sizes(self.pods, self.seed, self.mix), self.dra_pods().shares)

    def modes(self) -> list[float | None]:
        """The arrival modes to run, in order: None is the burst, a number a steady rate."""
        return ([None] if self.burst else []) + list(self.rates)


def mode_name(rate: float | None) -> str:
    """ "burst", or "50/s" for a steady rate."""
    return "burst" if rate is None else f"{rate:g}/s"


@dataclass(frozen=True)
class RunResult:
    nodes: int
    run: str
    pods: int
    bound: int
    pending: int
    gpus_bound: int
    seconds: float
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_s: float | None
    cpu_s_per_1000_pods: float | None
    peak_rss_mib: float | None
    multi_gpu_pods: int
    one_domain_pods: int
    one_domain_pct: float | None
    mode: str = "burst"
    deleted: int = 0
    """Pods deleted during the run (churn)."""
    peak_gpus: int = 0
    """The most GPUs held at once by the run's bound pods (all of them without churn)."""
    placed: dict[str, str] = field(default_factory=dict)
    """Pod name -> the node it was first seen bound to."""
    pending_why: dict[str, str] = field(default_factory=dict)
    """Pod name -> its PodScheduled=False message when the run ended, for each pending pod
    (`hack.bench.pending`)."""
    shares: ShareUse | None = None
    """With `Options.shared`: what the share pods held when the run ended (not the ceiling)."""
    apiserver_cpu_s_per_1000_pods: float | None = None
    """The API server's CPU seconds from the first create to the last bind, per 1,000 pods
    bound: every client's requests in that window (the benchmark's creates, the scheduler's
    writes, kwok's status updates, the watches); None when not measured."""


# -- the cluster and the pod set ---------------------------------------------------------------


def node_specs(
    count: int, prefix: str = "", labels: Mapping[str, str] | None = None
) -> list[NodeSpec]:
    """`count` nodes of the seed types in equal shares (the first types take the remainder)."""
    kinds = len(SEED_NODE_TYPES)
    return [
        replace(
            spec,
            type_name=prefix + spec.type_name,
            count=count // kinds + (1 if index < count % kinds else 0),
            labels={**spec.labels, **(labels or {})},
        )
        for index, spec in enumerate(SEED_NODE_TYPES)
    ]


def topologies_of(specs: Sequence[NodeSpec]) -> dict[str, NodeTopology]:
    """NVLink domains of every node of `specs`, by node name."""
    topologies: dict[str, NodeTopology] = {}
    for spec in specs:
        topology = parse_domains(spec.nvlink_domains or "", spec.gpus)
        topologies.update(dict.fromkeys(spec.node_names(), topology))
    return topologies


def pod_sizes(count: int, seed: int, mix: Sequence[float] = DEFAULT_MIX) -> list[int]:
    """GPUs asked by each pod of the set, in creation order (seeded)."""
    rng = np.random.default_rng(seed)
    shares = np.asarray(mix, dtype=float)  # shares: (sizes,)
    return [int(g) for g in rng.choice(POD_SIZES, size=count, p=shares / shares.sum())]


def pod_name(index: int) -> str:
    return f"p-{index:05d}"


def pod_manifest(
    name: str, gpus: int, scheduler_name: str, node_selector: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(node_selector),
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
        },
    }


def plan_bindings(sizes: Sequence[int], capacity: Sequence[tuple[str, int]]) -> dict[int, str]:
    """Node for each pod index the ceiling loop binds: next fit by free GPUs, in pod order.

    Pods that fit nowhere are left out. Free GPUs only shrink, so once a size fits nowhere no
    larger pod is tried again.
    """
    free = [gpus for _, gpus in capacity]
    plan: dict[int, str] = {}
    cursor, too_big = 0, math.inf
    for index, need in enumerate(sizes):
        if need >= too_big:
            continue
        for step in range(len(free)):
            row = (cursor + step) % len(free)
            if free[row] >= need:
                free[row] -= need
                plan[index] = capacity[row][0]
                cursor = row
                break
        else:
            too_big = need
    return plan


def nvlink_quality(
    steps: Sequence[Step],
    sizes: Mapping[str, int],
    nodes: Mapping[str, str],
    annotated: Mapping[str, str | None],
    topologies: Mapping[str, NodeTopology],
) -> tuple[int, int]:
    """(bound pods a domain could hold asking for more than one GPU, those inside one domain).

    Pods are replayed per node in the order of `steps` (`hack.bench.churn`): at its bind a pod
    takes its annotation's GPUs when it has one, else the best choice among the node's GPUs
    still free (`choose_gpus`); at its release it gives them back.
    """
    largest = max((len(d) for t in topologies.values() for d in t.domains), default=0)
    holders: dict[str, dict[str, tuple[int, ...]]] = {}
    released: set[str] = set()
    eligible = inside = 0
    for name, release in steps:
        node = nodes.get(name)
        if node is None or node not in topologies:
            continue
        on_node = holders.setdefault(node, {})
        if release:
            released.add(name)
            on_node.pop(name, None)
            continue
        if name in released or name in on_node:
            continue
        topology = topologies[node]
        mask = np.zeros(topology.gpu_count, dtype=np.bool_)  # mask: (gpus,)
        for taken in on_node.values():
            mask[list(taken)] = True
        size = sizes[name]
        text = annotated.get(name)
        if text:
            gpus = parse_gpus_annotation(text, topology.gpu_count)
        else:
            choice = choose_gpus(topology, mask, size)
            gpus = choice.gpus if choice is not None else ()
        on_node[name] = tuple(gpus)
        if 1 < size <= largest:
            eligible += 1
            if gpus and any(set(gpus) <= set(domain) for domain in topology.domains):
                inside += 1
    return eligible, inside
