"""Replicas of time-sliced (or MPS) GPUs, per node row and physical GPU.

`ReplicaTable` keeps two arrays beside the cache's node rows: `per_gpu` (rows,), the replicas
each physical GPU of the node offers (0 on a node that does not share its GPUs), and `taken`
(rows, gpus), the replicas the pods counted on the node hold on each GPU. On a sharing node a
pod's GPU indices (`PodState.gpus`, the `gpu-scheduler.io/gpus` annotation) name the physical
GPUs it holds one replica of, each at most once; the cache keeps `taken` in step through `add`
and `clear`, and marks a GPU in use in its own `gpu_used` mask as soon as one replica is taken
(so whole-GPU scores see it as no longer whole).

A GPU reported sick (`ClusterCache.set_sick_gpus`, passed in as a (rows, gpus) mask) offers no
replica to a new pod: `effective` counts it as full, so `open_gpus`, `choose` and the score pass
it over; pods already on it stay counted.

Growth is by `fit` (rows and GPU columns only grow, new cells 0), as the cache's arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from scheduler.model.gpu_sharing import MPS, SHARED_RESOURCE, GpuSharing
from topology.replicas import PACK, SPREAD, choose_replicas

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNANNOTATED_POLICY = SPREAD
"""Where the cache counts the replicas of a pod that names no GPUs (bound by someone else): the
device plugin's default `distributed` allocation policy."""


class ReplicaTable:
    """Replicas offered and taken per node row and GPU; see the module docstring."""

    def __init__(self, rows: int = 0) -> None:
        self.per_gpu = np.zeros(rows, dtype=np.int32)  # per_gpu: (rows,)
        self.taken = np.zeros((rows, 0), dtype=np.int32)  # taken: (rows, gpus)
        self.gpu_count = np.zeros(rows, dtype=np.int32)  # gpu_count: (rows,) physical GPUs
        self.renamed = np.zeros(rows, dtype=bool)  # renamed: (rows,) nvidia.com/gpu.shared
        self.mps = np.zeros(rows, dtype=bool)  # mps: (rows,) the MPS strategy
        self.sharing: dict[int, GpuSharing] = {}
        """Each sharing row's `GpuSharing`."""

    def fit(self, rows: int, gpus: int) -> None:
        """Grow to at least `rows` rows and `gpus` GPU columns."""
        if rows > self.per_gpu.shape[0]:
            for name in ("per_gpu", "gpu_count", "renamed", "mps"):
                old = getattr(self, name)
                grown = np.zeros(rows, dtype=old.dtype)
                grown[: old.shape[0]] = old
                setattr(self, name, grown)
        width = max(gpus, self.taken.shape[1])
        if self.taken.shape != (self.per_gpu.shape[0], width):
            taken = np.zeros((self.per_gpu.shape[0], width), dtype=np.int32)
            taken[: self.taken.shape[0], : self.taken.shape[1]] = self.taken
            self.taken = taken

    def set_node(self, row: int, sharing: GpuSharing | None, gpus: int) -> None:
        """The node of `row` (new or changed) shares its GPUs as `sharing`; counts restart."""
        self.fit(row + 1, gpus)
        self.per_gpu[row] = sharing.replicas if sharing else 0
        self.gpu_count[row] = gpus if sharing else 0
        self.renamed[row] = sharing is not None and sharing.resource == SHARED_RESOURCE
        self.mps[row] = sharing is not None and sharing.strategy == MPS
        self.taken[row] = 0
        if sharing:
            self.sharing[row] = sharing
        else:
            self.sharing.pop(row, None)

    def shares(self, row: int) -> bool:
        return bool(self.per_gpu[row])

    def effective(self, rows: int, sick: BoolArray | None = None) -> IntArray:
        """(rows, gpus) replicas taken on the first `rows` rows, a sick GPU counted full;
        `sick` (rows, >= gpus) marks the GPUs reported sick."""
        self.fit(rows, 0)
        taken = self.taken[:rows].astype(np.int64)  # taken: (rows, gpus)
        if sick is None or not sick.any():
            return taken
        width = taken.shape[1]
        mask = np.zeros(taken.shape, dtype=bool)  # mask: (rows, gpus)
        mask[:, : min(width, sick.shape[1])] = sick[:rows, :width]
        return np.where(mask, self.per_gpu[:rows, None].astype(np.int64), taken)

    def open_gpus(self, rows: int, sick: BoolArray | None = None) -> IntArray:
        """(rows,) GPUs with a free replica on each of the first `rows` rows (0: not sharing),
        sick GPUs left out."""
        taken = self.effective(rows, sick)  # taken: (rows, gpus)
        per_gpu = self.per_gpu[:rows, None]  # per_gpu: (rows, 1)
        columns = np.arange(taken.shape[1])[None, :]  # columns: (1, gpus)
        real = columns < self.gpu_count[:rows, None]  # real: (rows, gpus)
        open_gpus: IntArray = ((taken < per_gpu) & real).sum(axis=1)
        return open_gpus.astype(np.int64)

    def requested(self, rows: int, gpus: int, scalar: Mapping[str, int]) -> IntArray:
        """(rows,) replicas a pod asking for `gpus` nvidia.com/gpu and the extended resources
        `scalar` takes on each of the first `rows` rows (0 where the node does not share)."""
        self.fit(rows, 0)
        shared = scalar.get(SHARED_RESOURCE, 0)
        count = np.where(self.renamed[:rows], shared, gpus).astype(np.int64)  # count: (rows,)
        return np.where(self.per_gpu[:rows] > 0, count, 0)

    def clear(self, row: int) -> None:
        self.taken[row] = 0

    def add(self, row: int, gpus: Iterable[int], sign: int) -> None:
        """A pod holding one replica of each GPU in `gpus` arrives (+1) or leaves (-1)."""
        indices = list(gpus)
        if self.shares(row) and indices:
            np.add.at(self.taken[row], indices, sign)

    def free(self, row: int, gpu_count: int) -> npt.NDArray[np.int64]:
        """Free replicas of each GPU of the row, (gpus,) (never below 0)."""
        taken = self.taken[row, :gpu_count].astype(np.int64)  # taken: (gpus,)
        return np.maximum(int(self.per_gpu[row]) - taken, 0)

    def fits(self, row: int, gpu_count: int, wanted: tuple[int, ...]) -> bool:
        """Whether each GPU in `wanted` (distinct, in range) still has a free replica."""
        if len(set(wanted)) != len(wanted) or any(g < 0 or g >= gpu_count for g in wanted):
            return False
        free = self.free(row, gpu_count)  # free: (gpus,)
        return all(free[g] > 0 for g in wanted)

    def choose(
        self,
        row: int,
        gpu_count: int,
        count: int,
        policy: str = PACK,
        sick: BoolArray | None = None,
    ) -> tuple[int, ...]:
        """GPUs for `count` more replicas on the row under `policy` (`topology.replicas`),
        none of the GPUs `sick` (gpus,) marks; () when they do not fit."""
        taken = self.taken[row, :gpu_count].astype(np.int64)  # taken: (gpus,)
        if sick is not None:
            taken = np.where(sick[:gpu_count], int(self.per_gpu[row]), taken)
        return choose_replicas(taken, int(self.per_gpu[row]), count, policy) or ()
