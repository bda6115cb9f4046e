"""Runs the plugins of a profile over a snapshot: filters, the failure message, scores, choice.

`Framework.evaluate(pod, snapshot)` is one synchronous pass over every node:

    filters -> narrow -> feasible (rows,) -> [no node: Diagnosis.message()] -> scores -> total
            -> pick_best (seeded tie-break) -> node row

The failure message follows kube-scheduler's FitError: "0/8 nodes are available: 2 node(s) had
untolerated taint {dedicated: infra}, 6 Insufficient nvidia.com/gpu." kube-scheduler stops at the
first filter plugin that rejects a node, so each node is described by that one plugin, in profile
order (filters, then narrowers): its reason, or its reasons when that plugin gives several for
the node (NodeResourcesFit: "Insufficient cpu" and "Insufficient memory"), each counted once per
node. Later plugins that would also reject the node are not counted. The "<count> <reason>"
entries are sorted as strings, as kube-scheduler's FitError sorts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.framework.interface import (
    BoolArray,
    CycleState,
    FilterPlugin,
    FloatArray,
    NarrowPlugin,
    Rejection,
    ScorePlugin,
)
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from topology.scoring import pick_best

NO_NODE = -1


@dataclass
class Diagnosis:
    """Why nodes were rejected: every rejection, and the (rows,) mask of nodes that passed."""

    node_count: int
    feasible: BoolArray
    rejections: list[Rejection] = field(default_factory=list)

    def reason_counts(self, valid: BoolArray) -> dict[str, int]:
        """Reason -> nodes among `valid` (rows,) that it describes: each node by the reasons of
        the first plugin (in the order rejections were recorded) that rejected it."""
        owner = np.full(valid.shape[0], -1, dtype=np.int32)  # owner: (rows,) plugin index
        plugins: dict[str, int] = {}
        described: dict[str, BoolArray] = {}  # reason -> (rows,)
        for rejection in self.rejections:
            plugin = plugins.setdefault(rejection.plugin, len(plugins))
            failed = rejection.failed & valid  # failed: (rows,)
            owner[failed & (owner < 0)] = plugin
            mine = failed & (owner == plugin)  # mine: (rows,)
            if rejection.reason in described:
                described[rejection.reason] |= mine
            else:
                described[rejection.reason] = mine
        counts = {reason: int(mask.sum()) for reason, mask in described.items()}
        return {reason: count for reason, count in counts.items() if count}

    def message(self, valid: BoolArray) -> str:
        counts = self.reason_counts(valid)
        detail = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))
        head = f"0/{self.node_count} nodes are available"
        return f"{head}: {detail}." if detail else f"{head}."

    def resolvable_nodes(self, valid: BoolArray) -> BoolArray:
        """(rows,) nodes rejected only for reasons that evicting pods could fix."""
        blocked = np.zeros_like(valid)  # blocked: (rows,)
        for rejection in self.rejections:
            if not rejection.resolvable:
                blocked |= rejection.failed
        return valid & ~blocked & ~self.feasible


@dataclass
class Evaluation:
    """One pod against every node: the diagnosis, scores, and the chosen row (or NO_NODE)."""

    diagnosis: Diagnosis
    state: CycleState
    scores: dict[str, FloatArray]
    total: FloatArray
    chosen: int


class Framework:
    """A scheduling profile: the filters and weighted scores applied to each pod."""

    def __init__(
        self,
        filters: Sequence[FilterPlugin],
        scores: Sequence[ScorePlugin],
        seed: int = 0,
        narrowers: Sequence[NarrowPlugin] = (),
        pack_gang_members: bool = True,
    ) -> None:
        self.filters = list(filters)
        self.pack_gang_members = pack_gang_members
        """How a gang's members choose among their feasible nodes
        (`scheduler.gangs.planning`): True, the nodes the gang already uses first, then the node
        that can hold most of the gang's GPUs still to place, then the score; False, by the
        score alone, as single pods."""
        self.narrowers = list(narrowers)
        self.scores = list(scores)
        self.rng = np.random.default_rng(seed)

    def run_filters(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> Diagnosis:
        valid = snapshot.valid  # valid: (rows,)
        feasible = valid.copy()  # feasible: (rows,)
        rejections: list[Rejection] = []
        for plugin in self.filters:
            state.passed = feasible
            for rejection in plugin.filter(pod, snapshot, state):
                rejections.append(rejection)
                feasible &= ~rejection.failed
        state.passed = None
        for narrower in self.narrowers:
            if not feasible.any():
                break
            for rejection in narrower.narrow(pod, snapshot, state, feasible.copy()):
                rejections.append(rejection)
                feasible &= ~rejection.failed
        return Diagnosis(snapshot.node_count, feasible, rejections)

    def run_scores(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> tuple[dict[str, FloatArray], FloatArray]:
        total = np.zeros(snapshot.rows, dtype=np.float64)  # total: (rows,)
        per_plugin: dict[str, FloatArray] = {}
        for plugin in self.scores:
            points = plugin.score(pod, snapshot, state, feasible)  # points: (rows,)
            if points is None:
                continue
            per_plugin[plugin.name] = points
            if plugin.weight == 1.0:
                total += points
            else:
                total += plugin.weight * points
        return per_plugin, total

    def evaluate(self, pod: PodInfo, snapshot: Snapshot, choose: bool = True) -> Evaluation:
        """Filter and score every node for `pod`; pick one (seeded) when `choose`."""
        state = CycleState()
        diagnosis = self.run_filters(pod, snapshot, state)
        if not diagnosis.feasible.any():
            empty = np.zeros(snapshot.rows, dtype=np.float64)  # empty: (rows,)
            return Evaluation(diagnosis, state, {}, empty, NO_NODE)
        per_plugin, total = self.run_scores(pod, snapshot, state, diagnosis.feasible)
        chosen = pick_best(total, diagnosis.feasible, self.rng) if choose else NO_NODE
        return Evaluation(diagnosis, state, per_plugin, total, chosen)
