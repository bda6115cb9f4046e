"""The exporter's state: the current fleet view and its energy counters.

Contract: one :class:`Exporter` is driven from a single event loop (no locking). ``update``
replaces the cluster view, ``tick`` advances energy, ``metrics`` renders. Energy is advanced
under the old view up to the update time before the new view takes over, so each interval is
integrated with the holders that were current during it (to the refresh granularity).
"""

from __future__ import annotations

from collections.abc import Iterable

from hack.fake_dcgm.holders import Json, assign
from hack.fake_dcgm.model import EnergyMeter, Fleet, build_fleet
from hack.fake_dcgm.render import RenderOptions, render
from hack.fake_dcgm.trace import Trace


class Exporter:
    """Fleet view + energy meter + rendering, with time always passed in by the caller."""

    def __init__(
        self,
        trace: Trace | None = None,
        profiling: bool = False,
        render_options: RenderOptions | None = None,
    ) -> None:
        self._trace = trace
        self._profiling = profiling
        self._render_options = render_options or RenderOptions()
        self._fleet = Fleet((), ())
        self._meter = EnergyMeter()
        self._reported: frozenset[str] = frozenset()
        self.updates = 0  # successful updates so far

    @property
    def fleet(self) -> Fleet:
        return self._fleet

    def update(
        self,
        nodes: Iterable[Json],
        pods: Iterable[Json],
        now: float,
        claims: Iterable[Json] = (),
        slices: Iterable[Json] = (),
    ) -> list[str]:
        """Adopt a new view of fake GPU nodes, pods, ResourceClaims and ResourceSlices at
        ``now``.

        Returns the problems (bad annotations, pods that do not fit, claims or devices not found)
        not already returned by the previous update, so the caller logs each once while it
        persists.
        """
        self._meter.advance(self._fleet.gpus, now)
        assignment = assign(nodes, pods, claims, slices)
        self._fleet = build_fleet(assignment, self._trace, self._profiling)
        self._meter.advance(self._fleet.gpus, now)
        self.updates += 1
        new = [p for p in self._fleet.problems if p not in self._reported]
        self._reported = frozenset(self._fleet.problems)
        return new

    def tick(self, now: float) -> None:
        """Advance every GPU's energy counter to ``now``."""
        self._meter.advance(self._fleet.gpus, now)

    def metrics(self, now: float) -> str:
        """The /metrics body at ``now`` (energy advanced to ``now`` first)."""
        self.tick(now)
        return render(self._fleet.gpus, self._meter.total_mj, now, self._render_options)
