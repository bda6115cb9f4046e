"""Which physical GPUs a pod's time-sliced (or MPS) replicas come from, packed or spread.

A node sharing its GPUs offers `replicas` accesses to each physical GPU; `taken` (gpus,) counts
the replicas held on each. A pod asking for `count` replicas takes one replica on each of
`count` distinct GPUs that still have one free (the device plugin's distributed policy also
spreads a multi-replica request over GPUs; holding two replicas of one GPU buys no more of it).

Policies, the same two the device plugin's `--shared-devices-allocation-policy` has:

- PACK: the GPUs with the most replicas taken first (lowest index among equals), so whole GPUs
  stay free for as long as possible;
- SPREAD: the GPUs with the fewest replicas taken first (lowest index among equals), so sharers
  contend as little as possible.

Pure numpy over one node's columns; `None` when fewer than `count` GPUs have a free replica.
`node_preferences` scores many nodes in one pass (`node_preference` is its one-node reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

PACK = "pack"
SPREAD = "spread"
POLICIES = (PACK, SPREAD)

IntArray = npt.NDArray[np.int64]
AnyIntArray = npt.NDArray[np.integer[Any]]


def replica_order(taken: IntArray, replicas: int, policy: str) -> IntArray:
    """Indices of the GPUs with a free replica, best first under `policy`; taken: (gpus,)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    taken = np.asarray(taken, dtype=np.int64)  # taken: (gpus,)
    open_gpus = np.flatnonzero(taken < replicas)  # open_gpus: (open,)
    key = -taken[open_gpus] if policy == PACK else taken[open_gpus]  # key: (open,)
    return open_gpus[np.argsort(key, kind="stable")]


def choose_replicas(
    taken: IntArray, replicas: int, count: int, policy: str
) -> tuple[int, ...] | None:
    """`count` distinct GPU indices to take one replica each on, sorted; None if they do not fit.
    taken: (gpus,) replicas held per GPU; `replicas` per GPU in all."""
    if count <= 0:
        return ()
    order = replica_order(taken, replicas, policy)  # order: (open,)
    if order.size < count:
        return None
    return tuple(sorted(int(g) for g in order[:count]))


PREFERENCE_SHARE = 90.0
"""Points for how full (PACK) or empty (SPREAD) the chosen GPUs are; the rest of 100 go to
how many of the node's GPUs are partly used (PACK) or wholly free (SPREAD)."""


def node_preference(taken: IntArray, replicas: int, count: int, policy: str) -> float:
    """How much `policy` wants a node for a pod taking `count` replicas, in 0..100 (higher is
    better); taken: (gpus,). PACK prefers the node whose chosen GPUs already hold the most
    replicas, then the node with the most partly used GPUs, so partly used GPUs fill up before
    a whole one is broken into; SPREAD prefers the node whose chosen GPUs hold the fewest, then
    the node with the most wholly free GPUs. 0 when the pod does not fit."""
    taken = np.asarray(taken, dtype=np.int64)  # taken: (gpus,)
    chosen = choose_replicas(taken, replicas, count, policy)
    if not chosen or replicas <= 1:
        return 0.0
    share = float(taken[list(chosen)].mean()) / (replicas - 1)  # in [0, 1]
    if policy == PACK:
        rest = float(((taken > 0) & (taken < replicas)).mean())
        return PREFERENCE_SHARE * share + (100.0 - PREFERENCE_SHARE) * rest
    rest = float((taken == 0).mean())
    return PREFERENCE_SHARE * (1.0 - share) + (100.0 - PREFERENCE_SHARE) * rest


def node_preferences(
    taken: AnyIntArray,
    replicas: AnyIntArray,
    gpu_count: AnyIntArray,
    count: AnyIntArray,
    policy: str,
) -> npt.NDArray[np.float64]:
    """`node_preference` of many nodes at once: taken (nodes, gpus) replicas held per GPU
    (columns past a node's `gpu_count` ignored), replicas (nodes,) per GPU, gpu_count (nodes,)
    physical GPUs, count (nodes,) replicas the pod takes there (>= 1). Returns (nodes,)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    taken = np.asarray(taken, dtype=np.int64)  # taken: (nodes, gpus)
    nodes, width = taken.shape
    replicas = np.asarray(replicas, dtype=np.int64)  # replicas: (nodes,)
    count = np.asarray(count, dtype=np.int64)  # count: (nodes,)
    gpus = np.asarray(gpu_count, dtype=np.int64)  # gpus: (nodes,)
    real = np.arange(width)[None, :] < gpus[:, None]  # real: (nodes, gpus)
    open_gpus = real & (taken < replicas[:, None])  # open_gpus: (nodes, gpus)
    fits = (open_gpus.sum(axis=1) >= count) & (count >= 1) & (replicas > 1)  # fits: (nodes,)
    if width == 0:
        return np.zeros(nodes, dtype=np.float64)
    # best first: the most taken (PACK) or the fewest (SPREAD) among open GPUs
    key = np.where(open_gpus, -taken if policy == PACK else taken, np.iinfo(np.int64).max)
    ordered = np.sort(key, axis=1)  # ordered: (nodes, gpus)
    values = np.where(ordered == np.iinfo(np.int64).max, 0, np.abs(ordered))  # taken, best first
    sums = np.cumsum(values, axis=1)  # sums: (nodes, gpus)
    last = np.clip(count - 1, 0, width - 1)  # last: (nodes,)
    chosen_sum = sums[np.arange(nodes), last]  # chosen_sum: (nodes,)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = chosen_sum / np.maximum(count, 1) / np.maximum(replicas - 1, 1)  # (nodes,)
        share = np.clip(share, 0.0, 1.0)
        physical = np.maximum(gpus, 1)
        if policy == PACK:
            rest = (real & (taken > 0) & (taken < replicas[:, None])).sum(axis=1) / physical
            points = PREFERENCE_SHARE * share + (100.0 - PREFERENCE_SHARE) * rest
        else:
            rest = (real & (taken == 0)).sum(axis=1) / physical
            points = PREFERENCE_SHARE * (1.0 - share) + (100.0 - PREFERENCE_SHARE) * rest
    return np.where(fits, points, 0.0).astype(np.float64)
