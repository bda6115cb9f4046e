"""The DynamicResources score of one node: how the devices a pod's claims would get there sit
among the node's NVLink-mapped GPUs (`scheduler.dra.domains`), and, for MIG placements, what
they cost the GPUs they are on (`scheduler.dra.partitions`).

    domain_occupancy    the node's GPUs before the pod, free and total per NVLink domain, and
                        how many free GPUs the pod's devices break into (`DomainOccupancy`).
                        A GPU is busy when it or a partition of it is taken, whole or shared,
                        and counts once however many partitions or shares of it are taken.
    occupancy_points    (n,) the score of n nodes (0..100) from their `DomainOccupancy`: the
                        seed's NVLink score of the GPUs broken (`topology.scoring`), 100 where
                        none is (only shares or partitions of GPUs in use), and
                        `partition_points` where the devices are all MIG placements.
    partition_points    100 less 100 per GPU's worth of largest MIG placement lost, then small
                        deductions for the largest placements before (the most fragmented GPU
                        first) and for a low NVLink score: the order of `Partitions.order`
                        across nodes.

Pure: plain records and numpy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.dra.consumable import DeviceUse
from scheduler.dra.domains import DeviceDomains
from scheduler.dra.partitions import PartitionCost, Partitions
from scheduler.model.allocations import Allocation
from topology.scoring import DEFAULT_WEIGHTS, MAX_SCORE, ScoreWeights, normalize, score_nodes


@dataclass(frozen=True)
class DomainOccupancy:
    """A node's NVLink-mapped GPUs before the pod: free and total per domain, how many free ones
    the pod's allocations break into, and, when they are all partitions of GPUs (MIG
    placements), what they cost the GPUs they are on."""

    free: tuple[int, ...]
    size: tuple[int, ...]
    wanted: int
    cost: PartitionCost | None = None


PARTITION_BEFORE_POINTS = 1.0
"""Points a partition-only allocation loses per GPU's worth of its GPUs' largest placements
before it (so the most fragmented GPUs are filled first): below what one memory slice lost
costs (`MAX_SCORE` / 8 on an H200)."""
PARTITION_NVLINK_POINTS = 0.1
"""Points a partition-only allocation loses at most for its NVLink score (so a node whose
GPUs are already in use is preferred among nodes of equal loss): below what one memory slice
of `PARTITION_BEFORE_POINTS` is worth."""


def partition_points(cost: PartitionCost, nvlink: float) -> float:
    """The score (0..100) of a node where the pod's devices are all MIG placements: 100 less
    100 per GPU's worth of largest placement they lose (one memory slice of eight: 12.5), then
    less `PARTITION_BEFORE_POINTS` per GPU's worth of largest placement before them, then less
    up to `PARTITION_NVLINK_POINTS` for a low NVLink score (`nvlink`, 0..100)."""
    points = (
        MAX_SCORE * (1.0 - min(cost.lost, 1.0))
        - PARTITION_BEFORE_POINTS * min(cost.before, 1.0)
        - PARTITION_NVLINK_POINTS * (1.0 - nvlink / MAX_SCORE)
    )
    return max(points, 0.0)


def domain_occupancy(
    domains: DeviceDomains,
    use: DeviceUse,
    allocations: tuple[Allocation, ...],
    partitions: Partitions | None = None,
) -> DomainOccupancy | None:
    """The node's `DomainOccupancy` for `allocations` (None when they take no mapped device).
    A GPU is busy when it, or a partition of it (`DeviceDomains.gpu_of`), is taken whole or
    shared; each busy GPU counts once. `wanted` counts the free GPUs the allocations take, or
    take partitions or shares of: a share of a device already shared, or a partition of a GPU
    already partitioned, breaks no free GPU (allocations made only of such: `wanted` 0).
    `partitions` (the node's, `scheduler.dra.partitions`) gives the cost when every mapped
    device is a partition."""
    mapped = [
        result.device_id
        for allocation in allocations
        for result in allocation.results
        if result.device_id in domains.domain_of
    ]
    if not mapped:
        return None
    busy = {
        domains.gpu_of.get(device, device)
        for device in domains.domain_of
        if device in use.taken or use.sharing(device)
    }
    wanted = len({domains.gpu_of.get(device, device) for device in mapped} - busy)
    free = list(domains.domain_size)
    for gpu in busy:
        domain = domains.domain_of.get(gpu, -1)
        if 0 <= domain < len(free):
            free[domain] -= 1
    cost = None
    if partitions:
        cost = partitions.cost(mapped, partitions.occupied_by(use.allocated))
    sizes = tuple(domains.domain_size)
    return DomainOccupancy(tuple(max(f, 0) for f in free), sizes, wanted, cost)


def occupancy_points(
    occupancies: Sequence[DomainOccupancy], weights: ScoreWeights = DEFAULT_WEIGHTS
) -> npt.NDArray[np.float64]:
    """(n,) the score (0..100) of each node from its `DomainOccupancy`: the NVLink score
    (`topology.scoring.score_nodes`, the seed's rules) of the GPUs the pod's devices break,
    over the node's NVLink-mapped GPUs (free per domain before the pod, domain sizes, GPUs and
    GPUs in use), 100 where they break none (only shares or partitions of GPUs in use); and
    `partition_points` where they are all partitions."""
    width = max((len(o.free) for o in occupancies), default=0)
    free = np.zeros((len(occupancies), width), dtype=np.int64)  # free: (n, domains)
    size = np.zeros((len(occupancies), width), dtype=np.int64)  # size: (n, domains)
    wanted = np.zeros(len(occupancies), dtype=np.int64)  # wanted: (n,)
    for i, occupancy in enumerate(occupancies):
        free[i, : len(occupancy.free)] = occupancy.free
        size[i, : len(occupancy.size)] = occupancy.size
        wanted[i] = occupancy.wanted
    total = size.sum(axis=1)  # total: (n,)
    used = total - free.sum(axis=1)  # used: (n,)
    points = np.full(len(occupancies), MAX_SCORE, dtype=np.float64)  # points: (n,)
    for g in np.unique(wanted[wanted > 0]):
        pick = wanted == g  # pick: (n,)
        breakdown = score_nodes(int(g), free[pick], size[pick], total[pick], used[pick], weights)
        points[pick] = np.nan_to_num(normalize(breakdown.raw))
    for i, occupancy in enumerate(occupancies):
        if occupancy.cost is not None:
            points[i] = partition_points(occupancy.cost, float(points[i]))
    return points
