"""Extension points of a scheduling cycle and their contracts.

A cycle for one pod runs, in order:

1. PreFilter (`PreFilterPlugin.pre_filter`): checks the pod itself and may stash parsed data in
   the cycle state. Returns a Status: SUCCESS goes on; UNSCHEDULABLE_AND_UNRESOLVABLE ends the
   cycle with that message (the pod waits in the unschedulable pool until it or the cluster
   changes); ERROR ends it and the pod backs off.
2. Filter (`FilterPlugin.filter`): vectorized over every node row of the snapshot. Returns a list
   of `Rejection`s, each a reason and the (rows,) mask of nodes failing for it. A node passes if
   no plugin rejects it. Reasons are what users read in FailedScheduling ("Insufficient
   nvidia.com/gpu"); `resolvable` says whether evicting pods could help (reclaim only looks at
   nodes whose every rejection is resolvable), as kube-scheduler's Unschedulable vs
   UnschedulableAndUnresolvable.
3. Narrow (`NarrowPlugin.narrow`): runs after every filter with the (rows,) mask of nodes that
   passed them all, and may reject some of those in favour of the others (never all of them).
   NVLink uses it to keep a multi-GPU pod inside one domain whenever any feasible node allows
   it. Its rejections are not resolvable: the pod is schedulable, just not there.
4. PostFilter (`PostFilterPlugin.post_filter`): runs only when no node passed; may free room
   (reclaim) and returns the node it nominated, or None. Either way this cycle reports the pod
   unschedulable; it is retried when the freed room shows up as cluster events.
5. Score (`ScorePlugin.score`): vectorized; returns (rows,) points in 0..100 for the feasible rows
   (other rows are ignored), or None when it has no preference for this pod (every node
   equal). The framework adds `weight * points` over plugins and picks the best node, ties
   broken by a seeded generator.

Plugins must be pure with respect to the cluster: they read the snapshot and the pod, never the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from scheduler.framework.snapshot import Snapshot
    from scheduler.model.objects import PodInfo

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


class Code(IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 1
    UNSCHEDULABLE_AND_UNRESOLVABLE = 2
    ERROR = 3
    SKIP = 4


@dataclass(frozen=True)
class Status:
    """Outcome of one plugin call: a code, human-readable reasons, and the plugin's name."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    def message(self) -> str:
        return "; ".join(self.reasons)


SUCCESS = Status()


@dataclass(frozen=True)
class Rejection:
    """Nodes one filter rejects for one reason. `failed`: (rows,) bool."""

    reason: str
    failed: BoolArray
    resolvable: bool
    plugin: str = ""


@dataclass
class CycleState:
    """Scratch space of one cycle; plugins key their data by their own name."""

    data: dict[str, Any] = field(default_factory=dict)
    passed: BoolArray | None = None
    """(rows,) the nodes no filter before the running one rejected, kept current by the
    framework while filters run (None outside `Framework.run_filters`). A costly filter
    (DynamicResources allocates devices per node) may examine only these rows: a node another
    filter rejected is described by that filter."""


class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> Status: ...


class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]: ...


class NarrowPlugin(Protocol):
    name: str

    def narrow(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> list[Rejection]: ...


class ScorePlugin(Protocol):
    name: str
    weight: float

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: BoolArray
    ) -> FloatArray | None: ...
