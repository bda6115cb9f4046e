"""Which GPUs of a node are in use, per-domain occupancy arrays, and GPU choice inside a node.

Pods placed by this scheduler carry `gpu-scheduler.io/gpus: "0,1"`, the GPU indices it chose
for them. Pods placed by anyone else only tell how many GPUs they hold. `used_mask` turns both
into one boolean mask per node.

Fill order for GPUs of pods without the annotation: most-used domain first. The domains that
still have free GPUs are taken in order of fewest free GPUs (ties: the larger, i.e. more used,
domain, then the lowest domain index), and inside a domain the lowest-numbered free GPUs go
first. Why this rule: it mirrors the best-fit rule `choose_gpus` applies, so the estimate looks
like the packing this scheduler would have produced; NVLink-aware device plugins also pack a
pod's GPUs into one domain; and the result depends only on the total count, not on the order
pods are listed. The guess errs on the side of keeping whole domains free, which only affects
the quality of later scores (the kubelet still admits by count).

`choose_gpus` picks the GPUs for a pod on a chosen node:
1. Best single domain: among domains with at least `count` free GPUs, the one with the fewest
   free GPUs (best fit); ties go to the larger domain (finishing a partly used domain keeps an
   untouched one whole), then to the lowest domain index. Lowest-numbered free GPUs inside it.
2. Otherwise the fewest domains: the domains with the most free GPUs are taken whole (ties:
   lowest index) until the remainder fits in one more domain, which is chosen by best fit among
   the rest, so a spanning placement also finishes partly used domains where it can.
3. Otherwise (fewer free GPUs than `count`) no choice: None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from topology.domains import NodeTopology, TopologyError
from topology.text import clip, quote

GPUS_ANNOTATION = "gpu-scheduler.io/gpus"
"""Pod annotation with the GPU indices this scheduler chose, e.g. ``"0,1"``."""
GPU_SEPARATOR = ","
NO_DOMAIN = -1
"""`GpuChoice.domain` when the GPUs span more than one domain."""
MAX_INDEX_DIGITS = 6
"""Longest GPU index accepted in the pod annotation."""

_INDEX_RE = re.compile(rf"^\s*([0-9]{{1,{MAX_INDEX_DIGITS}}})\s*$")

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int32]


class DomainArrays(NamedTuple):
    """Per-domain occupancy of every node, padded to the largest domain count D.

    `free_per_domain` and `domain_size` are int32 (nodes, D); a node with fewer than D domains
    has 0 in both at the padded positions (a padded slot never fits a pod asking for >= 1 GPU).
    `domain_count` is int32 (nodes,). Column d of a node is its domain d in `NodeTopology` order.
    """

    free_per_domain: IntArray
    domain_size: IntArray
    domain_count: IntArray


class GpuChoice(NamedTuple):
    """GPUs chosen for a pod: the domain index (or `NO_DOMAIN` when spanning) and the sorted
    GPU indices."""

    domain: int
    gpus: tuple[int, ...]


def parse_gpus_annotation(value: str, gpu_count: int) -> tuple[int, ...]:
    """GPU indices from a pod's `gpu-scheduler.io/gpus` value, e.g. `"0, 1"` -> `(0, 1)`.

    Raises `TopologyError` naming the annotation and the value (cut to `topology.text.MAX_ECHO`
    characters) for a malformed index, an index outside `0..gpu_count-1`, or a repeated index.
    The result is sorted. Linear in the length of `value`.
    """
    indices: set[int] = set()
    shown = clip(value)
    for token in value.split(GPU_SEPARATOR):
        match = _INDEX_RE.match(token)
        if match is None:
            raise TopologyError(
                f'{GPUS_ANNOTATION} "{shown}": {quote(token.strip())} is not a GPU index'
            )
        gpu = int(match.group(1))
        if gpu >= gpu_count:
            raise TopologyError(
                f'{GPUS_ANNOTATION} "{shown}": GPU {gpu} is out of range '
                f"(node has {gpu_count} GPUs)"
            )
        if gpu in indices:
            raise TopologyError(f'{GPUS_ANNOTATION} "{shown}": GPU {gpu} is listed twice')
        indices.add(gpu)
    return tuple(sorted(indices))


def _domain_ids(topology: NodeTopology) -> npt.NDArray[np.intp]:
    return np.asarray(topology.gpu_domain_ids(), dtype=np.intp)  # ids: (gpus,)


def used_mask(
    topology: NodeTopology, annotated_gpus: Iterable[int], unannotated_count: int
) -> BoolArray:
    """Boolean mask (gpus,) of the node's GPUs in use.

    `annotated_gpus` are the indices from the `gpu-scheduler.io/gpus` annotations of the pods on
    the node (a GPU named by two pods is simply in use). `unannotated_count` GPUs of pods without
    the annotation are then placed by the module's fill order; if more are claimed than remain
    free, every GPU is in use. Raises `TopologyError` for an annotated index outside the node and
    `ValueError` for a negative count.
    """
    if unannotated_count < 0:
        raise ValueError(f"unannotated_count must be >= 0, got {unannotated_count}")
    mask = np.zeros(topology.gpu_count, dtype=np.bool_)  # mask: (gpus,)
    for gpu in annotated_gpus:
        if not 0 <= gpu < topology.gpu_count:
            raise TopologyError(
                f"GPU {gpu} is out of range for a node with {topology.gpu_count} GPUs"
            )
        mask[gpu] = True
    if unannotated_count == 0:
        return mask
    ids = _domain_ids(topology)  # ids: (gpus,)
    free_gpus = np.flatnonzero(~mask)  # free_gpus: (free,)
    free_per_domain = np.bincount(ids[free_gpus], minlength=topology.domain_count)  # (domains,)
    size = np.asarray(topology.domain_sizes, dtype=np.intp)  # size: (domains,)
    fill_order = np.lexsort((np.arange(size.size), -size, free_per_domain))  # (domains,)
    domain_rank = np.empty(size.size, dtype=np.intp)  # domain_rank: (domains,)
    domain_rank[fill_order] = np.arange(size.size)
    order = np.lexsort((free_gpus, domain_rank[ids[free_gpus]]))  # order: (free,)
    mask[free_gpus[order[:unannotated_count]]] = True
    return mask


def build_domain_arrays(
    topologies: Sequence[NodeTopology], used_masks: Sequence[BoolArray]
) -> DomainArrays:
    """Per-domain free and total GPUs of every node (see `DomainArrays`).

    `used_masks[n]` is node n's (gpus,) mask from `used_mask`. Raises `ValueError` if the
    sequences differ in length or a mask does not match its node's GPU count.
    """
    if len(topologies) != len(used_masks):
        raise ValueError(f"{len(topologies)} topologies but {len(used_masks)} masks")
    nodes = len(topologies)
    width = max((t.domain_count for t in topologies), default=0)
    slot_parts: list[npt.NDArray[np.intp]] = []
    used_parts: list[BoolArray] = []
    for node, (topology, mask) in enumerate(zip(topologies, used_masks, strict=True)):
        if mask.shape != (topology.gpu_count,):
            raise ValueError(
                f"node {node}: mask shape {mask.shape} != ({topology.gpu_count},) GPUs"
            )
        slot_parts.append(_domain_ids(topology) + node * width)  # slots: (gpus,)
        used_parts.append(np.asarray(mask, dtype=np.bool_))  # used: (gpus,)
    slots = np.concatenate([*slot_parts, np.zeros(0, dtype=np.intp)])  # slots: (all_gpus,)
    used = np.concatenate([*used_parts, np.zeros(0, dtype=np.bool_)])  # used: (all_gpus,)
    cells = nodes * width
    domain_size = np.bincount(slots, minlength=cells).reshape(nodes, width)  # (nodes, D)
    free = np.bincount(slots[~used], minlength=cells).reshape(nodes, width)  # (nodes, D)
    domain_count = np.array([t.domain_count for t in topologies], dtype=np.int32)  # (nodes,)
    return DomainArrays(
        free.astype(np.int32),  # free_per_domain: (nodes, D)
        domain_size.astype(np.int32),  # domain_size: (nodes, D)
        domain_count,
    )


def _best_fit(free: npt.NDArray[np.intp], size: npt.NDArray[np.intp], need: int) -> int:
    """Domain with the fewest free GPUs >= need, ties larger size then lower index; -1 if none."""
    fits = free >= need  # fits: (domains,)
    if not fits.any():
        return NO_DOMAIN
    # Sort keys, last is primary: non-fitting last, then free ascending, size descending, index.
    order = np.lexsort((np.arange(free.size), -size, free, ~fits))  # order: (domains,)
    return int(order[0])


def choose_gpus(topology: NodeTopology, mask: BoolArray, count: int) -> GpuChoice | None:
    """GPUs for a pod asking for `count` GPUs on a node whose GPUs in use are `mask` (gpus,).

    Follows the module's three steps; returns None when fewer than `count` GPUs are free.
    Raises `ValueError` if `count < 1` or the mask does not match the node.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if mask.shape != (topology.gpu_count,):
        raise ValueError(f"mask shape {mask.shape} != ({topology.gpu_count},) GPUs")
    ids = _domain_ids(topology)  # ids: (gpus,)
    free_mask = ~mask  # free_mask: (gpus,)
    free = np.bincount(ids[free_mask], minlength=topology.domain_count)  # free: (domains,)
    size = np.asarray(topology.domain_sizes, dtype=np.intp)  # size: (domains,)
    if int(free.sum()) < count:
        return None

    def lowest_free(domain: int, take: int) -> list[int]:
        return [int(g) for g in np.flatnonzero(free_mask & (ids == domain))[:take]]

    single = _best_fit(free, size, count)
    if single != NO_DOMAIN:
        return GpuChoice(single, tuple(lowest_free(single, count)))
    by_free = np.lexsort((np.arange(free.size), -free))  # by_free: (domains,)
    taken_total = np.cumsum(free[by_free])  # taken_total: (domains,)
    # The fewest domains that hold `count` GPUs are the `whole + 1` most-free ones: the `whole`
    # most-free domains are taken entirely and the remainder goes to one more domain.
    whole = int(np.count_nonzero(taken_total < count))
    taken = by_free[:whole]  # taken: (whole,)
    remainder = count - int(free[taken].sum())
    rest_free = free.copy()  # rest_free: (domains,)
    rest_free[taken] = -1
    last = _best_fit(rest_free, size, remainder)
    gpus: list[int] = []
    for domain in taken:
        gpus.extend(lowest_free(int(domain), int(free[domain])))
    gpus.extend(lowest_free(last, remainder))
    return GpuChoice(NO_DOMAIN, tuple(sorted(gpus)))
