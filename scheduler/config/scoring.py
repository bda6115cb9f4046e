"""The `scoring` section: how feasible nodes are ranked."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.readers import Reader, boolean, fraction, integer, number
from scheduler.config.tree import check_settings, nested, reads
from topology.scoring import ScoreWeights


def _weight_reader(name: str) -> Reader:
    """`ScoreWeights` fields: ratios and thresholds are fractions, everything else signed points."""
    return fraction if name.endswith(("_ratio", "_threshold")) else number()


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How feasible nodes are ranked (see `topology.scoring`)."""

    weights: ScoreWeights = field(
        default_factory=ScoreWeights, metadata=nested(ScoreWeights, _weight_reader)
    )
    """Every number of the NVLink-domain score; ratios and thresholds are fractions in [0, 1]."""
    preferred_affinity_weight: float = field(default=1.0, metadata=reads(number(minimum=0.0)))
    """Multiplier of the preferred-node-affinity score added to the NVLink score (0 ignores it)."""
    fragmentation_weight: float = field(default=10.0, metadata=reads(number(minimum=0.0)))
    """Multiplier of the GPU-fragmentation score (`scheduler.plugins.gpu_fragmentation`): the
    change of a node's expected free GPUs left without enough cpu or memory (0 turns it off)."""
    narrow_to_one_domain: bool = field(default=True, metadata=reads(boolean))
    """Narrow: a pod asking for 2 or more GPUs goes only to nodes that hold it inside one NVLink
    domain whenever any feasible node can (`scheduler.plugins.nvlink`). False leaves one domain
    to the score alone: such pods may then take a whole smaller node across its domains, which
    keeps more of the larger nodes whole (docs/benchmarks.md, "Pods left pending")."""
    pack_gang_members: bool = field(default=True, metadata=reads(boolean))
    """A gang's members go first to nodes the gang already uses, then to the node that can hold
    most of the gang's GPUs still to place, then by score (few nodes per gang,
    `scheduler.gangs.planning`). False places each member by the score alone, as single pods
    are placed, which keeps more of the largest nodes whole for the pods that need them
    (docs/benchmarks.md, "Pods left pending")."""
    seed: int = field(default=0, metadata=reads(integer(0)))
    """Seed of the random generator that breaks ties between equally scored nodes."""

    def __post_init__(self) -> None:
        check_settings(self)
