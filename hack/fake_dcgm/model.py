"""Physical GPUs with their resolved usage: point readings, exact energy and window means.

Contract:

* :func:`build_fleet` turns an :class:`~hack.fake_dcgm.holders.Assignment` into
  :class:`PhysicalGpu` objects, parsing every holder's usage annotations. A bad annotation is
  reported in ``Fleet.problems`` and that holder counts as an idle holder (0 %, fb-used 0).
* ``PhysicalGpu.reading(now)`` is what NVML would report at wall time ``now``:

  - nobody holds it: util 0, ``no_process_w``, fb 0;
  - whole GPU held by one or more pods (time-sliced): util is the max of their shapes, power the
    max of their powers (a trace's own power, else the product's power model), fb the sum;
  - MIG GPU with any instance held: util is the slice-weighted sum of the instances' utils
    (an instance of profile ``<g>g.*`` weighs g/7), capped at 100, power from the power model.

* ``energy_j(t0, t1)`` is the exact integral of ``reading(t).power_w`` over [t0, t1]: every shape
  is piecewise constant and reports its breakpoints, so the integral is a sum over pieces.
* :class:`EnergyMeter` keeps each GPU's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since the
  exporter started) and advances it to a given time; it never decreases.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from hack.fake_dcgm.faults import GpuFaults
from hack.fake_dcgm.holders import Assignment, Holder, MigInstance
from hack.fake_dcgm.power import PowerModel, model_for
from hack.fake_dcgm.trace import Trace
from hack.fake_dcgm.usage import IDLE, Sample, Shape, UsageError, parse_fb_used, parse_usage

MIG_SLICES = 7
_PROFILE_SLICES = re.compile(r"(\d+)g\.")

GpuKey = tuple[str, int]
"""(node name, physical GPU index)."""


@dataclass(frozen=True)
class Load:
    """A holder's usage shape anchored at the pod's start time."""

    shape: Shape
    start_time: float
    fb_used_mib: float | None = None  # from the annotation; overrides the shape's own

    def sample(self, now: float) -> Sample:
        return self.shape.sample(now - self.start_time)

    def fb(self, now: float) -> float:
        if self.fb_used_mib is not None:
            return self.fb_used_mib
        return self.sample(now).fb_used_mib or 0.0

    def breakpoints(self, t0: float, t1: float) -> list[float]:
        s = self.start_time
        return [s + e for e in self.shape.breakpoints(t0 - s, t1 - s)]


@dataclass(frozen=True)
class Reading:
    """Point values of one physical GPU."""

    util_pct: float
    power_w: float
    fb_used_mib: float


@dataclass(frozen=True)
class MigSlot:
    """A MIG instance and the load of its holder (None: free)."""

    instance: MigInstance
    load: Load | None

    @property
    def weight(self) -> float:
        """Fraction of the GPU's compute this instance owns (g / 7 for profile ``<g>g.*``)."""
        match = _PROFILE_SLICES.match(self.instance.profile)
        slices = int(match.group(1)) if match else 1
        return min(slices, MIG_SLICES) / MIG_SLICES


def _integral(
    value: Callable[[float], float], t0: float, t1: float, points: Iterable[float]
) -> float:
    """Integral over [t0, t1] of a function constant between consecutive ``points``."""
    edges = [t0, *sorted({p for p in points if t0 < p < t1}), t1]
    return sum((b - a) * value((a + b) / 2) for a, b in pairwise(edges))


def mean_util(load: Load, t0: float, t1: float) -> float:
    """Exact time-mean of a load's utilization over [t0, t1] (the point value if t1 <= t0)."""
    if t1 <= t0:
        return load.sample(t1).util_pct
    util = _integral(lambda t: load.sample(t).util_pct, t0, t1, load.breakpoints(t0, t1))
    return util / (t1 - t0)


@dataclass(frozen=True)
class PhysicalGpu:
    """One physical GPU of a node: whole (``holders``/``loads``) or MIG host (``mig``)."""

    node: str
    index: int
    product: str | None
    power: PowerModel
    profiling: bool
    holders: tuple[Holder, ...] = ()
    loads: tuple[Load, ...] = ()  # parallel to holders
    mig: tuple[MigSlot, ...] = ()
    per_process: bool = False
    """Utilization of a GPU several pods hold is attributed to each pod by its own load."""
    faults: GpuFaults = field(default_factory=GpuFaults)

    @property
    def key(self) -> GpuKey:
        return (self.node, self.index)

    def _mig_loads(self) -> list[tuple[float, Load]]:
        return [(slot.weight, slot.load) for slot in self.mig if slot.load is not None]

    def reading(self, now: float) -> Reading:
        """Point values at wall time ``now`` (rules in the module docstring)."""
        if self.loads:
            samples = [load.sample(now) for load in self.loads]
            util = max(s.util_pct for s in samples)
            power = max(
                s.power_w if s.power_w is not None else self.power.power_w(s.util_pct)
                for s in samples
            )
            return Reading(util, power, sum(load.fb(now) for load in self.loads))
        mig = self._mig_loads()
        if mig:
            util = min(100.0, sum(w * load.sample(now).util_pct for w, load in mig))
            fb = sum(load.fb(now) for _, load in mig)
            return Reading(util, self.power.power_w(util), fb)
        return Reading(0.0, self.power.no_process_w, 0.0)

    def breakpoints(self, t0: float, t1: float) -> list[float]:
        """Instants in (t0, t1) where the reading may change."""
        loads = [*self.loads, *(load for _, load in self._mig_loads())]
        return [p for load in loads for p in load.breakpoints(t0, t1)]

    def energy_j(self, t0: float, t1: float) -> float:
        """Exact energy drawn over [t0, t1] in joules (0 if t1 <= t0)."""
        if t1 <= t0:
            return 0.0
        return _integral(lambda t: self.reading(t).power_w, t0, t1, self.breakpoints(t0, t1))

    def mean_util(self, t0: float, t1: float) -> float:
        """Exact time-mean of the GPU's utilization over [t0, t1]."""
        if t1 <= t0:
            return self.reading(t1).util_pct
        util = _integral(lambda t: self.reading(t).util_pct, t0, t1, self.breakpoints(t0, t1))
        return util / (t1 - t0)


@dataclass(frozen=True)
class Fleet:
    """All physical GPUs, plus annotation problems found while building them."""

    gpus: tuple[PhysicalGpu, ...]
    problems: tuple[str, ...]


def _load(holder: Holder, trace: Trace | None, problems: list[str]) -> Load:
    where = f"pod {holder.namespace}/{holder.pod}"
    try:
        shape = parse_usage(holder.usage, trace)
    except UsageError as exc:
        problems.append(f"{where}: {exc}; treating it as util 0")
        shape = IDLE
    try:
        fb = parse_fb_used(holder.fb_used)
    except UsageError as exc:
        problems.append(f"{where}: {exc}; treating it as 0 MiB")
        fb = 0.0
    return Load(shape, holder.start_time, fb)


def build_fleet(assignment: Assignment, trace: Trace | None, profiling: bool) -> Fleet:
    """Resolve every holder's shape; ``profiling`` enables GR engine activity on all nodes."""
    problems = list(assignment.problems)
    gpus: list[PhysicalGpu] = []
    for node in assignment.nodes:
        power = model_for(node.product)
        on = profiling or node.profiling
        for gpu in node.gpus:
            loads = tuple(_load(h, trace, problems) for h in gpu.holders)
            faults = node.faults.get(gpu.index, GpuFaults())
            gpus.append(
                PhysicalGpu(
                    node.name,
                    gpu.index,
                    node.product,
                    power,
                    on,
                    gpu.holders,
                    loads,
                    per_process=node.per_process,
                    faults=faults,
                )
            )
        if node.mig_gpu_index is not None:
            slots = tuple(
                MigSlot(inst, _load(inst.holder, trace, problems) if inst.holder else None)
                for inst in node.mig
            )
            gpus.append(
                PhysicalGpu(node.name, node.mig_gpu_index, node.product, power, on, mig=slots)
            )
    return Fleet(tuple(gpus), tuple(problems))


@dataclass
class EnergyMeter:
    """Per-GPU energy counters (mJ), advanced by exact integration between calls."""

    _mj: dict[GpuKey, float] = field(default_factory=dict)
    _last: dict[GpuKey, float] = field(default_factory=dict)

    def advance(self, gpus: Iterable[PhysicalGpu], now: float) -> None:
        """Add each GPU's energy since its previous advance (new GPUs start counting at now).

        A GPU absent from ``gpus`` keeps its total but stops counting; when it returns it
        resumes from that total without crediting the gap. Time going backwards adds nothing.
        """
        last: dict[GpuKey, float] = {}
        for gpu in gpus:
            key = gpu.key
            previous = self._last.get(key)
            self._mj.setdefault(key, 0.0)
            if previous is not None and now > previous:
                self._mj[key] += gpu.energy_j(previous, now) * 1000.0
            last[key] = now if previous is None else max(previous, now)
        self._last = last

    def total_mj(self, key: GpuKey) -> float:
        """Energy counted so far for ``key`` (0 if never seen)."""
        return self._mj.get(key, 0.0)
