"""The cluster and the workload of `gpu-scheduler simulate --shares`.

`ShareCluster` is the scheduler's own `ClusterCache` (what the production filters and scores
read) plus the thousandths still free on every GPU (`free`, see
`scheduler.tools.simulate_share_gpus`). The cache counts a GPU as used as soon as anything holds
part of it: a GPU with a share is no longer free for a whole-GPU pod, as gpu-scheduler's DRA
store counts a device with a share as in use for whole allocations. So:

- a whole-GPU pod is assumed in the cache with its GPU indices, and its GPUs drop to 0 free;
- a share that opens an untouched GPU is assumed as a one-GPU pod on that index (`Arrival.
  opener`), one that joins a GPU already shared as a pod of its cpu and memory only;
- a CPU-only pod is assumed with its cpu and memory.

`Arrival` is one pod of the workload in the forms the policies and the cache need;
`share_workload` builds the arrival sequence, shares included, as `simulate` builds its
whole-GPU one: trace order repeated (or drawn with replacement with `--sample`) until the GPUs
requested, a share counting as its fraction, reach `demand` times the cluster's GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import NodeInfo, PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY, PODS
from scheduler.state.cache import ClusterCache
from scheduler.tools.simulate_share_gpus import WHOLE, TaskTypes
from scheduler.tools.simulate_trace import (
    GPU_PRODUCT_LABEL,
    TracePod,
    arrival_order,
    parsed_pod,
)

CPU_ONLY = "cpu"
SHARE = "share"
WHOLE_GPUS = "whole"

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Arrival:
    """One pod of the workload.

    `kind` is `SHARE`, `WHOLE_GPUS` or `CPU_ONLY`; `gpus` the GPUs it holds part or all of (1
    for a share) and `milli` the thousandths of each (1000 for whole GPUs, 0 for CPU-only).
    `pod` is what the filters see: a whole-GPU pod as it is, a share or CPU-only pod with its
    cpu and memory only. `opener` (shares only) is the same pod holding one whole GPU, what the
    cache counts when the share opens an untouched GPU. `shape` indexes the workload's
    `TaskTypes` (-1 for a CPU-only pod).
    """

    kind: str
    gpus: int
    milli: int
    pod: PodInfo
    opener: PodInfo | None
    shape: int

    @property
    def gpu_milli(self) -> int:
        """Thousandths of GPU asked in all."""
        return self.gpus * self.milli


@dataclass(frozen=True)
class ShareWorkload:
    """The arrivals every policy sees, the task types of the fragmentation measure, and counts
    of what they were built from (pods of the input by kind, arrivals' GPU demand, passes)."""

    arrivals: list[Arrival]
    types: TaskTypes
    source_pods: int
    share_pods: int
    whole_gpu_pods: int
    cpu_only_pods: int
    cpu_only_excluded: int
    gpus_requested: float
    passes: int
    sampled: bool


def _kind(pod: TracePod) -> str:
    if pod.shares_gpu:
        return SHARE
    return WHOLE_GPUS if pod.gpus else CPU_ONLY


def _demand(pod: TracePod) -> float:
    """GPUs the pod asks for, a share counting as its fraction."""
    return pod.gpu_milli / WHOLE if pod.shares_gpu else float(pod.gpus)


def share_workload(
    pods: Sequence[TracePod],
    nodes: Sequence[NodeInfo],
    demand: float,
    sample: bool,
    seed: int,
    cpu_pods: bool = True,
) -> ShareWorkload:
    """Arrivals until the GPUs requested reach `demand` times the GPUs of `nodes` (see the
    module docstring); without `cpu_pods` the CPU-only pods are left out. `demand` must be a
    positive number (`ValueError`)."""
    eligible = [p for p in pods if cpu_pods or p.gpus]
    cluster_gpus = sum(int(n.allocatable[GPU]) for n in nodes)
    demands = [_demand(p) for p in eligible]
    order, passes = arrival_order(demands, demand, cluster_gpus, sample, seed)
    shapes: dict[tuple[int, int, int, int, tuple[str, ...]], int] = {}
    templates = [_template(p, shapes) for p in eligible]
    arrivals = [_copy(templates[index], i) for i, index in enumerate(order)]
    return ShareWorkload(
        arrivals=arrivals,
        types=task_types(arrivals, shapes, nodes),
        source_pods=len(pods),
        share_pods=sum(p.shares_gpu for p in eligible),
        whole_gpu_pods=sum(_kind(p) == WHOLE_GPUS for p in eligible),
        cpu_only_pods=sum(not p.gpus for p in eligible),
        cpu_only_excluded=0 if cpu_pods else sum(1 for p in pods if not p.gpus),
        gpus_requested=sum(a.gpu_milli for a in arrivals) / WHOLE,
        passes=passes,
        sampled=sample,
    )


def _template(
    pod: TracePod, shapes: dict[tuple[int, int, int, int, tuple[str, ...]], int]
) -> Arrival:
    kind = _kind(pod)
    if kind == WHOLE_GPUS:
        seen, opener, milli = parsed_pod(pod), None, WHOLE
    elif kind == SHARE:
        seen = parsed_pod(replace(pod, gpus=0))
        opener, milli = parsed_pod(replace(pod, gpu_milli=WHOLE)), pod.gpu_milli
    else:
        seen, opener, milli = parsed_pod(pod), None, 0
    shape = -1
    if kind != CPU_ONLY:
        key = (
            int(seen.requests[CPU]),
            int(seen.requests[MEMORY]),
            pod.gpus,
            milli,
            tuple(sorted(pod.gpu_products)),
        )
        shape = shapes.setdefault(key, len(shapes))
    return Arrival(kind, pod.gpus, milli, seen, opener, shape)


def _renamed(pod: PodInfo, index: int) -> PodInfo:
    name = f"{pod.name}-a{index}"
    return replace(pod, name=name, key=f"{pod.namespace}/{name}")


def _copy(template: Arrival, index: int) -> Arrival:
    """The template as arrival `index`, with unique pod names."""
    opener = None if template.opener is None else _renamed(template.opener, index)
    return replace(template, pod=_renamed(template.pod, index), opener=opener)


def task_types(
    arrivals: Sequence[Arrival],
    shapes: dict[tuple[int, int, int, int, tuple[str, ...]], int],
    nodes: Sequence[NodeInfo],
) -> TaskTypes:
    """The fragmentation measure's target workload: the GPU pods among `arrivals`, by shape,
    weighted by how often each arrived; `accepts` (types, nodes) in the order of `nodes`."""
    count = len(shapes)
    weight = np.bincount([a.shape for a in arrivals if a.shape >= 0], minlength=count).astype(
        np.float64
    )  # weight: (types,)
    if weight.sum() > 0:
        weight /= weight.sum()
    keys = sorted(shapes, key=shapes.__getitem__)
    products = [n.labels.get(GPU_PRODUCT_LABEL, "") for n in nodes]
    accepts = np.array(  # accepts: (types, nodes)
        [[not key[4] or product in key[4] for product in products] for key in keys], dtype=bool
    ).reshape(count, len(nodes))
    return TaskTypes(
        cpu=np.array([k[0] for k in keys], dtype=np.int64),
        memory=np.array([k[1] for k in keys], dtype=np.int64),
        gpus=np.array([k[2] for k in keys], dtype=np.int64),
        milli=np.array([k[3] for k in keys], dtype=np.int64),
        weight=weight,
        accepts=accepts,
    )


class ShareCluster:
    """The cache of `nodes` and the free thousandths of every GPU (module docstring).

    Arrays, rows in the cache's row order (the order of `nodes`): `free` (rows, gpus) free
    thousandths per GPU, zero past a node's GPU count; `gpu_count` (rows,); `domains`
    (rows, gpus) the NVLink domain of each GPU (-1: none).
    """

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self.cache = ClusterCache()
        for node in nodes:
            self.cache.add_or_update_node(node)
        self.snapshot = Snapshot(self.cache)
        rows = self.cache.rows
        self.gpu_count = self.cache.allocatable[:rows, GPU].copy()  # gpu_count: (rows,)
        width = max(int(self.gpu_count.max(initial=0)), 1)
        slots = np.arange(width)[None, :] < self.gpu_count[:, None]  # slots: (rows, gpus)
        self.free: IntArray = np.where(slots, WHOLE, 0).astype(np.int64)  # (rows, gpus)
        domains = np.full((rows, width), -1, dtype=np.int32)  # domains: (rows, gpus)
        known = min(width, self.cache.gpu_domain.shape[1])
        domains[:, :known] = self.cache.gpu_domain[:rows, :known]
        self.domains = domains

    @property
    def rows(self) -> int:
        return self.cache.rows

    def commit(self, arrival: Arrival, row: int, gpus: tuple[int, ...]) -> None:
        """Place `arrival` on node `row` with `gpus` (the share's one GPU, the whole-GPU pod's
        GPUs, none for a CPU-only pod). `ValueError` if a GPU has not enough room: a share
        never takes more of a GPU than is free."""
        name = self.cache.names[row]
        taken = np.asarray(gpus, dtype=np.int64)  # taken: (gpus,)
        if arrival.kind == CPU_ONLY:
            self.cache.assume(arrival.pod, name, ())
            return
        room = self.free[row, taken]  # room: (gpus,)
        if len(gpus) != arrival.gpus or (room < arrival.milli).any():
            raise ValueError(f"pod {arrival.pod.key}: GPUs {gpus} of {name} have no room for it")
        if arrival.kind == WHOLE_GPUS:
            self.cache.assume(arrival.pod, name, gpus)
        elif room[0] == WHOLE:
            assert arrival.opener is not None
            self.cache.assume(arrival.opener, name, gpus)
        else:
            self.cache.assume(arrival.pod, name, ())
        self.free[row, taken] -= arrival.milli

    def free_of(self, resource: int) -> IntArray:
        """(rows,) the free amount of a resource column of the cache (cpu, memory, pods)."""
        free: IntArray = self.cache.free[: self.rows, resource]
        return free

    def pods_free(self) -> IntArray:
        return self.free_of(PODS)
