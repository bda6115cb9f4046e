"""Fragmentation-aware order of partitions of a device (MIG placements published as
partitionable devices, DRAPartitionableDevices).

A *slotted counter set* is a shared counter set of a pool with counters of value 1 (the memory
slices of a GPU: `memory-slice-0` .. `memory-slice-7`); its slots are those counters, numbered
in their natural name order. A *partition* is a device consuming from exactly one counter set at
least one of its slots: its placement is the slots it consumes (a MIG profile at a start), its
size the number of slots, then, to tell profiles of equal slots apart (a 4g and a 3g both take 4
memory slices of an H200), the sum of the shares it consumes of the set's other counters
(multiprocessors, memory). The whole GPU, consuming every slot, is a partition too.

The order (gpu-scheduler's choice among solutions, not upstream's, whose order is plain): among
the partitions a request could use now whose slots are all free, try first

1. those of a set already partly used (a GPU already partitioned) before those of an untouched
   set, which stays available whole (as a full GPU or its largest profile);
2. then the one leaving the largest partition still placeable in its set (`placeable_after`);
3. then the one leaving the longest run of free slots (`longest_free_run`);
4. then the search's own order (first fit).

`fragmentation_key` is that score for one placement on one set's occupancy: pure, on plain
slot numbers. `Partitions` applies it to a node's candidates; the search puts the result as a
phase before its other phases, so feasibility is unchanged (the last phase holds every
candidate) and a pool without slotted sets keeps the order it had.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from scheduler.dra.allocator_requests import Candidate
from scheduler.model.pools import Pool, PoolID

SetKey = tuple[PoolID, str]
"""A counter set: its pool and name."""
Size = tuple[int, Decimal]
"""A placement's size: slots, then the share of the set's other counters."""
NOTHING: Size = (0, Decimal(0))


@dataclass(frozen=True)
class Placement:
    """Where a partition sits in its set and how large it is."""

    slots: frozenset[int]
    size: Size


def longest_free_run(occupied: frozenset[int], slot_count: int) -> int:
    """The most consecutive free slots among `0 .. slot_count - 1`."""
    best = run = 0
    for slot in range(slot_count):
        run = 0 if slot in occupied else run + 1
        best = max(best, run)
    return best


def placeable_after(occupied: frozenset[int], placements: Iterable[Placement]) -> Size:
    """The size of the largest placement whose slots are all free (`NOTHING` if none)."""
    return max((p.size for p in placements if not p.slots & occupied), default=NOTHING)


def fragmentation_key(
    occupied: frozenset[int],
    placements: Sequence[Placement],
    choice: Placement,
    slot_count: int,
) -> tuple[int, Decimal, int]:
    """How well taking `choice` on a set with `occupied` slots keeps it unfragmented, lower is
    better: the largest of `placements` still placeable afterwards, then the longest free run
    afterwards (both negated)."""
    after = occupied | choice.slots
    largest = placeable_after(after, placements)
    return (-largest[0], -largest[1], -longest_free_run(after, slot_count))


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class _SlottedSet:
    slots: Mapping[str, int]
    """Slot counter name -> slot number."""
    others: Mapping[str, Decimal]
    """The other counters and their totals."""


class Partitions:
    """The partitions among a node's candidates (see the module docstring)."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self._of: dict[tuple[str, str, str], tuple[SetKey, Placement]] = {}
        self._placements: dict[SetKey, list[Placement]] = {}
        self._slot_count: dict[SetKey, int] = {}
        self._sets: dict[SetKey, _SlottedSet] = {}
        self._pools: dict[SetKey, Pool] = {}
        for candidate in candidates:
            found = self._placement(candidate)
            if found is not None:
                self._of[candidate.id] = found
                self._placements.setdefault(found[0], []).append(found[1])

    def __bool__(self) -> bool:
        return bool(self._of)

    def occupied(
        self, remaining: Callable[[Pool, str], Mapping[str, Decimal]]
    ) -> dict[SetKey, frozenset[int]]:
        """The slots in use per set, given what is left of a pool's counter set."""
        found = {}
        for key in self._placements:
            left = remaining(self._pools[key], key[1])
            slots = self._sets[key].slots
            found[key] = frozenset(slot for name, slot in slots.items() if left.get(name, 0) < 1)
        return found

    def order(
        self,
        candidates: Sequence[Candidate],
        usable: Callable[[Candidate], bool],
        occupied: Mapping[SetKey, frozenset[int]],
    ) -> tuple[Candidate, ...]:
        """The partitions among `candidates` that `usable` accepts and whose slots are free in
        `occupied` (slots in use per set), best first."""
        ranked = []
        for position, candidate in enumerate(candidates):
            found = self._of.get(candidate.id)
            if found is None:
                continue
            key, placement = found
            taken = occupied.get(key, frozenset())
            if placement.slots & taken or not usable(candidate):
                continue
            score = fragmentation_key(
                taken, self._placements[key], placement, self._slot_count[key]
            )
            ranked.append(((not taken, *score, position), candidate))
        ranked.sort(key=lambda item: item[0])
        return tuple(candidate for _, candidate in ranked)

    def _placement(self, candidate: Candidate) -> tuple[SetKey, Placement] | None:
        consumptions = candidate.entry.device.consumes_counters
        if len(consumptions) != 1:
            return None
        [consumption] = consumptions
        key = (candidate.pool.id, consumption.name)
        slotted = self._slotted(candidate, key)
        if slotted is None:
            return None
        slots = frozenset(
            slotted.slots[name]
            for name, value in consumption.counters.items()
            if name in slotted.slots and value == 1
        )
        if not slots:
            return None
        share = sum(
            (
                value / slotted.others[name]
                for name, value in consumption.counters.items()
                if slotted.others.get(name, Decimal(0)) > 0
            ),
            Decimal(0),
        )
        return key, Placement(slots, (len(slots), share))

    def _slotted(self, candidate: Candidate, key: SetKey) -> _SlottedSet | None:
        known = self._sets.get(key)
        if known is not None:
            return known
        counter_set = candidate.pool.counter_sets.get(key[1])
        if counter_set is None:
            return None
        units = sorted((n for n, v in counter_set.counters.items() if v == 1), key=_natural)
        if not units:
            return None
        found = _SlottedSet(
            {name: index for index, name in enumerate(units)},
            {n: v for n, v in counter_set.counters.items() if v != 1},
        )
        self._sets[key] = found
        self._pools[key] = candidate.pool
        self._slot_count[key] = len(units)
        return found
