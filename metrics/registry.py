"""A minimal metrics registry rendered in Prometheus's text format.

Counters and gauges with fixed label names; values live in dicts keyed by label values. Enough for
the scheduler's own metrics without another dependency. Callable gauges read their value when
scraped (e.g. queue sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Reader = Callable[[], Iterable[tuple[tuple[str, ...], float]]]
"""Returns a metric's samples (label values, value) when it is scraped."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass
class Metric:
    name: str
    help: str
    kind: str  # "counter" or "gauge"
    labels: tuple[str, ...] = ()
    values: dict[tuple[str, ...], float] = field(default_factory=dict)
    reader: Reader | None = None

    def inc(self, amount: float = 1.0, *label_values: str) -> None:
        key = tuple(label_values)
        if len(key) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {key}")
        self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, value: float, *label_values: str) -> None:
        self.values[tuple(label_values)] = value

    def samples(self) -> Iterable[tuple[tuple[str, ...], float]]:
        if self.reader is not None:
            return list(self.reader())
        return sorted(self.values.items())

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for label_values, value in self.samples():
            if label_values:
                pairs = ",".join(
                    f'{name}="{_escape(v)}"'
                    for name, v in zip(self.labels, label_values, strict=True)
                )
                lines.append(f"{self.name}{{{pairs}}} {value:g}")
            else:
                lines.append(f"{self.name} {value:g}")
        return "\n".join(lines)


class Registry:
    """Named metrics, rendered together."""

    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}

    def counter(
        self, name: str, help: str, labels: tuple[str, ...] = (), reader: Reader | None = None
    ) -> Metric:
        """A counter; with `reader`, its samples are read when scraped."""
        return self._add(Metric(name, help, "counter", labels, reader=reader))

    def gauge(
        self, name: str, help: str, labels: tuple[str, ...] = (), reader: Reader | None = None
    ) -> Metric:
        """A gauge; with `reader`, its samples are read when scraped."""
        return self._add(Metric(name, help, "gauge", labels, reader=reader))

    def _add(self, metric: Metric) -> Metric:
        if metric.name in self.metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self.metrics[metric.name] = metric
        return metric

    def render(self) -> str:
        return "\n".join(m.render() for m in self.metrics.values()) + "\n"
