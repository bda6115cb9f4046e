"""NodePorts: a node fails when a host port the pod asks for is already bound there.

kube-scheduler's rule (HostPortInfo.CheckConflict): a wanted (hostIP, protocol, port) conflicts
with a used one of the same protocol and port when the IPs overlap: equal, or either of them
0.0.0.0 (an empty hostIP). Every pod counted on the node holds its ports, whichever scheduler
placed it (the cache counts all bound pods, and assumed and reserved ones). Evicting the holder
frees the port, so the rejection is resolvable.

Cost: a pod without host ports returns at once. Host ports are rare, so the ports in use are
gathered only for the nodes that have any, from the cache's pods, and kept until the cache
changes (`ClusterCache.generation`); a check then costs one set lookup per (node with ports,
wanted port).
"""

from __future__ import annotations

import numpy as np

from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.podfields import BIND_ALL, HostPort
from scheduler.state.cache import ClusterCache

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


class UsedPorts:
    """Per node row with any host port in use: the (ip, protocol, port) triples and the
    (protocol, port) pairs bound there. Rebuilt when the cache's generation changes."""

    def __init__(self) -> None:
        self._cache: ClusterCache | None = None
        self._generation = -1
        self.by_row: dict[int, tuple[set[HostPort], set[tuple[str, int]]]] = {}

    def of(self, cache: ClusterCache) -> dict[int, tuple[set[HostPort], set[tuple[str, int]]]]:
        if cache is self._cache and cache.generation == self._generation:
            return self.by_row
        by_row: dict[int, tuple[set[HostPort], set[tuple[str, int]]]] = {}
        for state in cache.pods.values():
            if not state.info.host_ports:
                continue
            row = cache.row_of.get(state.node)
            if row is None:
                continue
            triples, pairs = by_row.setdefault(row, (set(), set()))
            for port in state.info.host_ports:
                triples.add(port)
                pairs.add((port.protocol, port.port))
        self._cache, self._generation, self.by_row = cache, cache.generation, by_row
        return by_row


def conflicts(wanted: HostPort, used: set[HostPort], pairs: set[tuple[str, int]]) -> bool:
    """Whether `wanted` overlaps a port in `used` (`pairs`: the (protocol, port) of `used`)."""
    if wanted.ip == BIND_ALL:
        return (wanted.protocol, wanted.port) in pairs
    return HostPort(BIND_ALL, wanted.protocol, wanted.port) in used or wanted in used


class NodePorts:
    name = NAME

    def __init__(self) -> None:
        self._used = UsedPorts()

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if not pod.host_ports:
            return []
        failed = np.zeros(snapshot.rows, dtype=bool)  # failed: (rows,)
        for row, (used, pairs) in self._used.of(snapshot.cache).items():
            if row < snapshot.rows and any(conflicts(p, used, pairs) for p in pod.host_ports):
                failed[row] = True
        return [Rejection(REASON, failed, True, NAME)] if failed.any() else []
