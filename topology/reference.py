"""A plain-Python reference of the NVLink-domain score, one node at a time.

Used only by tests to check `topology.scoring.score_nodes`: same rules (see the scoring module's
table), written as directly as possible, with no numpy. It starts from a `NodeTopology` and the
node's used-GPU flags rather than from the padded arrays, so the tests check the array building
too. Float operations are done in the same order as in the vectorized code, so results match
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topology.domains import NodeTopology
from topology.occupancy import NO_DOMAIN
from topology.scoring import DEFAULT_WEIGHTS, ScoreWeights


@dataclass(frozen=True, slots=True)
class ReferenceScore:
    """Points of one feasible node, by component, plus the placement they assume."""

    base: float
    domain_integrity: float
    node_matching: float
    domain_completion: float
    efficiency: float
    raw: float
    chosen_domain: int
    domains_spanned: int


def reference_score(
    g: int, topology: NodeTopology, used: Sequence[bool], weights: ScoreWeights = DEFAULT_WEIGHTS
) -> ReferenceScore | None:
    """Score of one node for a pod asking for `g` GPUs; None if the node cannot hold it.

    `used[gpu]` tells whether each GPU of the node is in use.
    """
    w = weights
    free = [sum(1 for gpu in domain if not used[gpu]) for domain in topology.domains]
    size = [len(domain) for domain in topology.domains]
    total = topology.gpu_count
    in_use = sum(1 for flag in used if flag)
    if sum(free) < g:
        return None

    fitting = [d for d in range(len(free)) if free[d] >= g]
    if fitting:
        chosen = min(fitting, key=lambda d: (free[d], -size[d], d))
        spanned = 1
        if size[chosen] == g:
            integrity = w.single_domain_fit + w.exact_domain_fit
        else:
            integrity = w.single_domain_fit + 0.0
        if free[chosen] == g and free[chosen] < size[chosen]:
            completion = w.domain_completion
        else:
            completion = 0.0
    else:
        chosen = NO_DOMAIN
        spanned = 0
        gathered = 0
        for count in sorted(free, reverse=True):
            gathered += count
            spanned += 1
            if gathered >= g:
                break
        integrity = w.per_extra_domain * (spanned - 1)
        completion = 0.0

    share = g / total
    if share >= w.node_match_close_ratio:
        matching = w.node_match_close
    elif share >= w.node_match_fair_ratio:
        matching = w.node_match_fair
    else:
        matching = w.node_match_far

    utilization = (in_use + g) / total
    if utilization >= w.util_high_threshold:
        efficiency = w.util_high
    elif utilization >= w.util_good_threshold:
        efficiency = w.util_good
    elif utilization < w.util_low_threshold:
        efficiency = w.util_low
    else:
        efficiency = 0.0

    raw = w.base + integrity + matching + completion + efficiency
    return ReferenceScore(
        base=w.base,
        domain_integrity=integrity,
        node_matching=matching,
        domain_completion=completion,
        efficiency=efficiency,
        raw=raw,
        chosen_domain=chosen,
        domains_spanned=spanned,
    )
