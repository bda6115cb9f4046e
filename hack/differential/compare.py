"""Per-pod comparison of the two feasible sets, and the agreement table (pure code)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hack.differential.generate import FEATURES

NVLINK_PLUGIN = "NVLink"
SHOWN_NODES = 4
FIT_ERROR = re.compile(r"^0/(\d+) nodes are available: (.*)$", re.DOTALL)
HISTOGRAM_ENTRY = re.compile(r"^(\d+) (.+)$", re.DOTALL)


@dataclass(frozen=True)
class FitMessage:
    """A "0/N nodes are available: ..." message taken apart: the node count and either the
    per-reason node counts (Filter rejections) or the PreFilter text."""

    nodes: int
    reasons: Mapping[str, int]
    text: str = ""


def parse_fit_message(message: str) -> FitMessage | None:
    """`message` as kube-scheduler's FitError writes it (framework/types.go `FitError.Error`:
    the PreFilter message, or the sorted "<count> <reason>" histogram joined by ", ", then a
    period); None when it is not such a message."""
    match = FIT_ERROR.match(message.strip())
    if match is None:
        return None
    body = match.group(2).strip().removesuffix(".")
    pieces = re.split(r", (?=\d+ )", body)
    entries = [HISTOGRAM_ENTRY.match(piece) for piece in pieces]
    if body and all(entries):
        reasons: dict[str, int] = {}
        for entry in entries:
            assert entry is not None
            reasons[entry.group(2)] = reasons.get(entry.group(2), 0) + int(entry.group(1))
        return FitMessage(int(match.group(1)), reasons)
    return FitMessage(int(match.group(1)), {}, body)


UNTOLERATED_TAINT = "node(s) had untolerated taint"
UNTOLERATED_TAINTS = "node(s) had untolerated taint(s)"


def canonical(message: FitMessage) -> FitMessage:
    """`message` with every TaintToleration reason under kube-scheduler 1.37's one wording:
    gpu-scheduler names the first untolerated taint ("node(s) had untolerated taint {dedicated:
    gpu}", one reason per distinct taint), kube-scheduler 1.37 says "node(s) had untolerated
    taint(s)" (tainttoleration/taint_toleration.go); the node counts are compared, the
    wording is a documented difference (docs/benchmarks.md, DRA differential)."""
    reasons: dict[str, int] = {}
    for reason, count in message.reasons.items():
        key = UNTOLERATED_TAINTS if reason.startswith(UNTOLERATED_TAINT) else reason
        reasons[key] = reasons.get(key, 0) + count
    return FitMessage(message.nodes, reasons, message.text)


def compare_messages(kube: str, ours: str) -> str:
    """Why the two failure messages disagree ("" when they agree): the node count, and the
    reason counts (or the PreFilter text) must be the same (`canonical` wording); the order of
    the reasons is not compared. Messages that are not FitErrors (an attempt's error) are not
    compared."""
    theirs, mine = parse_fit_message(kube), parse_fit_message(ours)
    if theirs is None or mine is None or canonical(theirs) == canonical(mine):
        return ""
    return f"messages differ: kube-scheduler {kube!r}, gpu-scheduler {ours!r}"


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
    kube_message: str = ""
    """kube-scheduler's PodScheduled=False message, when it found no node ("" when not read)."""
    ours_message: str = ""
    """gpu-scheduler's failure message for the same pod ("" when not computed)."""

    @property
    def message_difference(self) -> str:
        """Set when both sides found no node and their messages count reasons differently."""
        if self.kube or self.ours or not self.kube_message or not self.ours_message:
            return ""
        return compare_messages(self.kube_message, self.ours_message)

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
        if self.message_difference:
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
        if self.message_difference:
            lines.append(f"  {self.message_difference}")
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


def summarize(outcomes: Sequence[Outcome], features: Sequence[str] = FEATURES) -> list[Row]:
    """One row per feature of `features` used by some pod (in that order), then "all"."""
    rows = [
        _row(feature, [o for o in outcomes if feature in o.features])
        for feature in features
        if any(feature in o.features for o in outcomes)
    ]
    rows.append(_row("all", outcomes))
    return rows


def render(rows: Sequence[Row]) -> str:
    header: tuple[str, ...] = ("FEATURE", "PODS", "AGREE", "JUSTIFIED", "DISAGREE", "AGREEMENT")
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
