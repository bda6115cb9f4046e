"""How a measured cost grows with size: a least-squares line and the local growth exponent.

The benchmarks measure a cost (microseconds per pod, bytes) at a few sizes (nodes, pods in the
cache, gang members). `fit_line` gives `cost ~= intercept + slope * size` and how far the worst
measured point sits from that line (relative), which says whether "linear" describes the points;
`exponent` gives the slope of log(cost) against log(size) between two points (1 = linear, 0 = flat,
2 = quadratic), which says how the cost grows where the line does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """`cost ~= intercept + slope * size`, fitted by least squares."""

    intercept: float
    slope: float
    worst_residual: float
    """Largest |measured - fitted| / measured over the points (0.1 = 10 %)."""

    def at(self, size: float) -> float:
        return self.intercept + self.slope * size


def fit_line(sizes: Sequence[float], costs: Sequence[float]) -> Line:
    """The least-squares line through (size, cost); at least two distinct sizes."""
    if len(sizes) != len(costs):
        raise ValueError(f"{len(sizes)} sizes but {len(costs)} costs")
    if len(set(sizes)) < 2:
        raise ValueError("a line needs at least two distinct sizes")
    n = len(sizes)
    mean_x = sum(sizes) / n
    mean_y = sum(costs) / n
    sxx = sum((x - mean_x) ** 2 for x in sizes)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, costs, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    worst = max(
        abs(y - (intercept + slope * x)) / abs(y) if y else math.inf
        for x, y in zip(sizes, costs, strict=True)
    )
    return Line(intercept, slope, worst)


def exponent(small: tuple[float, float], large: tuple[float, float]) -> float:
    """The growth exponent k of cost ~ size**k between two (size, cost) points."""
    (x1, y1), (x2, y2) = small, large
    if min(x1, y1, x2, y2) <= 0 or x1 == x2:
        raise ValueError("sizes and costs must be positive and the sizes distinct")
    return math.log(y2 / y1) / math.log(x2 / x1)
