"""GPUs in thousandths for `gpu-scheduler simulate --shares`: which GPU of a node takes a pod,
and how much of the cluster's free GPU is fragmented. Pure: numpy arrays in, indices and arrays
out.

A node's GPUs are a row of `free` (gpus,): the thousandths of each GPU still free (`WHOLE` =
1000: untouched; 0: full, or no such GPU: rows are padded with 0 past the node's GPU count). A
GPU-sharing pod asks for `milli` < 1000 of one GPU and fits a GPU with `free >= milli`; a
whole-GPU pod asking for `g` GPUs needs `g` untouched GPUs.

Which GPU a share takes on its node (`share_gpu`), by policy:

- `PACKING`, gpu-scheduler's, as its DRA allocator orders devices that allow multiple
  allocations (`scheduler.dra.allocator_packing.packed`, then `scheduler.dra.allocator_order.
  domain_phases` with the busy domains of a share): first the GPUs already partly used that
  have room, the least room left afterwards first; then an untouched GPU, in an NVLink domain
  that some used GPU has already broken before a whole domain, among those the domain with the
  fewest untouched GPUs, then the lowest domain index; inside the domain the lowest GPU index
  (the search's device order); GPUs of no known domain last. Ties go to the lowest index.
- `FIRST_FIT`: the lowest index with room (kube-scheduler 1.37's structured allocator takes
  the first device in its order whose capacity fits).
- `TIGHTEST`: the GPU with the least room left afterwards, then the lowest index (best fit).

Fragmentation (`fragmented_milli`) is the measure of Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC '23), section
3: seen by a task `m`, the free GPU of node `n` that `m` could not use is fragmented: all of
the node's free GPU when `m` cannot run on `n` at all (too little cpu, too few GPUs with
`free >= milli(m)`, or a GPU type `m` does not accept), otherwise the free thousandths of the
GPUs whose free share is below `milli(m)`. The node's fragmentation is the expectation over the
target workload, `F_n = sum_m p_m F_n(m)`, with `p_m` the share of task type `m` in it; the
cluster's is the sum over nodes. Here the check that `m` can run on `n` covers memory and the
pod count too (the paper's covers cpu and GPU), because the simulated nodes run out of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

WHOLE = 1000
"""Thousandths of one GPU (the openb traces' `gpu_milli` of a whole GPU)."""
PACKING = "packing"
FIRST_FIT = "first-fit"
TIGHTEST = "tightest"
GPU_CHOICES = (PACKING, FIRST_FIT, TIGHTEST)
"""The rules `share_gpu` knows, see the module docstring."""
NO_GPU = -1
UNKNOWN_DOMAIN = -1

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def share_gpu(
    free: IntArray, domains: npt.NDArray[np.int32], gpu_count: int, milli: int, rule: str
) -> int:
    """The GPU index of a node that a share of `milli` thousandths takes by `rule` (see the
    module docstring); `free` (gpus,) and `domains` (gpus,) are the node's row (domain -1: no
    known domain); `NO_GPU` when no GPU has room. `ValueError` for an unknown rule."""
    if rule not in GPU_CHOICES:
        raise ValueError(f"unknown GPU choice {rule!r} (known: {', '.join(GPU_CHOICES)})")
    row = free[:gpu_count]  # row: (count,)
    room = row >= milli  # room: (count,)
    if not room.any():
        return NO_GPU
    if rule == FIRST_FIT:
        return int(np.argmax(room))
    left = np.where(room, row - milli, WHOLE + 1)  # left: (count,), room left after the share
    if rule == TIGHTEST:
        return int(np.argmin(left))  # argmin takes the lowest index on a tie
    partly = room & (row < WHOLE)  # partly: (count,)
    if partly.any():
        return int(np.argmin(np.where(partly, left, WHOLE + 1)))
    return untouched_in_broken_domain(row, domains[:gpu_count])


def untouched_in_broken_domain(row: IntArray, domains: npt.NDArray[np.int32]) -> int:
    """An untouched GPU of a node without partly used GPUs with room (`PACKING`'s second
    step): the lowest index in the best domain (a broken one before a whole one, then the fewest
    untouched GPUs, then the lowest domain index), GPUs of no known domain last. `row` and
    `domains` are (count,); `NO_GPU` when no GPU is untouched."""
    untouched = row == WHOLE  # untouched: (count,)
    if not untouched.any():
        return NO_GPU
    known = untouched & (domains != UNKNOWN_DOMAIN)  # known: (count,)
    if not known.any():
        return int(np.argmax(untouched))
    width = int(domains.max()) + 1
    index = np.where(domains >= 0, domains, width)  # index: (count,), unknown in a spare bin
    touched = np.bincount(index, weights=~untouched, minlength=width + 1)[:width]  # (domains,)
    whole = np.bincount(index, weights=untouched, minlength=width + 1)[:width]  # (domains,)
    fitting = np.flatnonzero(whole > 0)  # fitting: (fitting,)
    # lexsort: the last key is the primary one
    best = fitting[np.lexsort((fitting, whole[fitting], touched[fitting] == 0))[0]]
    return int(np.argmax(untouched & (domains == best)))


def lowest_untouched(row: IntArray, gpu_count: int, gpus: int) -> tuple[int, ...]:
    """The `gpus` lowest-numbered untouched GPUs of a node's `row` (gpus,), as kube-scheduler
    1.37's allocator takes whole devices in its order; () when there are fewer."""
    found = np.flatnonzero(row[:gpu_count] == WHOLE)[:gpus]  # found: (<= gpus,)
    return tuple(int(i) for i in found) if found.size == gpus else ()


# -- fragmentation --------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTypes:
    """The target workload of the fragmentation measure: one entry per distinct GPU pod shape.

    `cpu` (types,) millicores, `memory` (types,) bytes, `gpus` (types,) GPUs asked for,
    `milli` (types,) thousandths asked of each of them (1000 for whole GPUs), `weight` (types,)
    the share of each type among the workload's GPU pods (sums to 1), `accepts` (types, rows)
    whether a type may run on a node at all (its accepted GPU types).
    """

    cpu: IntArray
    memory: IntArray
    gpus: IntArray
    milli: IntArray
    weight: FloatArray
    accepts: BoolArray


def fragmented_milli(
    free: IntArray,
    cpu_free: IntArray,
    memory_free: IntArray,
    pods_free: IntArray,
    types: TaskTypes,
) -> FloatArray:
    """(rows,) the expected fragmented thousandths of GPU of every node (module docstring).

    `free` is (rows, gpus) free thousandths per GPU, zero-padded; `cpu_free`, `memory_free` and
    `pods_free` are (rows,). Without task types every node has 0.
    """
    rows = free.shape[0]
    if types.weight.size == 0:
        return np.zeros(rows, dtype=np.float64)
    total = free.sum(axis=1)  # total: (rows,)
    levels, level_of = np.unique(types.milli, return_inverse=True)  # (levels,), (types,)
    fits = free[None, :, :] >= levels[:, None, None]  # fits: (levels, rows, gpus)
    usable = fits.sum(axis=2)  # usable: (levels, rows), GPUs with room for one of the level
    below = np.where(fits, 0, free[None, :, :]).sum(axis=2)  # below: (levels, rows)
    runs = (  # runs: (types, rows), the type could be placed on the node now
        types.accepts
        & (usable[level_of] >= types.gpus[:, None])
        & (cpu_free[None, :] >= types.cpu[:, None])
        & (memory_free[None, :] >= types.memory[:, None])
        & (pods_free[None, :] >= 1)
    )
    seen = np.where(runs, below[level_of], total[None, :])  # seen: (types, rows)
    fragmented: FloatArray = types.weight @ seen  # fragmented: (rows,)
    return fragmented
