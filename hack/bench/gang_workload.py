"""The gang benchmark's cluster and job mix: pure, seeded, no API calls.

Nodes: `racks` racks, each holding `nodes_per_rack` kwok nodes of the three seed types in equal
shares (G1 2 GPUs in one NVLink domain, G2 4 GPUs in two domains of 2, G2-Expansion 8 GPUs in two
domains of 4), labelled `RACK_LABEL=rack-<r>`.

Jobs: a seeded sequence, arriving one every `60 / rate` seconds (a steady rate), each either

- a gang: 2-16 members of 1, 2, 4 or 8 GPUs each (every member of a gang asks the same), all of
  which must run at once (`minCount` = members); a share of the gangs must also share one rack
  (PodGroup `spec.schedulingConstraints.topology[0].key = RACK_LABEL`);
- a single pod of 1, 2, 4 or 8 GPUs.

A gang is shrunk (fewer members) so that it fits the empty cluster twice over (at most half the
members of its size the cluster holds), or, bound to a rack, the smallest rack once, empty; so
every gang can start under every scheduler once the cluster has drained.

Each job runs `duration` seconds once started (every member bound), then finishes: its pods and
PodGroup are deleted. The arrival rate is chosen so that the GPU-seconds asked for per second are
`load` times the cluster's GPUs: with `load > 1` demand exceeds capacity and a queue builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hack.bench.control_plane_model import node_specs, topologies_of
from hack.localcluster import NodeSpec
from topology.domains import NodeTopology

RACK_LABEL = "example.com/rack"
GPU_SIZES = (1, 2, 4, 8)
MIN_MEMBERS = 2
MAX_MEMBERS = 16


@dataclass(frozen=True)
class Mix:
    """What the seeded job sequence looks like."""

    jobs: int = 80
    gang_share: float = 0.7
    """Share of jobs that are gangs; the rest are single pods."""
    rack_share: float = 0.3
    """Share of gangs that must share one rack."""
    gang_gpu_weights: tuple[float, ...] = (0.3, 0.3, 0.25, 0.15)
    """Weights of 1, 2, 4 and 8 GPUs per gang member."""
    single_gpu_weights: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    """Weights of 1, 2, 4 and 8 GPUs per single pod."""
    min_duration_s: float = 10.0
    max_duration_s: float = 30.0
    load: float = 1.5
    """GPU-seconds asked per second, as a multiple of the cluster's GPUs."""


@dataclass(frozen=True)
class Job:
    """One gang or single pod of the sequence."""

    name: str
    members: int
    """Pods of the job (1 for a single pod); a gang's minCount is all of them."""
    gpus: int
    """GPUs asked by each member."""
    gang: bool
    rack_bound: bool
    """All members on one rack (a PodGroup topology constraint)."""
    arrival_s: float
    """When the job is submitted, from the start of the run."""
    duration_s: float
    """How long it runs once started."""

    @property
    def total_gpus(self) -> int:
        return self.members * self.gpus

    def pod_names(self) -> list[str]:
        if not self.gang:
            return [self.name]
        return [f"{self.name}-{index}" for index in range(self.members)]


@dataclass(frozen=True)
class BenchNode:
    """One node of the benchmark cluster as the metrics see it."""

    name: str
    gpus: int
    rack: str
    topology: NodeTopology


def rack_specs(
    racks: int, nodes_per_rack: int, prefix: str = "", labels: Mapping[str, str] | None = None
) -> list[NodeSpec]:
    """Node specs of every rack: `nodes_per_rack` seed-type nodes per rack, rack-labelled."""
    specs: list[NodeSpec] = []
    for rack in range(racks):
        specs.extend(
            node_specs(
                nodes_per_rack,
                prefix=f"{prefix}r{rack}-",
                labels={**(labels or {}), RACK_LABEL: f"rack-{rack}"},
            )
        )
    return [spec for spec in specs if spec.count > 0]


def bench_nodes(specs: Sequence[NodeSpec]) -> list[BenchNode]:
    """Every node of `specs` with its GPUs, rack and NVLink domains."""
    topologies = topologies_of(specs)
    return [
        BenchNode(name, spec.gpus, spec.labels.get(RACK_LABEL, ""), topologies[name])
        for spec in specs
        for name in spec.node_names()
    ]


def member_room(node_gpus: Sequence[int], gpus: int) -> int:
    """Members asking `gpus` each that nodes with `node_gpus` free GPUs hold at most."""
    return sum(free // gpus for free in node_gpus)


def generate(mix: Mix, nodes: Sequence[BenchNode], seed: int) -> list[Job]:
    """The seeded job sequence for `nodes` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    racks = sorted({node.rack for node in nodes})
    all_gpus = [node.gpus for node in nodes]
    smallest_rack = [
        min(member_room([n.gpus for n in nodes if n.rack == rack], size) for rack in racks)
        if racks
        else 0
        for size in GPU_SIZES
    ]
    gang_weights = np.asarray(mix.gang_gpu_weights, dtype=float)  # (sizes,)
    single_weights = np.asarray(mix.single_gpu_weights, dtype=float)  # (sizes,)
    drafts: list[tuple[str, int, int, bool, bool, float]] = []
    for index in range(mix.jobs):
        gang = bool(rng.random() < mix.gang_share)
        weights = gang_weights if gang else single_weights
        size_index = int(rng.choice(len(GPU_SIZES), p=weights / weights.sum()))
        gpus = GPU_SIZES[size_index]
        duration = float(rng.uniform(mix.min_duration_s, mix.max_duration_s))
        rack_bound = gang and bool(rng.random() < mix.rack_share)
        members = 1
        if gang:
            wanted = int(rng.integers(MIN_MEMBERS, MAX_MEMBERS + 1))
            room = smallest_rack[size_index] if rack_bound else member_room(all_gpus, gpus)
            members = min(wanted, room if rack_bound else room // 2)
            if members < MIN_MEMBERS:  # this size cannot gang here: the smallest gang of 1 GPU
                gpus, members = 1, MIN_MEMBERS
        name = f"{'g' if gang else 's'}-{index:04d}"
        drafts.append((name, members, gpus, gang, rack_bound, duration))
    capacity = sum(all_gpus)
    asked = sum(members * gpus * duration for _, members, gpus, _, _, duration in drafts)
    interval = asked / len(drafts) / (mix.load * capacity) if drafts and capacity else 0.0
    return [
        Job(name, members, gpus, gang, rack_bound, index * interval, duration)
        for index, (name, members, gpus, gang, rack_bound, duration) in enumerate(drafts)
    ]


def window_s(jobs: Sequence[Job]) -> float:
    """Seconds from the first arrival to one interval past the last."""
    if len(jobs) < 2:
        return 0.0
    interval = jobs[1].arrival_s - jobs[0].arrival_s
    return jobs[-1].arrival_s + interval
