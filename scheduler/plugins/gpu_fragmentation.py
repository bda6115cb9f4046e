"""GpuFragmentation: a score that keeps free GPUs usable.

A GPU is only as useful as the cpu and memory left beside it: a node with two free GPUs and one
free core cannot run a pod that asks for one GPU and eight cores. This score looks at cpu and
memory, which the NVLink-domain score does not.

The measure is the one of Weng et al., "Beware of Fragmentation" (USENIX ATC '23), with free GPU
counted in GPUs: a node's whole free GPUs plus the room left on its shared GPUs (`SharedGpus`:
in the daemon DRA devices that allow multiple allocations, `scheduler.plugins.shared_gpus`), in
thousandths. The plugin learns the workload from the GPU pods it scores: each pod asking for
`g` GPUs, `c` cpu and `m` memory counts once as the per-GPU demand `(c / g, m / g)`, and a pod
taking a share of `s` thousandths of a GPU as `(1000 c / s, 1000 m / s)`, its cpu and memory
per GPU's worth. The expected waste of a node with `G` free GPU, `C` free cpu and `M` free
memory is the free GPU that pods drawn from that demand could not use for lack of cpu or
memory:

    waste(G, C, M) = G * phi(C / G, M / G)
    phi(rc, rm)    = E_t[ max(0, 1 - rc / c_t, 1 - rm / m_t) ]    (t: a learned per-GPU demand)

(`phi` is the share of free GPU without enough cpu or memory per GPU; 0 on a node without free
GPU.) The score of a node is the change of its waste if the pod went there, in GPUs:
`delta = waste(after) - waste(before)` (a share takes its thousandths off `G`), mapped to
`50 - POINTS_PER_GPU * delta` and clipped to 0..100, so a placement that leaves the node's free
GPU as usable as before scores 50, one that strands a GPU scores 50 - 12.5, and one that takes
GPU which was already short of cpu or memory scores above 50. CPU-only pods are scored too: on
a node without free GPU they waste nothing; on a node with free GPU they waste the GPU whose cpu
or memory they take. Beyond the waste, which is 0 wherever cpu and memory are plentiful, a
CPU-only pod (no GPU, no share, no claim) counts `STEER_SHARE` GPUs of waste per GPU whose cpu
or memory it takes (`host_share`: the node's free GPU times the larger of the shares of its
free cpu and free memory the pod takes), so it goes to nodes without free GPU (CPU-only nodes,
full GPU nodes) when they can take it. Clusters run by kube-scheduler get that with a taint on
GPU nodes (Kubernetes' taint use cases: dedicated nodes with special hardware, and the
ExtendedResourceToleration admission plugin that lets pods asking for the GPU tolerate it);
here it is a preference, so CPU-only pods still use GPU nodes when nothing else fits.

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
nodes. A state is a node's free GPU, cpu and memory (`NodeResources`); after a cluster change
the rows whose free amounts changed are found by one comparison with the previous array and get
new states. What remains per pod is a few numpy passes over the states, one gather over the
nodes, and that comparison when the cluster or the room on shared GPUs changed since the
previous cycle.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import BoolArray, CycleState, FloatArray
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY
from scheduler.state.cache import ClusterCache

Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

FRAGMENTATION_NAME = "GpuFragmentation"
POINTS_PER_GPU = 12.5
"""Points lost per GPU of expected waste added (50 points: four GPUs)."""
NEUTRAL_POINTS = 50.0
MAX_POINTS = 100.0
GRID = 64
"""Grid points per axis of the `phi` table."""
REBUILD_GROWTH = 8
"""The `phi` table is rebuilt when the pods learned grew by 1/REBUILD_GROWTH since it was built."""
WHOLE = 1000
"""Thousandths of one GPU: the unit of shares and of the room on shared GPUs."""
STEER_SHARE = 0.25
"""GPUs of waste counted per GPU whose cpu or memory a CPU-only pod takes (`host_share`)."""
MAX_DEMANDS = 512
"""Distinct per-GPU demands kept; beyond that the least frequent are dropped."""
COLUMNS = (GPU, CPU, MEMORY)
"""Resource columns of `NodeResources.free`, in this order."""
REFRESHED_KEY = "gpu_fragmentation.refreshed"
"""Cycle-state key marking that the `NodeResources` were refreshed in this cycle."""


class NodeResources:
    """The resource states of the node rows.

    A state is what the score reads of a node: its free GPU (whole free GPUs plus the room left
    on its shared GPUs, in GPUs), cpu (millicores) and memory (bytes). `state_of_row` (rows,)
    gives each row's state; `free` (3, states) the free GPU, cpu and memory of each state as
    float32 (exact for whole GPUs, thousandths and millicores, within 1e-7 for bytes). Scores
    are computed per state and gathered to the rows.

    `refresh` runs once per cycle: when the cache (its `generation`) or the room changed since,
    it finds the rows whose free amounts changed (one comparison with a copy of the array) and
    gives each a new state at the end. A state never changes once made, so a value computed per
    state stays valid while `generation` is the same. When the states outnumber the rows by
    more than the rows (old states nobody uses any more), the states are rebuilt from scratch,
    one per distinct combination, and `generation` grows.
    """

    def __init__(self) -> None:
        self.cache: ClusterCache | None = None
        self.generation = 0
        self.count = 0  # states in use: the first `count` columns of `free`
        self.state_of_row = np.zeros(0, dtype=np.intp)  # (rows,)
        self.free: Float32Array = np.zeros((3, 0), dtype=np.float32)  # (3, capacity)
        self._seen = np.zeros((0, 0), dtype=np.int64)  # (rows, 4): KEY_COLUMNS and the room
        self._seen_generation = -1  # the cache's generation at the last refresh

    def refresh(self, snapshot: Snapshot, state: CycleState, room: IntArray | None = None) -> None:
        """Bring the states up to date with `snapshot` and `room` (rows,), the thousandths free
        on each node's shared GPUs (None: no shared GPU anywhere); once per cycle."""
        if state.data.get(REFRESHED_KEY) is self:
            return
        state.data[REFRESHED_KEY] = self
        unchanged = (
            room is None
            and self.cache is snapshot.cache
            and snapshot.cache.generation == self._seen_generation
            and not self._seen[:, -1].any()
        )
        if unchanged:
            return  # nothing changed in the cache since the last refresh, no room anywhere
        free = snapshot.free[:, list(COLUMNS)]  # free: (rows, 3)
        shared = np.zeros(free.shape[0], dtype=np.int64) if room is None else room  # (rows,)
        keys = np.column_stack([free, shared])  # keys: (rows, 4)
        if (
            self.cache is not snapshot.cache
            or self._seen.shape != keys.shape
            or self.count > 2 * keys.shape[0]
        ):
            self._rebuild(snapshot, keys)
            return
        self._seen_generation = snapshot.cache.generation
        # cells: (changed cells,), flat indices into (rows, 4)
        cells = np.flatnonzero(keys.ravel() != self._seen.ravel())
        if not cells.size:
            return
        width = keys.shape[1]
        changed = np.array(sorted({cell // width for cell in cells.tolist()}))  # (changed rows,)
        self._seen[changed] = keys[changed]
        start, end = self.count, self.count + changed.size
        if end > self.free.shape[1]:
            wider = np.zeros((3, max(2 * self.free.shape[1], end)), dtype=np.float32)
            wider[:, :start] = self.free[:, :start]
            self.free = wider
        self.free[:, start:end] = state_free(keys[changed])
        self.state_of_row[changed] = np.arange(start, end)
        self.count = end

    def _rebuild(self, snapshot: Snapshot, keys: npt.NDArray[np.int64]) -> None:
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)  # (states, 4), (rows,)
        self.cache = snapshot.cache
        self.generation += 1
        self.count = unique.shape[0]
        self.state_of_row = inverse.reshape(-1).astype(np.intp)
        self.free = state_free(unique)
        self._seen = keys.copy()
        self._seen_generation = snapshot.cache.generation


def state_free(keys: npt.NDArray[np.int64]) -> Float32Array:
    """(3, n) free GPU (whole GPUs plus room / `WHOLE`), cpu and memory of `keys` (n, 4)."""
    found = keys[:, :3].T.astype(np.float32)  # found: (3, n)
    found[0] += keys[:, 3].astype(np.float32) / WHOLE
    return found


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


class SharedGpus(Protocol):
    """Where GPUs are shared in thousandths, beside the whole GPUs of `Snapshot.free`."""

    def room(self, snapshot: Snapshot) -> IntArray | None:
        """(rows,) thousandths free on each node's shared GPUs; None: no shared GPU anywhere."""
        ...

    def share(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> int:
        """Thousandths of GPU the pod takes as shares (0: none), once filtered."""
        ...


class GpuFragmentation:
    """Score plugin: the change of a node's expected wasted GPUs (see the module docstring).
    `shared` tells the room on shared GPUs and the shares pods take (None: whole GPUs only);
    `steer_cpu_only` adds the steering of CPU-only pods."""

    name = FRAGMENTATION_NAME

    def __init__(
        self, weight: float = 1.0, shared: SharedGpus | None = None, steer_cpu_only: bool = True
    ) -> None:
        self.weight = weight
        self.shared = shared
        self.steer_cpu_only = steer_cpu_only
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

    def learn(self, pod: PodInfo, share: int = 0) -> None:
        """Count the per-GPU demand of a GPU pod: its cpu and memory per GPU it asks for, or
        per GPU's worth of the `share` thousandths it takes (pods without either are not
        counted)."""
        gpus = int(pod.requests[GPU])
        if gpus > 0:
            key = (int(pod.requests[CPU]) // gpus, int(pod.requests[MEMORY]) // gpus)
        elif share > 0:
            key = (
                int(pod.requests[CPU]) * WHOLE // share,
                int(pod.requests[MEMORY]) * WHOLE // share,
            )
        else:
            return
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
        ratio = free[1:] / np.maximum(gpus, 1.0 / WHOLE)  # ratio: (2, n), per free GPU
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

    def refresh(self, snapshot: Snapshot, state: CycleState) -> None:
        """The node states of this cycle, with the room on shared GPUs when `shared` is set."""
        room = self.shared.room(snapshot) if self.shared is not None else None
        self.nodes.refresh(snapshot, state, room)

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        share = self.shared.share(pod, snapshot, state) if self.shared is not None else 0
        self.learn(pod, share)
        if self._table is None:
            return None
        nodes = self.nodes
        self.refresh(snapshot, state)
        before = self._current_waste()  # before: (states,)
        request = pod.requests[list(COLUMNS)].astype(np.float32)  # request: (3,)
        request[0] += share / WHOLE
        free = nodes.free[:, : nodes.count]  # free: (3, states)
        after = self.waste(free - request[:, None])  # after: (states,)
        removed = np.subtract(before, after, dtype=np.float64)  # removed: (states,), GPUs
        if self.steer_cpu_only and cpu_only(pod, share):
            removed -= STEER_SHARE * host_share(free, request)
        if removed.size == 0 or removed.min() == removed.max():
            return None  # every node equal: no preference
        removed *= POINTS_PER_GPU
        removed += NEUTRAL_POINTS
        np.clip(removed, 0.0, MAX_POINTS, out=removed)
        points: FloatArray = removed[nodes.state_of_row]  # points: (rows,)
        return points


def cpu_only(pod: PodInfo, share: int) -> bool:
    """Whether the pod asks for no GPU in any form (no GPU, no share, no claim)."""
    return share == 0 and not pod.requests[GPU] and pod.resource_claims is None and not pod.extended


def host_share(free: Float32Array, request: Float32Array) -> FloatArray:
    """(n,) the GPUs whose cpu or memory a pod asking `request` (3,) takes on nodes with `free`
    (3, n): the free GPU times the larger of the shares of free cpu and free memory it takes
    (0 on a node without free GPU)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        taken = np.where(free[1:] > 0, request[1:, None] / free[1:], 1.0)  # taken: (2, n)
    found: FloatArray = np.maximum(free[0], 0.0) * np.minimum(taken.max(axis=0), 1.0)
    return found
