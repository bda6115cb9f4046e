"""What the PostFilter's steps (idle reclaim, priority preemption) hand to the shared
enforcement in `scheduler.plugins.reclaim.Reclaimer`: the victims chosen on one node.

Both steps go through the same machinery: re-validate the plan, reserve the room in the cache,
set `status.nominatedNodeName`, evict through the Eviction API, budget-guarded victims first.
`Plan.step` says which step chose the victims, and so which events are written.
"""

from __future__ import annotations

from dataclasses import dataclass

from reclaim.usage import Verdict
from scheduler.cache import PodState
from scheduler.objects import PodInfo

RECLAIM = "reclaim"
PREEMPTION = "preemption"


def may_make_room(state: PodState, preemptor: PodInfo) -> bool:
    """Whether the pod of `state` may be weighed as a victim for `preemptor` by either step: it
    counts on its node (not a reservation, not assumed by a binding in flight), is not already
    terminating and is not the preemptor itself."""
    return not (
        state.assumed
        or state.reserved_at is not None
        or state.info.terminating
        or state.info.key == preemptor.key
    )


@dataclass(frozen=True)
class Victim:
    """A pod chosen for eviction, the PodDisruptionBudgets guarding it and, for idle reclaim,
    its policy window and (once measured) its verdict (zero and None for preemption)."""

    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    window_s: int = 0
    threshold_pct: float = 0.0
    verdict: Verdict | None = None
    budgets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The victims chosen on one node; `guarded` are those a budget forbids evicting now;
    `step` is the PostFilter step that chose them (`RECLAIM` or `PREEMPTION`)."""

    node: str
    victims: tuple[Victim, ...]
    guarded: frozenset[str] = frozenset()
    step: str = RECLAIM

    def eviction_order(self) -> list[Victim]:
        """Budget-guarded victims first: if the API server refuses one, nothing else on the
        node was evicted for nothing."""
        return sorted(self.victims, key=lambda v: v.pod.key not in self.guarded)

    def guarded_warning(self) -> str:
        """What the preemptor's event adds when budgets may refuse an eviction ("" if none)."""
        if not self.guarded:
            return ""
        return (
            f"; {len(self.guarded)} of them guarded by a PodDisruptionBudget that allows no "
            "more disruptions now: the eviction may be refused"
        )
