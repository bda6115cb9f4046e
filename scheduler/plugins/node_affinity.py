"""NodeAffinity: nodeSelector and required node affinity (filter), preferred affinity (score).

Label requirements are evaluated on the cache's integer-coded label columns, so one requirement
costs a few numpy operations over all nodes. Semantics follow Kubernetes: nodeSelector and the
required terms must both match; terms are ORed, the requirements of a term ANDed; an empty term
matches nothing; NotIn and DoesNotExist match nodes without the label; Gt and Lt compare the
label as an integer (a node whose label is not an integer does not match).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.framework.interface import CycleState, FloatArray, Rejection
from scheduler.framework.snapshot import Snapshot
from scheduler.model.fields import NodeSelectorTerm, SelectorRequirement
from scheduler.model.objects import PodInfo

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
MAX_POINTS = 100.0

BoolArray = npt.NDArray[np.bool_]


def _label_matches(snapshot: Snapshot, req: SelectorRequirement) -> BoolArray:
    column = snapshot.label(req.key)
    codes = column.codes  # codes: (rows,)
    present = codes >= 0  # present: (rows,)
    if req.operator in ("In", "NotIn"):
        wanted = [column.index[v] for v in req.values if v in column.index]
        inside = np.isin(codes, wanted)  # inside: (rows,)
        return inside if req.operator == "In" else ~inside
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return ~present
    numbers = np.array(  # numbers: (distinct values,)
        [int(v) if v.lstrip("-").isdigit() else np.nan for v in column.values] or [np.nan],
        dtype=np.float64,
    )
    value = np.where(present, numbers[np.maximum(codes, 0)], np.nan)  # value: (rows,)
    bound = float(req.values[0])
    with np.errstate(invalid="ignore"):
        return value > bound if req.operator == "Gt" else value < bound


def _field_matches(snapshot: Snapshot, req: SelectorRequirement) -> BoolArray:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return np.zeros(snapshot.rows, dtype=bool)
    inside = np.isin(np.asarray(snapshot.names, dtype=object), list(req.values))  # (rows,)
    return inside if req.operator == "In" else ~inside


def term_matches(snapshot: Snapshot, term: NodeSelectorTerm) -> BoolArray:
    """(rows,) mask of nodes matching every requirement of `term`; empty terms match nothing."""
    if not term.expressions and not term.fields:
        return np.zeros(snapshot.rows, dtype=bool)
    matched = np.ones(snapshot.rows, dtype=bool)  # matched: (rows,)
    for req in term.expressions:
        matched &= _label_matches(snapshot, req)
    for req in term.fields:
        matched &= _field_matches(snapshot, req)
    return matched


def required_matches(snapshot: Snapshot, pod: PodInfo) -> BoolArray:
    matched = np.ones(snapshot.rows, dtype=bool)  # matched: (rows,)
    for key, value in pod.node_selector.items():
        matched &= _label_matches(snapshot, SelectorRequirement(key, "In", (value,)))
    if pod.required_terms:
        any_term = np.zeros(snapshot.rows, dtype=bool)  # any_term: (rows,)
        for term in pod.required_terms:
            any_term |= term_matches(snapshot, term)
        matched &= any_term
    return matched


class NodeAffinity:
    name = NAME

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        if not pod.node_selector and not pod.required_terms:
            return []
        return [Rejection(REASON, ~required_matches(snapshot, pod), False, NAME)]

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None:
        """Sum of the weights of matched preferred terms, scaled so the best feasible node
        gets 100 (kube-scheduler's default normalization); None without preferred terms."""
        if not pod.preferred_terms:
            return None
        points = np.zeros(snapshot.rows, dtype=np.float64)  # points: (rows,)
        for weight, term in pod.preferred_terms:
            points += weight * term_matches(snapshot, term)
        best = points[feasible].max() if feasible.any() else 0.0
        if best <= 0:
            return np.zeros(snapshot.rows, dtype=np.float64)
        return points * (MAX_POINTS / best)  # (rows,)
