"""Fragmentation-aware order of partitions of a device (MIG placements published as
partitionable devices, DRAPartitionableDevices).

A *slotted counter set* is a shared counter set of a pool with counters of value 1 (the memory
slices of a GPU: `memory-slice-0` .. `memory-slice-7`); its slots are those counters, numbered
in their natural name order. A *partition* is a device consuming from exactly one counter set
at least one of its slots: its placement is the slots it consumes (a MIG profile at a start),
its size the number of slots, then, to tell profiles of equal slots apart (a 4g and a 3g both
take 4 memory slices of an H200), the sum of the shares it consumes of the set's other counters
(multiprocessors, memory). The whole GPU, consuming every slot, is a partition too.

The order (gpu-scheduler's choice among solutions, not upstream's, whose order is plain): among
the partitions a request could use now whose slots are all free, on whichever set (GPU) of the
node, try first

1. the one that costs its set least: the largest partition still placeable in the set
   (`placeable_after`) before the placement, less the largest one after (slots, then share);
2. then the one on the set whose largest placeable partition is smallest already (the most
   fragmented set first, best fit), so roomier sets stay roomy;
3. then the one leaving the longest run of free slots (`longest_free_run`);
4. then the search's own order (first fit).

An untouched set loses most (from the whole device to what is left beside the placement), so
a request goes to a set already partitioned whenever one can take it without losing more.
`loss_key` is that rank for one placement on one set's occupancy: pure, on plain slot numbers.
`Partitions` applies it to a node's candidates (the search puts the result as a phase before
its other phases, so feasibility is unchanged: the last phase holds every candidate, and a
pool without slotted sets keeps the order it had), and measures what a node's allocation costs
its sets (`Partitions.loss`, which the DynamicResources score compares nodes by).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from scheduler.dra.allocator_counters import CounterLedger
from scheduler.dra.allocator_requests import Candidate, DeviceID
from scheduler.dra.allocator_requests import candidates as pool_candidates
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


LossKey = tuple[int, Decimal, int, Decimal, int]
"""Slots and share lost, slots and share placeable before, the longest free run after (negated)."""


def loss_key(
    occupied: frozenset[int],
    placements: Sequence[Placement],
    choice: Placement,
    slot_count: int,
) -> LossKey:
    """How much taking `choice` on a set with `occupied` slots costs the set, lower is better:
    the largest of `placements` placeable before less the largest placeable after (slots, then
    share), then the largest before (the most fragmented set first), then the longest free run
    afterwards (negated)."""
    after = occupied | choice.slots
    before = placeable_after(occupied, placements)
    left = placeable_after(after, placements)
    return (
        before[0] - left[0],
        before[1] - left[1],
        before[0],
        before[1],
        -longest_free_run(after, slot_count),
    )


@dataclass(frozen=True)
class PartitionCost:
    """What an allocation of partitions costs the sets it takes them on, in sets' worth:
    `lost`, the sum over those sets of how much the largest placeable partition shrinks;
    `before`, the sum of its size before. A size counts as its slots plus half its share of
    the set's other counters (`SHARE_IN_SLOTS`), so slots decide first and shares tell equal
    slots apart, divided by the set's slot count."""

    lost: float
    before: float


SHARE_IN_SLOTS = 0.5
"""Slots a partition's whole share of its set's other counters counts as in `PartitionCost`:
below one slot, so a slot more or less always outweighs shares."""


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
        self._of: dict[DeviceID, tuple[SetKey, Placement]] = {}
        self._placements: dict[SetKey, list[Placement]] = {}
        self._slot_count: dict[SetKey, int] = {}
        self._sets: dict[SetKey, _SlottedSet] = {}
        self._pools: dict[SetKey, Pool] = {}
        for candidate in candidates:
            found = self._placement(candidate)
            if found is not None:
                self._of[candidate.id] = found
                self._placements.setdefault(found[0], []).append(found[1])

    @classmethod
    def of_pools(cls, pools: Sequence[Pool]) -> Partitions:
        """The partitions among the devices of a node's usable pools."""
        return cls(pool_candidates(pools))

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

    def occupied_by(self, allocated: Callable[[DeviceID], bool]) -> dict[SetKey, frozenset[int]]:
        """The slots in use per set, given which devices claims hold (whole or shared)."""
        return self.occupied(CounterLedger(allocated).remaining)

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
            score = loss_key(taken, self._placements[key], placement, self._slot_count[key])
            ranked.append(((*score, position), candidate))
        ranked.sort(key=lambda item: item[0])
        return tuple(candidate for _, candidate in ranked)

    def cost(
        self, devices: Iterable[DeviceID], occupied: Mapping[SetKey, frozenset[int]]
    ) -> PartitionCost | None:
        """What taking `devices` together costs the sets they are partitions of, from
        `occupied` (slots in use per set before them); None when some device is not a
        partition, or takes a whole set (a whole GPU: the NVLink score weighs those)."""
        taking: dict[SetKey, frozenset[int]] = {}
        for device in devices:
            found = self._of.get(device)
            if found is None:
                return None
            key, placement = found
            if len(placement.slots) >= self._slot_count[key]:
                return None
            taking[key] = taking.get(key, frozenset()) | placement.slots
        if not taking:
            return None
        lost = before = 0.0
        for key, slots in taking.items():
            taken = occupied.get(key, frozenset())
            largest = self._magnitude(key, placeable_after(taken, self._placements[key]))
            left = self._magnitude(key, placeable_after(taken | slots, self._placements[key]))
            lost += (largest - left) / self._slot_count[key]
            before += largest / self._slot_count[key]
        return PartitionCost(lost, before)

    def _magnitude(self, key: SetKey, size: Size) -> float:
        """`size` in slots, its share counting `SHARE_IN_SLOTS` per whole set's share."""
        others = sum(1 for total in self._sets[key].others.values() if total > 0)
        share = float(size[1]) / others if others else 0.0
        return size[0] + SHARE_IN_SLOTS * share

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
