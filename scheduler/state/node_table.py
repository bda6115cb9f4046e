"""The node rows of the cluster cache: one row per node in numpy arrays read whole.

`NodeTable` keeps a row per node (`row_of`, `names`; a removed node's row is reused) and, per
row, what filter and score plugins read in one vectorized pass (see `Snapshot`): allocatable and
requested resources, GPUs in use, GPUs reported sick (`set_sick_gpus`) and their NVLink
domains, MIG profiles, taint groups, label codes and the distinct GPU states. A sick GPU counts
as not free in `free_per_domain` (so the NVLink filter and scores, and the GPU choice, never use
it), whoever holds it. Arrays grow (rows and columns) as nodes and GPUs appear; a
change touches only the rows involved.

It holds no pods: `scheduler.state.cache.ClusterCache` builds on it and keeps the usage columns
(`requested`, `free`, `gpu_used`, `mig_requested`) in step with the pods it counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt

from scheduler.model.fields import Taint
from scheduler.model.objects import NodeInfo
from scheduler.model.resources import GPU, RESOURCES

INITIAL_ROWS = 64
NO_GROUP = -1

_Array = TypeVar("_Array", bound=np.ndarray[Any, Any])


def _grown(array: _Array, rows: int, fill: object) -> _Array:
    """`array` with its first axis extended to `rows`, new rows set to `fill`."""
    grown = np.full((rows, *array.shape[1:]), fill, dtype=array.dtype)
    grown[: array.shape[0]] = array
    return cast(_Array, grown)


GpuStateKey = tuple[int, int, tuple[int, ...], tuple[int, ...]]
"""(GPUs, GPUs in use, free GPUs per domain, size of each domain) of a node."""


class GpuStateArrays(NamedTuple):
    """The distinct GPU states as arrays: free and size (states, domains), total and used
    (states,), ready for `topology.scoring.score_nodes`."""

    free: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    used: npt.NDArray[np.int64]


@dataclass
class LabelColumn:
    """One label key across all node rows, as integer codes: -1 where the node lacks it."""

    codes: npt.NDArray[np.int32]  # codes: (rows,)
    values: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def code(self, value: str) -> int:
        if value not in self.index:
            self.index[value] = len(self.values)
            self.values.append(value)
        return self.index[value]


class NodeTable:
    """Node rows in arrays; see the module docstring."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.row_of: dict[str, int] = {}
        self.names: list[str] = []
        self._free_rows: list[int] = []
        self.generation = 0
        """Grows on every change; lets callers cache per-state work."""
        rows = INITIAL_ROWS
        self.valid = np.zeros(rows, dtype=bool)  # valid: (rows,)
        self.unschedulable = np.zeros(rows, dtype=bool)  # unschedulable: (rows,)
        self.allocatable = np.zeros((rows, len(RESOURCES)), dtype=np.int64)  # (rows, resources)
        self.requested = np.zeros((rows, len(RESOURCES)), dtype=np.int64)  # (rows, resources)
        self.free = np.zeros((rows, len(RESOURCES)), dtype=np.int64)  # allocatable - requested
        self.gpu_domain = np.full((rows, 0), -1, dtype=np.int32)  # gpu_domain: (rows, gpus)
        self.gpu_used = np.zeros((rows, 0), dtype=bool)  # gpu_used: (rows, gpus)
        self.gpu_sick = np.zeros((rows, 0), dtype=bool)  # gpu_sick: (rows, gpus)
        self.sick_gpus: dict[str, dict[int, str]] = {}
        """Node -> GPU index -> why it is sick (`set_sick_gpus`); kept across node updates."""
        self.free_per_domain = np.zeros((rows, 0), dtype=np.int32)  # (rows, domains)
        self.domain_size = np.zeros((rows, 0), dtype=np.int32)  # (rows, domains)
        self.mig_profiles: list[str] = []
        self.mig_allocatable = np.zeros((rows, 0), dtype=np.int64)  # (rows, profiles)
        self.mig_requested = np.zeros((rows, 0), dtype=np.int64)  # (rows, profiles)
        self.taint_groups: list[tuple[Taint, ...]] = []
        self._taint_group_index: dict[tuple[Taint, ...], int] = {}
        self.taint_group = np.full(rows, NO_GROUP, dtype=np.int32)  # taint_group: (rows,)
        self.gpu_state = np.zeros(rows, dtype=np.int32)  # gpu_state: (rows,)
        self.gpu_states: list[GpuStateKey] = []
        self._gpu_state_index: dict[GpuStateKey, int] = {}
        self._gpu_state_arrays: GpuStateArrays | None = None
        self.label_columns: dict[str, LabelColumn] = {}

    # -- arrays --------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return len(self.names)

    def _grow_rows(self, needed: int) -> None:
        capacity = self.valid.shape[0]
        if needed <= capacity:
            return
        new = max(needed, capacity * 2)

        self.valid = _grown(self.valid, new, False)
        self.unschedulable = _grown(self.unschedulable, new, False)
        self.allocatable = _grown(self.allocatable, new, 0)
        self.requested = _grown(self.requested, new, 0)
        self.free = _grown(self.free, new, 0)
        self.gpu_domain = _grown(self.gpu_domain, new, -1)
        self.gpu_used = _grown(self.gpu_used, new, False)
        self.gpu_sick = _grown(self.gpu_sick, new, False)
        self.free_per_domain = _grown(self.free_per_domain, new, 0)
        self.domain_size = _grown(self.domain_size, new, 0)
        self.mig_allocatable = _grown(self.mig_allocatable, new, 0)
        self.mig_requested = _grown(self.mig_requested, new, 0)
        self.taint_group = _grown(self.taint_group, new, NO_GROUP)
        self.gpu_state = _grown(self.gpu_state, new, 0)
        for column in self.label_columns.values():
            column.codes = _grown(column.codes, new, -1)

    def _grow_columns(self, gpus: int, domains: int) -> None:
        rows = self.valid.shape[0]
        if gpus > self.gpu_used.shape[1]:
            extra = gpus - self.gpu_used.shape[1]
            self.gpu_used = np.hstack([self.gpu_used, np.zeros((rows, extra), dtype=bool)])
            self.gpu_sick = np.hstack([self.gpu_sick, np.zeros((rows, extra), dtype=bool)])
            self.gpu_domain = np.hstack(
                [self.gpu_domain, np.full((rows, extra), -1, dtype=np.int32)]
            )
        if domains > self.free_per_domain.shape[1]:
            extra = domains - self.free_per_domain.shape[1]
            pad = np.zeros((rows, extra), dtype=np.int32)
            self.free_per_domain = np.hstack([self.free_per_domain, pad])
            self.domain_size = np.hstack([self.domain_size, pad.copy()])

    def _mig_column(self, resource: str) -> int:
        if resource not in self.mig_profiles:
            self.mig_profiles.append(resource)
            rows = self.valid.shape[0]
            zeros = np.zeros((rows, 1), dtype=np.int64)
            self.mig_allocatable = np.hstack([self.mig_allocatable, zeros])
            self.mig_requested = np.hstack([self.mig_requested, zeros.copy()])
        return self.mig_profiles.index(resource)

    def label_column(self, key: str) -> LabelColumn:
        """The codes of label `key` for every row, built on first use and kept up to date."""
        column = self.label_columns.get(key)
        if column is None:
            column = LabelColumn(np.full(self.valid.shape[0], -1, dtype=np.int32))
            for name, row in self.row_of.items():
                value = self.nodes[name].labels.get(key)
                if value is not None:
                    column.codes[row] = column.code(value)
            self.label_columns[key] = column
        return column

    def _recount_domains(self, row: int) -> None:
        domains = self.gpu_domain[row]  # domains: (gpus,)
        width = self.free_per_domain.shape[1]
        has_gpu = domains >= 0  # has_gpu: (gpus,)
        size = np.bincount(domains[has_gpu], minlength=width)[:width]
        usable = has_gpu & ~self.gpu_used[row] & ~self.gpu_sick[row]  # usable: (gpus,)
        free = np.bincount(domains[usable], minlength=width)[:width]
        self.domain_size[row] = size
        self.free_per_domain[row] = free
        total = int(self.allocatable[row, GPU])
        used = min(int(self.requested[row, GPU]), total)
        key = (total, used, tuple(free.tolist()), tuple(size.tolist()))
        state = self._gpu_state_index.get(key)
        if state is None:
            state = len(self.gpu_states)
            self.gpu_states.append(key)
            self._gpu_state_index[key] = state
        self.gpu_state[row] = state

    def gpu_state_arrays(self) -> GpuStateArrays:
        """Every distinct GPU state seen so far as arrays, row k describing state k.

        Nodes in the same state (GPU count, GPUs in use, free GPUs and size of each domain)
        score the same for any pod, so scores are computed once per state and gathered to the
        nodes through `gpu_state` (rows,). States are never removed or changed, only appended.
        """
        width = self.free_per_domain.shape[1]
        cached = self._gpu_state_arrays
        if cached is not None and cached.free.shape == (len(self.gpu_states), width):
            return cached
        count = len(self.gpu_states)
        free = np.zeros((count, width), dtype=np.int64)  # free: (states, domains)
        size = np.zeros((count, width), dtype=np.int64)  # size: (states, domains)
        total = np.zeros(count, dtype=np.int64)  # total: (states,)
        used = np.zeros(count, dtype=np.int64)  # used: (states,)
        for k, (gpus, in_use, free_k, size_k) in enumerate(self.gpu_states):
            total[k], used[k] = gpus, in_use
            free[k, : len(free_k)] = free_k
            size[k, : len(size_k)] = size_k
        self._gpu_state_arrays = GpuStateArrays(free, size, total, used)
        return self._gpu_state_arrays

    # -- nodes ---------------------------------------------------------------------------------

    def _write_node_row(self, node: NodeInfo) -> int:
        """Insert or replace `node`'s row (a new node takes a free row) with everything but its
        usage, which the caller recounts from the pods on it; returns the row."""
        self.generation += 1
        row = self.row_of.get(node.name)
        if row is None:
            if self._free_rows:
                row = self._free_rows.pop()
                self.names[row] = node.name
            else:
                row = len(self.names)
                self._grow_rows(row + 1)
                self.names.append(node.name)
            self.row_of[node.name] = row
        self.nodes[node.name] = node
        self.valid[row] = True
        self.unschedulable[row] = node.unschedulable
        self.allocatable[row] = node.allocatable
        topology = node.topology
        self._grow_columns(topology.gpu_count, topology.domain_count)
        self.gpu_domain[row] = -1
        self.gpu_domain[row, : topology.gpu_count] = topology.gpu_domain_ids()
        self._write_sick_mask(row, topology.gpu_count)
        self.mig_allocatable[row] = 0
        for resource, amount in node.mig.items():
            mig_column = self._mig_column(resource)  # may widen the arrays: index after
            self.mig_allocatable[row, mig_column] = amount
        group = self._taint_group_index.get(node.taints)
        if group is None:
            group = len(self.taint_groups)
            self.taint_groups.append(node.taints)
            self._taint_group_index[node.taints] = group
        self.taint_group[row] = group
        for key, column in self.label_columns.items():
            value = node.labels.get(key)
            column.codes[row] = -1 if value is None else column.code(value)
        return row

    def _write_sick_mask(self, row: int, gpu_count: int) -> None:
        self.gpu_sick[row] = False
        sick = [i for i in self.sick_gpus.get(self.names[row], {}) if 0 <= i < gpu_count]
        if sick:
            self.gpu_sick[row, sick] = True

    def set_sick_gpus(self, name: str, reasons: dict[int, str]) -> bool:
        """Replace the sick GPUs of node `name`: GPU index -> why (e.g. "XID 79"); {} when all
        are healthy. Kept for a node not known yet and across its updates. True on a change."""
        if self.sick_gpus.get(name, {}) == reasons:
            return False
        if reasons:
            self.sick_gpus[name] = dict(reasons)
        else:
            self.sick_gpus.pop(name, None)
        row = self.row_of.get(name)
        if row is not None:
            self.generation += 1
            self._write_sick_mask(row, self.nodes[name].topology.gpu_count)
            self._recount_domains(row)
        return True

    def remove_node(self, name: str) -> None:
        """Forget a node; its pods stay known and count again if the node comes back."""
        row = self.row_of.pop(name, None)
        if row is None:
            return
        self.generation += 1
        self.nodes.pop(name, None)
        self.valid[row] = False
        self.names[row] = ""
        self._free_rows.append(row)

    # -- reads ---------------------------------------------------------------------------------

    def node_gpus_used(self, name: str) -> npt.NDArray[np.bool_]:
        """GPU-in-use mask of one node, (gpus,)."""
        row = self.row_of[name]
        return self.gpu_used[row, : self.nodes[name].topology.gpu_count].copy()

    def node_gpus_unavailable(self, name: str) -> npt.NDArray[np.bool_]:
        """GPUs of one node no new pod may take: in use or sick, (gpus,)."""
        row = self.row_of[name]
        count = self.nodes[name].topology.gpu_count
        return self.gpu_used[row, :count] | self.gpu_sick[row, :count]

    def overcommitted_gpus(self) -> dict[str, int]:
        """Nodes where more GPUs are requested than allocatable, by how many (for tests/logs)."""
        rows = self.valid[: self.rows]  # rows: (nodes,)
        excess = self.requested[: self.rows, GPU] - self.allocatable[: self.rows, GPU]
        return {self.names[r]: int(excess[r]) for r in np.flatnonzero(rows & (excess > 0))}
