"""GpuFragmentation: a score that keeps free GPUs usable.

A GPU is only as useful as the cpu and memory left beside it: a node with two free GPUs and one
free core cannot run a pod that asks for one GPU and eight cores. This score looks at cpu and
memory, which the NVLink-domain score does not.

The measure is the one of Weng et al., "Beware of Fragmentation" (USENIX ATC '23), for whole
GPUs. The plugin learns the workload from the GPU pods it scores: each pod asking for `g` GPUs,
`c` cpu and `m` memory counts once as the per-GPU demand `(c / g, m / g)`. The expected waste of
a node with `G` free GPUs, `C` free cpu and `M` free memory is the number of its free GPUs that
pods drawn from that demand could not use for lack of cpu or memory:

    waste(G, C, M) = G * phi(C / G, M / G)
    phi(rc, rm)    = E_t[ max(0, 1 - rc / c_t, 1 - rm / m_t) ]    (t: a learned per-GPU demand)

(`phi` is the share of free GPUs without enough cpu or memory per GPU; 0 on a node without free
GPUs.) The score of a node is the change of its waste if the pod went there, in GPUs:
`delta = waste(after) - waste(before)`, mapped to `50 - POINTS_PER_GPU * delta` and clipped to
0..100, so a placement that leaves the node's free GPUs as usable as before scores 50, one that
strands a GPU scores 50 - 12.5, and one that takes GPUs which were already short of cpu or memory
scores above 50. CPU-only pods are scored too: on a node without free GPUs they waste nothing;
on a node with free GPUs they waste the GPUs whose cpu or memory they take.

`phi` is tabulated on a `GRID` x `GRID` grid of (cpu per free GPU, memory per free GPU) from 0 to
the largest learned demand and read at the grid point at or below the node's ratios (a slight
overestimate, the same before and after). The table is rebuilt when the number of pods learned
has grown by an eighth since the last build (so about 8 ln(n) times for n pods), not per pod. The
learned demands are kept per distinct (cpu, memory) per GPU, at most `MAX_DEMANDS` of them (the
most frequent are kept when more appear). Deterministic: the same pods in the same order give
the same scores. The score abstains (returns None) until the first GPU pod is seen, and when every
node gets the same points (no node's waste changes, as for a pod whose cpu and memory fit
anywhere in plenty).

Cost: as the NVLink score, the score is computed once per resource state and gathered to the
nodes. A state is a node's free GPUs, cpu and memory (`NodeResources`); after a cluster change
the rows whose free amounts changed are found by one comparison with the previous array and get
new states. What remains per pod is a few numpy passes over the states, one gather over the
nodes, and that comparison when the cluster changed since the previous cycle.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import BoolArray, CycleState, FloatArray
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY
from scheduler.state.cache import ClusterCache

Float32Array = npt.NDArray[np.float32]

FRAGMENTATION_NAME = "GpuFragmentation"
POINTS_PER_GPU = 12.5
"""Points lost per GPU of expected waste added (50 points: four GPUs)."""
NEUTRAL_POINTS = 50.0
MAX_POINTS = 100.0
GRID = 64
"""Grid points per axis of the `phi` table."""
REBUILD_GROWTH = 8
"""The `phi` table is rebuilt when the pods learned grew by 1/REBUILD_GROWTH since it was built."""
MAX_DEMANDS = 512
"""Distinct per-GPU demands kept; beyond that the least frequent are dropped."""
COLUMNS = (GPU, CPU, MEMORY)
"""Resource columns of `NodeResources.free`, in this order."""
REFRESHED_KEY = "gpu_fragmentation.refreshed"
"""Cycle-state key marking that the `NodeResources` were refreshed in this cycle."""


class NodeResources:
    """The resource states of the node rows.

    A state is what the score reads of a node: its free GPUs, cpu (millicores) and memory
    (bytes). `state_of_row` (rows,) gives each row's state; `free` (3, states) the free GPUs,
    cpu and memory of each state as float32 (exact for GPUs and millicores, within 1e-7 for
    bytes). Scores are computed per state and gathered to the rows.

    `refresh` runs once per cycle: when the cache changed since (its `generation`), it finds the
    rows whose free amounts changed (one comparison with a copy of the array) and gives each a
    new state at the end. A state never changes once made, so a value computed per state stays
    valid while `generation` is the same. When the states outnumber the rows by more than the
    rows (old states nobody uses any more), the states are rebuilt from scratch, one per
    distinct combination, and `generation` grows.
    """

    def __init__(self) -> None:
        self.cache: ClusterCache | None = None
        self.generation = 0
        self.count = 0  # states in use: the first `count` columns of `free`
        self.state_of_row = np.zeros(0, dtype=np.intp)  # (rows,)
        self.free: Float32Array = np.zeros((3, 0), dtype=np.float32)  # (3, capacity)
        self._seen = np.zeros((0, 0), dtype=np.int64)  # (rows, resources)
        self._seen_generation = -1  # the cache's generation at the last refresh

    def refresh(self, snapshot: Snapshot, state: CycleState) -> None:
        """Bring the states up to date with `snapshot` (once per cycle)."""
        if state.data.get(REFRESHED_KEY) is self:
            return
        state.data[REFRESHED_KEY] = self
        free = snapshot.free  # free: (rows, resources)
        if (
            self.cache is not snapshot.cache
            or self._seen.shape != free.shape
            or self.count > 2 * free.shape[0]
        ):
            self._rebuild(snapshot)
            return
        if snapshot.cache.generation == self._seen_generation:
            return  # nothing changed in the cache since the last refresh
        self._seen_generation = snapshot.cache.generation
        # cells: (changed cells,), flat indices into (rows, resources)
        cells = np.flatnonzero(free.ravel() != self._seen.ravel())
        if not cells.size:
            return
        width = free.shape[1]
        changed = np.array(sorted({cell // width for cell in cells.tolist()}))  # (changed rows,)
        self._seen[changed] = free[changed]
        start, end = self.count, self.count + changed.size
        if end > self.free.shape[1]:
            wider = np.zeros((3, max(2 * self.free.shape[1], end)), dtype=np.float32)
            wider[:, :start] = self.free[:, :start]
            self.free = wider
        self.free[:, start:end] = free[changed].T[list(COLUMNS)]
        self.state_of_row[changed] = np.arange(start, end)
        self.count = end

    def _rebuild(self, snapshot: Snapshot) -> None:
        free = snapshot.free  # free: (rows, resources)
        keys = free[:, list(COLUMNS)]  # keys: (rows, 3)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)  # (states, 3), (rows,)
        self.cache = snapshot.cache
        self.generation += 1
        self.count = unique.shape[0]
        self.state_of_row = inverse.reshape(-1).astype(np.intp)
        self.free = unique.T.astype(np.float32)
        self._seen = free.copy()
        self._seen_generation = snapshot.cache.generation


def waste_table(
    demand: npt.NDArray[np.float64], weight: npt.NDArray[np.float64]
) -> tuple[Float32Array, float, float]:
    """`phi` on the grid for per-GPU demands `demand` (types, 2: cpu, memory) with frequencies
    `weight` (types,); returns the flat (GRID * GRID,) table and the grid steps (cpu, memory)."""
    top = demand.max(axis=0)  # top: (2,)
    steps = np.maximum(top, 1.0) / (GRID - 1)  # steps: (2,)
    axis = np.arange(GRID, dtype=np.float64)  # axis: (GRID,)
    rc = axis[:, None, None] * steps[0]  # rc: (GRID, 1, 1)
    rm = axis[None, :, None] * steps[1]  # rm: (1, GRID, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        short_c = np.where(demand[:, 0] > 0, 1.0 - rc / demand[:, 0], 0.0)  # (GRID, 1, types)
        short_m = np.where(demand[:, 1] > 0, 1.0 - rm / demand[:, 1], 0.0)  # (1, GRID, types)
    short = np.maximum(np.maximum(short_c, short_m), 0.0)  # short: (GRID, GRID, types)
    phi = short @ (weight / weight.sum())  # phi: (GRID, GRID)
    return phi.ravel().astype(np.float32), float(steps[0]), float(steps[1])


class GpuFragmentation:
    """Score plugin: the change of a node's expected wasted GPUs (see the module docstring)."""

    name = FRAGMENTATION_NAME

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight
        self.nodes = NodeResources()
        self._counts: dict[tuple[int, int], int] = {}
        self._learned = 0
        self._built_at = 0
        self._table: Float32Array | None = None
        self._steps = np.ones((2, 1), dtype=np.float32)  # cpu, memory -> grid steps
        self._before = np.zeros(0, dtype=np.float32)  # (capacity,) waste of each state as it is
        self._before_count = 0  # states whose waste is in `_before`
        self._before_at = (-1, -1)  # (state generation, table build) `_before` is valid for

    @property
    def ready(self) -> bool:
        """Whether a GPU pod has been learned: before that, the score abstains and `waste`
        has no table to read."""
        return self._table is not None

    def learn(self, pod: PodInfo) -> None:
        """Count the per-GPU demand of a GPU pod (pods without GPUs are not counted)."""
        gpus = int(pod.requests[GPU])
        if gpus <= 0:
            return
        key = (int(pod.requests[CPU]) // gpus, int(pod.requests[MEMORY]) // gpus)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._learned += 1
        if len(self._counts) > MAX_DEMANDS:
            ordered = sorted(self._counts.items(), key=lambda item: (-item[1], item[0]))
            self._counts = dict(ordered[:MAX_DEMANDS])
        if self._learned - self._built_at >= max(1, self._built_at // REBUILD_GROWTH):
            self._rebuild()

    def _rebuild(self) -> None:
        demand = np.array(list(self._counts), dtype=np.float64)  # demand: (types, 2)
        weight = np.array(list(self._counts.values()), dtype=np.float64)  # weight: (types,)
        table, step_c, step_m = waste_table(demand, weight)
        self._table = table
        self._steps = np.array([[1.0 / step_c], [1.0 / step_m]], dtype=np.float32)
        self._built_at = self._learned

    def waste(self, free: Float32Array) -> Float32Array:
        """(n,) expected wasted GPUs of nodes with the free GPUs, cpu and memory `free` (3, n)."""
        assert self._table is not None
        gpus = np.maximum(free[0], 0.0)  # gpus: (n,)
        ratio = free[1:] / np.maximum(gpus, 1.0)  # ratio: (2, n), cpu and memory per free GPU
        ratio *= self._steps  # now in grid steps
        np.clip(ratio, 0, GRID - 1, out=ratio)
        cells = ratio.astype(np.intp)  # cells: (2, n)
        cell = cells[0]  # cell: (n,), flat index into the table
        cell *= GRID
        cell += cells[1]
        waste: Float32Array = self._table[cell]  # waste: (n,), per free GPU
        waste *= gpus
        return waste

    def _current_waste(self) -> Float32Array:
        """(states,) waste of every state as it is; computed once per state."""
        nodes = self.nodes
        if self._before_at != (nodes.generation, self._built_at):
            self._before_at = (nodes.generation, self._built_at)
            self._before_count = 0
        if self._before.shape[0] < nodes.count:
            self._before = np.resize(self._before, nodes.free.shape[1])
        if self._before_count < nodes.count:
            start, end = self._before_count, nodes.count
            self._before[start:end] = self.waste(nodes.free[:, start:end])
            self._before_count = end
        return self._before[: nodes.count]

    def current_waste_by_row(self) -> Float32Array:
        """(rows,) expected wasted GPUs of every node as it is (after `nodes.refresh`)."""
        by_row: Float32Array = self._current_waste()[self.nodes.state_of_row]
        return by_row

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        self.learn(pod)
        if self._table is None:
            return None
        nodes = self.nodes
        nodes.refresh(snapshot, state)
        before = self._current_waste()  # before: (states,)
        request = pod.requests[list(COLUMNS)].astype(np.float32)  # request: (3,)
        after = self.waste(nodes.free[:, : nodes.count] - request[:, None])  # (states,)
        removed = np.subtract(before, after, dtype=np.float64)  # removed: (states,), GPUs
        if removed.size == 0 or removed.min() == removed.max():
            return None  # every node equal: no preference
        removed *= POINTS_PER_GPU
        removed += NEUTRAL_POINTS
        np.clip(removed, 0.0, MAX_POINTS, out=removed)
        points: FloatArray = removed[nodes.state_of_row]  # points: (rows,)
        return points
