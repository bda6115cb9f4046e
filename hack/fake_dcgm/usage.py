"""Usage shapes: what one pod does to its GPU over time, parsed from a pod annotation.

Contract:

* :func:`parse_usage` turns the text of ``fake-dcgm.gpu-scheduler.io/usage`` into a
  :class:`Shape`; ``None`` (no annotation) gives ``Constant(0)``, an idle holder. Any bad text
  raises :class:`UsageError` (and nothing else) whose message names the annotation and the bad
  part. Callers log it and fall back to ``Constant(0)``.
* A shape is a pure function of *elapsed* seconds since the pod started. ``sample`` is the
  point value at that instant (as NVML reports it: no averaging, so periodic work aliases).
  ``breakpoints`` lists the instants in an open interval where the value may change; between two
  consecutive breakpoints a shape is constant, which lets energy be integrated exactly.

Grammar: ``<kind>:<key>=<number>[,<key>=<number>...]`` with kinds

* ``constant:util=U`` (0 <= U <= 100);
* ``periodic:period=P,duty=D,level=L[,phase=F]`` (0.01 <= P <= 86400, 0 <= D <= 1,
  0 <= L <= 100, -86400 <= F <= 86400, default 0;
  F is kept modulo P): ``L`` % while ``(elapsed - F) mod P < D * P``, else 0;
* ``trace:phase=NAME``: replay of the named phase of the ``--trace`` CSV, one row a second from
  the pod's start, looping; power and framebuffer are the trace's too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from hack.fake_dcgm.trace import Trace, TraceRow

USAGE_ANNOTATION = "fake-dcgm.gpu-scheduler.io/usage"
FB_USED_ANNOTATION = "fake-dcgm.gpu-scheduler.io/fb-used-mib"

MIN_PERIOD_S = 0.01
MAX_PERIOD_S = 86400.0
MAX_PHASE_S = 86400.0
MAX_FB_MIB = 16 * 1024 * 1024


class UsageError(ValueError):
    """An annotation's text does not follow the documented grammar or ranges."""


@dataclass(frozen=True)
class Sample:
    """A shape's value at one instant.

    ``power_w`` and ``fb_used_mib`` are set only by shapes that carry their own (a trace);
    otherwise the power model and the fb-used annotation supply them.
    """

    util_pct: float
    power_w: float | None = None
    fb_used_mib: float | None = None


class Shape(Protocol):
    """Usage as a function of elapsed seconds since the pod started."""

    def sample(self, elapsed: float) -> Sample:
        """Point value at ``elapsed``."""
        ...

    def breakpoints(self, start: float, end: float) -> list[float]:
        """Sorted instants in the open interval (start, end) where the value may change."""
        ...


@dataclass(frozen=True)
class Constant:
    """The same utilization at all times."""

    util_pct: float

    def sample(self, elapsed: float) -> Sample:
        return Sample(self.util_pct)

    def breakpoints(self, start: float, end: float) -> list[float]:
        return []


@dataclass(frozen=True)
class Periodic:
    """``level`` % for ``duty * period`` seconds of every period, starting ``phase`` s in."""

    period: float
    duty: float
    level: float
    phase: float = 0.0

    @property
    def busy_s(self) -> float:
        """Busy seconds per period (rounded to 1 ns, so 0.1 x 3 is 0.3, not 0.30000000000000004)."""
        return round(self.duty * self.period, 9)

    def sample(self, elapsed: float) -> Sample:
        into = round((elapsed - self.phase) % self.period, 9)  # 3.3 % 3 is 0.2999999999999998
        return Sample(self.level if into < self.busy_s else 0.0)

    def breakpoints(self, start: float, end: float) -> list[float]:
        if not end > start:
            return []
        edges = (0.0, self.busy_s)
        first = math.floor((start - self.phase) / self.period)
        count = math.ceil((end - start) / self.period) + 2
        points = {
            t
            for k in range(first, first + count)
            for t in (self.phase + k * self.period + e for e in edges)
            if start < t < end
        }
        return sorted(points)


@dataclass(frozen=True)
class TraceReplay:
    """Replays ``rows`` (one a second) from elapsed 0, looping; before the start, row 0."""

    phase: str
    rows: tuple[TraceRow, ...]

    def _row(self, elapsed: float) -> TraceRow:
        return self.rows[math.floor(max(elapsed, 0.0)) % len(self.rows)]

    def sample(self, elapsed: float) -> Sample:
        row = self._row(elapsed)
        return Sample(row.gpu_util_pct, row.power_w, row.fb_used_mib)

    def breakpoints(self, start: float, end: float) -> list[float]:
        lo = max(math.floor(start) + 1, 1)
        return [float(s) for s in range(lo, math.ceil(end)) if start < s < end]


IDLE = Constant(0.0)

_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # kind -> (required keys, optional keys)
    "constant": (frozenset({"util"}), frozenset()),
    "periodic": (frozenset({"period", "duty", "level"}), frozenset({"phase"})),
    "trace": (frozenset({"phase"}), frozenset()),
}


def _fail(text: str, detail: str) -> UsageError:
    return UsageError(f"annotation {USAGE_ANNOTATION}={text!r}: {detail}")


def _number(text: str, key: str, value: str, lo: float, hi: float) -> float:
    try:
        number = float(value)
    except ValueError:
        raise _fail(text, f"{key}={value!r} is not a number") from None
    if not math.isfinite(number) or not lo <= number <= hi:
        raise _fail(text, f"{key}={value!r} is outside [{lo:g}, {hi:g}]")
    return number


def _fields(text: str) -> tuple[str, dict[str, str]]:
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    if not sep:
        raise _fail(text, "expected '<kind>:<key>=<value>,...' (missing ':')")
    if kind not in _KEYS:
        raise _fail(text, f"unknown kind {kind!r} (expected one of {', '.join(sorted(_KEYS))})")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise _fail(text, f"bad field {part.strip()!r} (expected key=value)")
        if key in fields:
            raise _fail(text, f"field {key!r} given twice")
        fields[key] = value
    required, optional = _KEYS[kind]
    unknown = sorted(set(fields) - required - optional)
    if unknown:
        raise _fail(text, f"unknown field(s) {', '.join(unknown)} for kind {kind!r}")
    missing = sorted(required - set(fields))
    if missing:
        raise _fail(text, f"missing field(s) {', '.join(missing)} for kind {kind!r}")
    return kind, fields


def parse_usage(text: str | None, trace: Trace | None = None) -> Shape:
    """Parse a usage annotation (see the module docstring); ``trace`` backs ``trace:`` shapes."""
    if text is None:
        return IDLE
    kind, fields = _fields(text)
    if kind == "constant":
        return Constant(_number(text, "util", fields["util"], 0.0, 100.0))
    if kind == "periodic":
        period = _number(text, "period", fields["period"], MIN_PERIOD_S, MAX_PERIOD_S)
        phase = _number(text, "phase", fields.get("phase", "0"), -MAX_PHASE_S, MAX_PHASE_S)
        return Periodic(
            period=period,
            duty=_number(text, "duty", fields["duty"], 0.0, 1.0),
            level=_number(text, "level", fields["level"], 0.0, 100.0),
            phase=phase % period,
        )
    name = fields["phase"]
    if trace is None:
        raise _fail(text, "trace shapes need the exporter to run with --trace PATH")
    rows = trace.get(name)
    if not rows:
        known = ", ".join(sorted(trace)) or "none"
        raise _fail(text, f"phase {name!r} is not in the trace (phases: {known})")
    return TraceReplay(name, rows)


def parse_fb_used(text: str | None) -> float | None:
    """Parse ``fake-dcgm.gpu-scheduler.io/fb-used-mib``; ``None`` when absent.

    Raises :class:`UsageError` naming the annotation when the text is not a number in
    [0, 16 TiB expressed in MiB].
    """
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"annotation {FB_USED_ANNOTATION}={text!r}: not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= MAX_FB_MIB:
        raise UsageError(f"annotation {FB_USED_ANNOTATION}={text!r}: outside [0, {MAX_FB_MIB}] MiB")
    return value
