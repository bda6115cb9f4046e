"""Victims weighed with their gangs, the pure half: plain data in, a decision out.

No asyncio, no cache, no Kubernetes client. The PostFilters gather the facts (the pods that may
make room, their gangs, a `fits` callback that re-plans on a what-if of the cache) and these
functions decide.

A victim that belongs to a gang is weighed with its gang (`victim_units`):

    gang with disruptionMode all, or whose loss of one member takes it below minCount
        -> one `Unit` holding every counted member of the gang; it exists only when every
           member is eligible for the step (idle for reclaim, lower priority for preemption),
           its priority is its highest member's and its GPUs are all its members' GPUs
    gang with room to spare (more counted members than minCount, disruptionMode single)
        -> one unit per eligible member; a choice that takes more members than the spare room
           takes the whole gang instead, or is refused (`choose_units`)
    a pod without a gang -> a unit of its own

`choose_units` is kube-scheduler's victim choice over those units, for one preemptor that may be
a whole gang spanning nodes: remove every unit; the preemptor must fit (`fits`: for a gang, all of
at least minCount members placed with `scheduler.gangs.planning.plan_gang`), else no plan; then give
units back, most important first (priority descending, then most GPUs, then most pods, then
key), each one whose pods the preemptor does not need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

GANG_UNIT_PREFIX = "gang:"
"""Key prefix of a unit that is a whole gang (`gang:<namespace>/<PodGroup>`)."""


@dataclass(frozen=True)
class VictimPod:
    """A pod that may make room, as one step sees it."""

    key: str
    """namespace/name."""
    priority: int
    gpus: int
    gang: str = ""
    """Its gang's key ("namespace/name" of the PodGroup), "" when it has none."""
    budgets: tuple[str, ...] = ()
    """Keys of the PodDisruptionBudgets guarding it."""


@dataclass(frozen=True)
class VictimGang:
    """A gang some victim belongs to: its minCount, whether it is disrupted only as a whole
    (disruptionMode all) and the keys of its members counted on nodes (bound or running)."""

    key: str
    min_count: int
    disrupt_all: bool
    members: tuple[str, ...]

    @property
    def spare(self) -> int:
        """How many members it may lose and still hold minCount (0 when disrupted whole)."""
        if self.disrupt_all:
            return 0
        return max(len(self.members) - self.min_count, 0)


@dataclass(frozen=True)
class Unit:
    """What is evicted together: one pod, or every counted member of a gang."""

    key: str
    pods: tuple[str, ...]
    priority: int
    """The highest priority among its pods."""
    gpus: int
    """All its pods' GPUs."""
    budgets: tuple[str, ...] = ()
    """Every member's budgets, repeated per member (each eviction uses up one disruption)."""
    gang: str = ""

    @property
    def whole_gang(self) -> bool:
        return self.key.startswith(GANG_UNIT_PREFIX)


def _unit(key: str, pods: Sequence[VictimPod], gang: str = "") -> Unit:
    budgets = tuple(b for p in pods for b in p.budgets)  # one disruption per pod per budget
    return Unit(
        key,
        tuple(p.key for p in pods),
        max(p.priority for p in pods),
        sum(p.gpus for p in pods),
        budgets,
        gang,
    )


def whole_unit(gang: VictimGang, eligible: Mapping[str, VictimPod]) -> Unit | None:
    """The unit of every counted member of `gang`, or None when one of them is not in
    `eligible` (then the gang is not a victim of this step)."""
    if not gang.members or any(key not in eligible for key in gang.members):
        return None
    return _unit(GANG_UNIT_PREFIX + gang.key, [eligible[k] for k in gang.members], gang.key)


def victim_units(
    eligible: Iterable[VictimPod], gangs: Mapping[str, VictimGang]
) -> tuple[list[Unit], list[str]]:
    """The units the eligible pods form (see the module docstring), in a stable order, and why
    gangs were left out (one line per gang that had an eligible member but is not a unit)."""
    by_key = {pod.key: pod for pod in eligible}
    units: list[Unit] = []
    excluded: list[str] = []
    seen: set[str] = set()
    for key in sorted(by_key):
        pod = by_key[key]
        gang = gangs.get(pod.gang) if pod.gang else None
        if gang is None or key not in gang.members:
            units.append(_unit(key, [pod]))
            continue
        if gang.spare > 0:
            units.append(_unit(key, [pod], gang.key))
            continue
        if gang.key in seen:
            continue
        seen.add(gang.key)
        unit = whole_unit(gang, by_key)
        if unit is None:
            blocked = sorted(k for k in gang.members if k not in by_key)
            excluded.append(
                f"gang {gang.key} is evicted only as a whole and {len(blocked)} of its "
                f"{len(gang.members)} members are not eligible (e.g. {blocked[0]})"
            )
            continue
        units.append(unit)
    return units, excluded


def _importance(unit: Unit) -> tuple[int, int, int, str]:
    """Reprieve order, most important first: priority desc, GPUs desc, pods desc, key."""
    return (-unit.priority, -unit.gpus, -len(unit.pods), unit.key)


def _pods(units: Iterable[Unit]) -> frozenset[str]:
    return frozenset(key for unit in units for key in unit.pods)


def broken_gangs(chosen: Iterable[Unit], gangs: Mapping[str, VictimGang]) -> list[str]:
    """Gangs of which `chosen` takes more single members than they can spare."""
    taken: dict[str, int] = {}
    for unit in chosen:
        if unit.gang and not unit.whole_gang:
            taken[unit.gang] = taken.get(unit.gang, 0) + len(unit.pods)
    return sorted(g for g, n in taken.items() if g in gangs and n > gangs[g].spare)


def choose_units(
    units: Sequence[Unit],
    fits: Callable[[frozenset[str]], bool],
    gangs: Mapping[str, VictimGang] | None = None,
    eligible: Mapping[str, VictimPod] | None = None,
) -> tuple[Unit, ...] | None:
    """The units to evict so that the preemptor fits (see the module docstring), least
    important first, or None when even all of them are not enough. An empty tuple means it
    fits without evicting anyone.

    `fits(removed)` says whether the preemptor fits once the pods with those keys are gone.
    With `gangs` (and `eligible`, the step's eligible pods by key), a choice that takes more
    members of a gang than it can spare takes the whole gang instead when every member is
    eligible and the preemptor still fits, and is refused (None) otherwise."""
    everything = _pods(units)
    if not fits(everything):
        return None
    removed = set(everything)
    kept: list[Unit] = []
    for unit in sorted(units, key=_importance):
        without = frozenset(removed - set(unit.pods))
        if fits(without):
            removed = set(without)
            continue
        kept.append(unit)
    chosen = sorted(kept, key=_importance, reverse=True)
    if gangs:
        for gang_key in broken_gangs(chosen, gangs):
            whole = whole_unit(gangs[gang_key], eligible or {})
            if whole is None:
                return None
            chosen = [u for u in chosen if u.gang != gang_key] + [whole]
        if not fits(_pods(chosen)):
            return None
    return tuple(chosen)
