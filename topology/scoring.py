"""The NVLink-domain score of every node for one pod, in one vectorized call.

A pod asks for `g >= 1` GPUs. For node n with per-domain free GPUs `f[d]`, domain sizes `s[d]`,
`T` GPUs in all and `U` in use (contract: `T == sum(s)`, `U == T - sum(f)`):

- feasible: `sum(f) >= g`. Spanning domains is allowed (and penalised), so a node is feasible
  whenever it has `g` free GPUs anywhere; an infeasible node gets 0 in every component and NaN in
  `raw`.
- single_domain_possible: some domain has `f[d] >= g` now.
- chosen domain (single-domain placements): best fit, the fitting domain with the fewest free
  GPUs; ties go to the larger domain (its free GPUs are the remainder of a partly used domain),
  then to the lowest index. This is exactly the domain `occupancy.choose_gpus` picks.
- domains spanned m: 1 for a single-domain placement, else the fewest domains whose free GPUs add
  up to `g` (the most-free domains first), as `choose_gpus` spans them.

Points per component (defaults of `ScoreWeights`, every number configurable):

    =================  ================================================================  ======
    component          rule                                                              points
    =================  ================================================================  ======
    base               every feasible node                                                 +50
    domain_integrity   single-domain fit                                                   +50
                       ... and exact domain fit: the chosen domain is untouched and its    +30
                       size equals g (the pod takes a whole domain)
                       spanning m >= 2 domains instead: per extra domain, times (m - 1)    -20
    node_matching      r = g / T >= 1/2 (node at most twice the pod)                       +80
                       1/4 <= r < 1/2                                                      +20
                       r < 1/4 (node more than four times the pod)                         -40
    domain_completion  single-domain fit into a partly used domain that the pod fills       +40
                       exactly (f[chosen] == g < s[chosen])
    efficiency         u = (U + g) / T after placement: u >= 0.9                            +30
                       0.7 <= u < 0.9                                                      +20
                       u < 0.3                                                             -20
                       otherwise                                                             0
    raw                base + domain_integrity + node_matching + domain_completion
                       + efficiency, summed in that order
    =================  ================================================================  ======

Where the numbers come from: the seed algorithm as summarised in the design notes fixes base 50,
single-domain fit +50, exact domain fit +30, -20 per extra domain, +40 for completing a partly
used domain and +20..+30 / -20 for high / low utilization after placement, plus the worked
example (1-GPU pod: raw 250 = 50+50+80+40+30 on a 2-GPU one-domain node with one GPU used; raw
40 = 50+50-40+0-20 on an empty 8-GPU node with two domains of 4). The seed's own code for node
matching, the exact-fit condition and the utilization thresholds was not found in public sources,
so those rules are designed here to reproduce the example exactly and to be monotone: node
matching rises with the pod's share of the node (1/2 -> +80, 1/8 -> -40, 1/4 in between -> +20);
"exact domain fit" means taking a whole untouched domain, which keeps it apart from the
completion bonus (filling the rest of a used domain) so the two never add up; utilization tiers
are 90 % / 70 % / 30 %.

Consequences: for a 1-GPU pod a half-used 2-GPU node (250) beats an empty 8-GPU node (40), which
stays whole for a large pod; an 8-GPU pod is feasible only on nodes with 8 free GPUs.

Normalization (`normalize`): the straight line through the seed's two reported points,
raw 40 -> 31 and raw 250 -> 92, i.e. `31 + (raw - 40) * 61 / 210`, clipped to 0..100. It keeps
the order of raw scores except where the clip merges the extremes (raw >= ~277 or <= ~-67).
NaN (infeasible) stays NaN.

Tie-breaking (`pick_best`): uniformly among the feasible nodes with the highest score, using the
caller's seeded `numpy.random.Generator`; one draw per decision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.occupancy import NO_DOMAIN

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]

MIN_SCORE = 0.0
MAX_SCORE = 100.0
NO_NODE = -1
"""`pick_best` result when no node is feasible."""


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Every number of the NVLink-domain score; defaults reproduce the seed's worked example.

    All point fields are signed points added to the raw score. Ratios and thresholds are
    fractions in [0, 1]; `__post_init__` raises `ValueError` unless
    `node_match_fair_ratio <= node_match_close_ratio` and
    `util_low_threshold <= util_good_threshold <= util_high_threshold`.
    """

    base: float = 50.0
    """Points for every feasible node."""
    single_domain_fit: float = 50.0
    """Points when the pod fits inside one NVLink domain."""
    exact_domain_fit: float = 30.0
    """Extra points when the pod takes a whole untouched domain of exactly its size."""
    per_extra_domain: float = -20.0
    """Points per domain beyond the first when the pod must span domains."""
    node_match_close_ratio: float = 0.5
    """Pod share of the node (g / node GPUs) at or above which `node_match_close` applies."""
    node_match_close: float = 80.0
    """Points when the node is at most 1/`node_match_close_ratio` times the pod."""
    node_match_fair_ratio: float = 0.25
    """Pod share of the node at or above which (and below the close ratio) `node_match_fair`
    applies."""
    node_match_fair: float = 20.0
    """Points for a node moderately larger than the pod."""
    node_match_far: float = -40.0
    """Points when the pod's share of the node is below `node_match_fair_ratio`."""
    domain_completion: float = 40.0
    """Points when the pod fills the remaining free GPUs of a partly used domain."""
    util_high_threshold: float = 0.9
    """Node GPU utilization after placement at or above which `util_high` applies."""
    util_high: float = 30.0
    """Points for a node that ends up (nearly) full."""
    util_good_threshold: float = 0.7
    """Utilization after placement at or above which (below the high threshold) `util_good`
    applies."""
    util_good: float = 20.0
    """Points for a node that ends up well used."""
    util_low_threshold: float = 0.3
    """Utilization after placement below which `util_low` applies."""
    util_low: float = -20.0
    """Points for a node that ends up mostly idle."""

    def __post_init__(self) -> None:
        if not self.node_match_fair_ratio <= self.node_match_close_ratio:
            raise ValueError("node_match_fair_ratio must be <= node_match_close_ratio")
        if not self.util_low_threshold <= self.util_good_threshold <= self.util_high_threshold:
            raise ValueError(
                "need util_low_threshold <= util_good_threshold <= util_high_threshold"
            )


DEFAULT_WEIGHTS = ScoreWeights()


@dataclass(frozen=True, slots=True)
class Normalization:
    """Linear map from raw points to 0-100 through two anchor points (then clipped).

    Defaults are the seed's reported pairs: raw 40 -> 31 and raw 250 -> 92. `raw_low` and
    `raw_high` must differ (`ValueError`).
    """

    raw_low: float = 40.0
    """Raw score of the lower anchor."""
    normalized_low: float = 31.0
    """Normalized score of the lower anchor."""
    raw_high: float = 250.0
    """Raw score of the upper anchor."""
    normalized_high: float = 92.0
    """Normalized score of the upper anchor."""

    def __post_init__(self) -> None:
        if self.raw_low == self.raw_high:
            raise ValueError("raw_low and raw_high must differ")


DEFAULT_NORMALIZATION = Normalization()


@dataclass(frozen=True, slots=True, eq=False)
class ScoreBreakdown:
    """Score of every node for one pod, by component (all arrays have shape (nodes,)).

    Point arrays are float64 and 0 for infeasible nodes; `raw` is their sum, NaN where
    infeasible. `chosen_domain` is the best-fit domain index, or `NO_DOMAIN` (-1) when the pod
    spans domains or the node is infeasible; `domains_spanned` is 0 for infeasible nodes.
    """

    base: FloatArray
    domain_integrity: FloatArray
    node_matching: FloatArray
    domain_completion: FloatArray
    efficiency: FloatArray
    raw: FloatArray
    feasible: BoolArray
    single_domain_possible: BoolArray
    chosen_domain: Int64Array
    domains_spanned: Int64Array


def score_nodes(
    g: int,
    free_per_domain: npt.ArrayLike,
    domain_size: npt.ArrayLike,
    gpu_total: npt.ArrayLike,
    gpu_used: npt.ArrayLike,
    weights: ScoreWeights = DEFAULT_WEIGHTS,
) -> ScoreBreakdown:
    """Score all nodes for a pod asking for `g` GPUs (rules in the module docstring).

    `free_per_domain` and `domain_size` are (nodes, D) with zero padding (as built by
    `occupancy.build_domain_arrays`), `gpu_total` and `gpu_used` are (nodes,). Pure: no Python
    loop over nodes. Raises `ValueError` if `g < 1` or the shapes disagree.
    """
    if g < 1:
        raise ValueError(f"a pod must ask for at least one GPU, got {g}")
    free = np.asarray(free_per_domain, dtype=np.int64)  # free: (nodes, D)
    size = np.asarray(domain_size, dtype=np.int64)  # size: (nodes, D)
    total = np.asarray(gpu_total, dtype=np.int64)  # total: (nodes,)
    used = np.asarray(gpu_used, dtype=np.int64)  # used: (nodes,)
    if free.ndim != 2 or free.shape != size.shape or total.shape != (free.shape[0],):
        raise ValueError(f"shapes disagree: {free.shape} {size.shape} {total.shape}")
    if used.shape != total.shape:
        raise ValueError(f"gpu_used shape {used.shape} != gpu_total shape {total.shape}")
    nodes = free.shape[0]
    if free.shape[1] == 0:
        free = np.zeros((nodes, 1), dtype=np.int64)  # free: (nodes, 1)
        size = np.zeros((nodes, 1), dtype=np.int64)  # size: (nodes, 1)
    w = weights

    feasible = free.sum(axis=1) >= g  # feasible: (nodes,)
    fits = free >= g  # fits: (nodes, D)
    single = fits.any(axis=1)  # single: (nodes,)

    # Best fit: fewest free among fitting domains, then the largest, then the lowest index.
    unfit = np.iinfo(np.int64).max
    min_free = np.where(fits, free, unfit).min(axis=1)  # min_free: (nodes,)
    tied = fits & (free == min_free[:, None])  # tied: (nodes, D)
    max_size = np.where(tied, size, -1).max(axis=1)  # max_size: (nodes,)
    best = tied & (size == max_size[:, None])  # best: (nodes, D)
    best_index = np.argmax(best, axis=1)  # best_index: (nodes,)
    chosen_free = np.take_along_axis(free, best_index[:, None], axis=1)[:, 0]  # (nodes,)
    chosen_size = np.take_along_axis(size, best_index[:, None], axis=1)[:, 0]  # (nodes,)
    chosen = np.where(single, best_index, NO_DOMAIN).astype(np.int64)  # chosen: (nodes,)

    most_free_first = -np.sort(-free, axis=1)  # most_free_first: (nodes, D)
    running = np.cumsum(most_free_first, axis=1)  # running: (nodes, D)
    spanned = np.count_nonzero(running < g, axis=1) + 1  # spanned: (nodes,)

    base = np.full(nodes, w.base)  # base: (nodes,)
    exact = single & (chosen_size == g)  # exact: (nodes,)
    integrity = np.where(  # integrity: (nodes,)
        single,
        w.single_domain_fit + np.where(exact, w.exact_domain_fit, 0.0),
        w.per_extra_domain * (spanned - 1),
    )
    with np.errstate(divide="ignore"):  # a node without GPUs: g / 0 = inf, sorted out below
        share = g / total  # share: (nodes,)
        utilization = (used + g) / total  # utilization: (nodes,)
    matching = np.select(  # matching: (nodes,)
        [share >= w.node_match_close_ratio, share >= w.node_match_fair_ratio],
        [w.node_match_close, w.node_match_fair],
        w.node_match_far,
    )
    completes = single & (chosen_free == g) & (chosen_free < chosen_size)  # completes: (nodes,)
    completion = np.where(completes, w.domain_completion, 0.0)  # completion: (nodes,)
    efficiency = np.select(  # efficiency: (nodes,)
        [
            utilization >= w.util_high_threshold,
            utilization >= w.util_good_threshold,
            utilization < w.util_low_threshold,
        ],
        [w.util_high, w.util_good, w.util_low],
        0.0,
    )

    def feasible_only(points: FloatArray) -> FloatArray:
        return np.where(feasible, points, 0.0).astype(np.float64)  # points: (nodes,)

    base, integrity = feasible_only(base), feasible_only(integrity)
    matching, completion = feasible_only(matching), feasible_only(completion)
    efficiency = feasible_only(efficiency)
    total_points = base + integrity + matching + completion + efficiency  # (nodes,)
    raw = np.where(feasible, total_points, np.nan)  # raw: (nodes,)
    return ScoreBreakdown(
        base=base,
        domain_integrity=integrity,
        node_matching=matching,
        domain_completion=completion,
        efficiency=efficiency,
        raw=raw,
        feasible=feasible,
        single_domain_possible=single & feasible,
        chosen_domain=np.where(feasible, chosen, NO_DOMAIN).astype(np.int64),  # (nodes,)
        domains_spanned=np.where(feasible, spanned, 0).astype(np.int64),  # (nodes,)
    )


def normalize(
    raw: npt.ArrayLike, normalization: Normalization = DEFAULT_NORMALIZATION
) -> FloatArray:
    """Map raw scores (nodes,) to 0..100 by the two-anchor line, clipped; NaN stays NaN."""
    points = np.asarray(raw, dtype=np.float64)  # points: (nodes,)
    n = normalization
    # Multiply before dividing so the anchors map exactly (250 -> 92.0, 40 -> 31.0). NaN
    # propagates quietly (no numpy warning).
    rise = (points - n.raw_low) * (n.normalized_high - n.normalized_low)  # rise: (nodes,)
    scaled = n.normalized_low + rise / (n.raw_high - n.raw_low)  # scaled: (nodes,)
    return np.clip(scaled, MIN_SCORE, MAX_SCORE)  # (nodes,)


def pick_best(scores: npt.ArrayLike, feasible: npt.ArrayLike, rng: np.random.Generator) -> int:
    """Index of the chosen node: uniformly among the feasible nodes with the highest score.

    NaN scores never win. Draws exactly one integer from `rng` whenever a node is chosen (even
    without a tie), so a generator seeded the same way replays the same decisions. Returns
    `NO_NODE` (-1) without drawing when no feasible node has a score.
    """
    values = np.asarray(scores, dtype=np.float64)  # values: (nodes,)
    eligible = np.asarray(feasible, dtype=np.bool_) & ~np.isnan(values)  # eligible: (nodes,)
    if not eligible.any():
        return NO_NODE
    top = values[eligible].max()
    candidates = np.flatnonzero(eligible & (values == top))  # candidates: (ties,)
    return int(candidates[rng.integers(candidates.size)])
