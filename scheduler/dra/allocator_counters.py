"""Shared counters of partitionable devices (DRAPartitionableDevices, beta and on in Kubernetes
1.37): a device that `consumesCounters` takes that much from its pool's `sharedCounters`, and
may be allocated only while no counter of the pool would go below zero, as
`checkAvailableCounters` and `deallocateCountersForDevice` (k8s.io/dynamic-resource-
allocation@v0.37.2 structured/internal/incubating/allocator_incubating.go) have it.

What is available in a pool is its counter sets less what its allocated devices (taken whole
or shared, `IsDeviceAllocated`; devices of the pool the node does not see included) consume,
computed once per pool; what the search is taking is tracked here and given back when it backtracks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal

from scheduler.dra.allocator_requests import Candidate
from scheduler.model.pools import Pool, PoolID

Counters = dict[str, dict[str, Decimal]]
"""Counter set name -> counter name -> value."""


class CounterLedger:
    """Counters available and being consumed, per pool, for one allocation attempt."""

    def __init__(self, allocated: Callable[[tuple[str, str, str]], bool]) -> None:
        """`allocated`: whether a device is allocated to a claim, whole or shared."""
        self._allocated = allocated
        self._available: dict[PoolID, Counters] = {}
        self._taking: dict[PoolID, Counters] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(Decimal))
        )

    def reserve(self, candidate: Candidate) -> bool:
        """Take the candidate's counters; False (nothing taken) when some counter of its pool
        would be exceeded."""
        pool = candidate.pool
        available = self._available.get(pool.id)
        if available is None:
            available = self._available[pool.id] = self._initial(pool)
        taking = self._taking[pool.id]
        self._add(candidate, 1)
        for set_name, counters in available.items():
            for name, value in counters.items():
                if value < taking[set_name][name]:
                    self._add(candidate, -1)
                    return False
        return True

    def remaining(self, pool: Pool, set_name: str) -> dict[str, Decimal]:
        """What is left now of a counter set of `pool` (allocated and being taken deducted)."""
        available = self._available.get(pool.id)
        if available is None:
            available = self._available[pool.id] = self._initial(pool)
        taking = self._taking[pool.id][set_name]
        return {
            name: value - taking.get(name, Decimal(0))
            for name, value in available.get(set_name, {}).items()
        }

    def release(self, candidate: Candidate) -> None:
        """Give back what `reserve` took for the candidate."""
        self._add(candidate, -1)

    def _add(self, candidate: Candidate, sign: int) -> None:
        taking = self._taking[candidate.pool.id]
        for consumption in candidate.entry.device.consumes_counters:
            for name, value in consumption.counters.items():
                taking[consumption.name][name] += sign * value

    def _initial(self, pool: Pool) -> Counters:
        available = {
            name: dict(counter_set.counters) for name, counter_set in pool.counter_sets.items()
        }
        for entry in (*pool.devices, *pool.devices_elsewhere):
            if not self._allocated((pool.id.driver, pool.id.pool, entry.device.name)):
                continue
            for consumption in entry.device.consumes_counters:
                counters = available.get(consumption.name, {})
                for name, value in consumption.counters.items():
                    if name in counters:
                        counters[name] -= value
        return available
