"""Read-only array views of the cache for one scheduling cycle.

Every array has the cache's node rows as its first axis (`rows`); rows with `valid` False are
holes left by deleted nodes and must be ignored. Views, not copies: valid for the synchronous part
of one cycle only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.model.fields import Taint
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache
from scheduler.state.node_table import GpuStateArrays, LabelColumn


@dataclass(frozen=True)
class Snapshot:
    cache: ClusterCache

    @property
    def rows(self) -> int:
        return self.cache.rows

    @property
    def names(self) -> list[str]:
        return self.cache.names

    @property
    def valid(self) -> npt.NDArray[np.bool_]:  # (rows,)
        return self.cache.valid[: self.rows]

    @property
    def node_count(self) -> int:
        return int(self.valid.sum())

    @property
    def allocatable(self) -> npt.NDArray[np.int64]:  # (rows, resources)
        return self.cache.allocatable[: self.rows]

    @property
    def requested(self) -> npt.NDArray[np.int64]:  # (rows, resources)
        return self.cache.requested[: self.rows]

    @property
    def free(self) -> npt.NDArray[np.int64]:  # (rows, resources): allocatable - requested
        return self.cache.free[: self.rows]

    @property
    def gpu_total(self) -> npt.NDArray[np.int64]:  # (rows,)
        return self.cache.allocatable[: self.rows, GPU]

    @property
    def gpu_used(self) -> npt.NDArray[np.int64]:  # (rows,)
        return np.minimum(self.cache.requested[: self.rows, GPU], self.gpu_total)

    @property
    def free_per_domain(self) -> npt.NDArray[np.int32]:  # (rows, domains)
        return self.cache.free_per_domain[: self.rows]

    @property
    def domain_size(self) -> npt.NDArray[np.int32]:  # (rows, domains)
        return self.cache.domain_size[: self.rows]

    @property
    def gpu_state(self) -> npt.NDArray[np.int32]:  # (rows,)
        """Index of each row's GPU state in `gpu_state_arrays()`."""
        return self.cache.gpu_state[: self.rows]

    def gpu_state_arrays(self) -> GpuStateArrays:
        return self.cache.gpu_state_arrays()

    @property
    def unschedulable(self) -> npt.NDArray[np.bool_]:  # (rows,)
        return self.cache.unschedulable[: self.rows]

    @property
    def mig_profiles(self) -> list[str]:
        return self.cache.mig_profiles

    @property
    def mig_free(self) -> npt.NDArray[np.int64]:  # (rows, profiles)
        rows = self.rows
        return self.cache.mig_allocatable[:rows] - self.cache.mig_requested[:rows]

    @property
    def taint_groups(self) -> list[tuple[Taint, ...]]:
        return self.cache.taint_groups

    @property
    def taint_group(self) -> npt.NDArray[np.int32]:  # (rows,)
        return self.cache.taint_group[: self.rows]

    def label(self, key: str) -> LabelColumn:
        """Codes of label `key` per row (-1: absent); `codes` is sliced to `rows`."""
        column = self.cache.label_column(key)
        return LabelColumn(column.codes[: self.rows], column.values, column.index)
