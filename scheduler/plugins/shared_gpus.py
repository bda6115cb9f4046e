"""The daemon's shared GPUs for the GPU-fragmentation score: DRA devices that allow multiple
allocations (`scheduler.dra.shared_room`), read from the cluster cache's DRA store.

    DraSharedGpus.room(snapshot)        (rows,) thousandths free on each node's shared GPUs, or
                                        None when no node has any (the score then sees whole
                                        GPUs only, as before)
    DraSharedGpus.share(pod, ...)       the thousandths the pod's claims take as shares, from
                                        the allocation DynamicResources found for it on the
                                        first node it fits (shared GPUs of one model take the
                                        same share on every node)

The index of shared GPUs is rebuilt when a slice changes; the room when what claims hold, the
slices or the cache's rows change.
"""

from __future__ import annotations

import numpy as np

from scheduler.dra.consumable import DeviceUse
from scheduler.dra.shared_room import SharedRoom
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.plugins.dynamic_resources import NAME as DYNAMIC_RESOURCES
from scheduler.plugins.dynamic_resources import PodClaimState
from scheduler.plugins.gpu_fragmentation import IntArray
from scheduler.state.dra import DraStore


class DraSharedGpus:
    """`gpu_fragmentation.SharedGpus` over the DRA store (see the module docstring)."""

    def __init__(self) -> None:
        self._index: tuple[DraStore, int, SharedRoom] | None = None
        self._room: tuple[SharedRoom, DeviceUse, int, int, IntArray] | None = None
        """The index, use, cache generation and rows the last room was computed for, and it."""

    def index(self, store: DraStore) -> SharedRoom:
        """The shared GPUs of the store's slices, kept while no slice changes."""
        kept = self._index
        if kept is not None and kept[0] is store and kept[1] == store.slices_version:
            return kept[2]
        found = SharedRoom(store.slices.values())
        self._index = (store, store.slices_version, found)
        return found

    def room(self, snapshot: Snapshot) -> IntArray | None:
        cache = snapshot.cache
        index = self.index(cache.dra)
        if not index.gpus:
            return None
        use = cache.dra.device_use()
        kept = self._room
        if (
            kept is not None
            and kept[0] is index
            and kept[1] is use
            and kept[2:4] == (cache.generation, snapshot.rows)
        ):
            return kept[4]
        found = np.zeros(snapshot.rows, dtype=np.int64)  # found: (rows,)
        for node, milli in index.room(use).items():
            row = cache.row_of.get(node)
            if row is not None and row < snapshot.rows:
                found[row] = milli
        self._room = (index, use, cache.generation, snapshot.rows, found)
        return found

    def share(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> int:
        claim_state = state.data.get(DYNAMIC_RESOURCES)
        if not isinstance(claim_state, PodClaimState) or not claim_state.allocations:
            return 0
        index = self.index(snapshot.cache.dra)
        first = min(claim_state.allocations)
        return index.taken(r for a in claim_state.allocations[first] for r in a.results)
