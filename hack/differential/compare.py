"""Per-pod comparison of the two feasible sets, and the agreement table (pure code)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hack.differential.generate import FEATURES

NVLINK_PLUGIN = "NVLink"
SHOWN_NODES = 4


@dataclass
class Outcome:
    """One pod: both feasible sets and gpu-scheduler's first failing filter per rejected node."""

    pod: str
    features: tuple[str, ...]
    kube: frozenset[str]
    ours: frozenset[str]
    first_failure: Mapping[str, str] = field(default_factory=dict)
    error: str = ""
    """Set when kube-scheduler gave no usable answer (the pod then counts as disagreeing)."""
    attempts: int = 1
    """How many times the pod was judged (more than once when the state changed meanwhile)."""
    node_count: int = 0
    """How many nodes the cluster held while the pod was judged (0: not recorded)."""

    @property
    def kube_only(self) -> list[str]:
        return sorted(self.kube - self.ours)

    @property
    def ours_only(self) -> list[str]:
        return sorted(self.ours - self.kube)

    @property
    def verdict(self) -> str:
        """One of "agree", "justified" (only gpu-scheduler's NVLink plugin refused the nodes
        that only kube-scheduler accepts: a strict `nvlink-policy: required`, or the narrowing
        to nodes that fit a multi-GPU pod in one NVLink domain; nothing else differs) or
        "disagree"."""
        if self.error:
            return "disagree"
        if self.kube == self.ours:
            return "agree"
        if not self.ours_only and all(
            self.first_failure.get(node, "").startswith(NVLINK_PLUGIN) for node in self.kube_only
        ):
            return "justified"
        return "disagree"

    def describe(self) -> str:
        """One or more lines naming both verdicts and gpu-scheduler's first failing filter."""
        if self.error:
            return f"{self.pod} [{', '.join(self.features)}]: {self.error}"
        lines = [
            f"{self.pod} [{', '.join(self.features)}]: kube-scheduler {len(self.kube)} nodes, "
            f"gpu-scheduler {len(self.ours)} nodes"
        ]
        kube_only, ours_only = self.kube_only, self.ours_only
        if kube_only:
            shown = ", ".join(
                f"{n} ({self.first_failure.get(n, '?')})" for n in kube_only[:SHOWN_NODES]
            )
            more = (
                f" and {len(kube_only) - SHOWN_NODES} more" if len(kube_only) > SHOWN_NODES else ""
            )
            lines.append(f"  only kube-scheduler accepts: {shown}{more}")
        if ours_only:
            shown = ", ".join(ours_only[:SHOWN_NODES])
            more = (
                f" and {len(ours_only) - SHOWN_NODES} more" if len(ours_only) > SHOWN_NODES else ""
            )
            lines.append(f"  only gpu-scheduler accepts: {shown}{more}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Row:
    feature: str
    pods: int
    agree: int
    justified: int
    disagree: int

    @property
    def agreement(self) -> float:
        """Percent of pods whose sets are equal or differ only as justified."""
        return 100.0 * (self.agree + self.justified) / self.pods if self.pods else 100.0


def _row(feature: str, outcomes: Sequence[Outcome]) -> Row:
    verdicts = [o.verdict for o in outcomes]
    return Row(
        feature,
        len(outcomes),
        verdicts.count("agree"),
        verdicts.count("justified"),
        verdicts.count("disagree"),
    )


def summarize(outcomes: Sequence[Outcome]) -> list[Row]:
    """One row per feature used by some pod (generator order), then "all"."""
    rows = [
        _row(feature, [o for o in outcomes if feature in o.features])
        for feature in FEATURES
        if any(feature in o.features for o in outcomes)
    ]
    rows.append(_row("all", outcomes))
    return rows


def render(rows: Sequence[Row]) -> str:
    header = ("FEATURE", "PODS", "AGREE", "JUSTIFIED", "DISAGREE", "AGREEMENT")
    lines = [header] + [
        (
            r.feature,
            str(r.pods),
            str(r.agree),
            str(r.justified),
            str(r.disagree),
            f"{r.agreement:.1f} %",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
