"""The structured allocator: the devices of one node for a pod's claims, with the semantics of
kube-scheduler's (k8s.io/dynamic-resource-allocation@v0.37.2 structured/allocator.go and
structured/internal/incubating/, the implementation Kubernetes 1.37's default feature gates
select) and an NVLink-aware choice among the solutions.

`Allocator(classes, in_use, matcher).allocate(node_name, labels, pools, claims, domains)`
returns a `NodeAllocation`:

- `allocations`: one `Allocation` per claim, in the order of `claims`, when all can be
  allocated together on the node (claims are allocated in order, a device taken for one is not
  offered to the next);
- else None with `reason`, upstream's words for the node: "cannot allocate all claims", or
  "invalid resource pools were encountered" when the node has an invalid pool; kube-scheduler
  reports either as Unschedulable for the node;
- `exceeded` True (allocations None) when the search used its step budget first: upstream's
  filter timeout (10 s), which kube-scheduler treats as an Error of the attempt ("node <n>:
  timed out trying to allocate devices", the reason here), not as an unschedulable node.

Errors of the attempt are raised, as upstream returns them as an Error status: `SelectorError`
(scheduler.dra.selectors) from a selector, `AllocationError` for a missing DeviceClass, a
request for all devices when a pool is being updated or invalid, a claim over 32 devices, a
capacity request a device's request policy cannot represent ("... checking capacity for device
<driver/pool/device>: capacity "<name>": capacity request cannot be represented ...").
Check classes first with `missing_device_class` (PreFilter's words). Shared counters of
partitionable devices are honoured, and so is consumable capacity (DRAConsumableCapacity): a
device that allows multiple allocations is shared by requests while its capacities last, each
result a share with its `shareID` and `consumedCapacity` (`scheduler.dra.consumable`); with a
domain map, shares fill partly used devices first (`scheduler.dra.allocator_packing`).

The modules: `allocator_requests` (checks and per-request data), `allocator_select` (selectors,
node selection, taints), `allocator_constraints`, `allocator_counters`, `allocator_packing`
(shares and their order), `allocator_order` (the NVLink order), `allocator_search` (the
backtracking search), `allocator_results` (results, configs, node selector).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.dra.allocator_requests import (
    AllocationError,
    candidates,
    claim_label,
    missing_device_class,
    prepare,
)
from scheduler.dra.allocator_results import build_allocation
from scheduler.dra.allocator_search import Search, SearchExceeded
from scheduler.dra.allocator_select import Selection
from scheduler.dra.consumable import DeviceUse
from scheduler.dra.selectors import SelectorMatcher
from scheduler.model.allocations import Allocation
from scheduler.model.claims import ResourceClaim
from scheduler.model.device_classes import DeviceClass
from scheduler.model.devices import ResourceSlice
from scheduler.model.node_selection import NodeSelection
from scheduler.model.pools import Pool

__all__ = [
    "CANNOT_ALLOCATE",
    "DEFAULT_MAX_STEPS",
    "INVALID_POOLS",
    "AllocationError",
    "Allocator",
    "NodeAllocation",
    "missing_device_class",
]

CANNOT_ALLOCATE = "cannot allocate all claims"
INVALID_POOLS = "invalid resource pools were encountered"
TIMED_OUT = "node {node}: timed out trying to allocate devices"
DEFAULT_MAX_STEPS = 500_000
"""Search steps (attempts and devices examined) before giving up: about 5 to 10 us each with
plain selectors, so a few seconds at most, within upstream's 10 s filter timeout."""


@dataclass(frozen=True)
class NodeAllocation:
    allocations: tuple[Allocation, ...] | None
    """One per claim, same order; None -> unschedulable here (or `exceeded`)."""
    reason: str = ""
    """Why not (upstream wording), "" when allocated."""
    exceeded: bool = False
    """The step budget ran out: an error of the attempt (retry later), not of the node."""
    steps: int = 0
    """Search steps taken (attempts and candidate devices examined)."""


class Allocator:
    """Allocates claims on one node at a time; holds what is the same for every node."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        in_use: frozenset[tuple[str, str, str]],
        matcher: SelectorMatcher,
        max_steps: int = DEFAULT_MAX_STEPS,
        shared: DeviceUse | None = None,
    ) -> None:
        """`classes` by name; `in_use`: (driver, pool, device) allocated whole to any claim of
        the cluster or in flight; `max_steps`: the search budget per `allocate`; `shared`: the
        shares of devices that allow multiple allocations (its `taken` is not read)."""
        self._classes = classes
        self._in_use = in_use
        self._matcher = matcher
        self._max_steps = max_steps
        self._shared = shared or DeviceUse()

    def allocate(
        self,
        node_name: str,
        labels: Mapping[str, str],
        pools: Sequence[Pool],
        claims: Sequence[ResourceClaim],
        domains: Mapping[tuple[str, str, str], int] | None = None,
        slices: Sequence[ResourceSlice] = (),
    ) -> NodeAllocation:
        """Allocate `claims` (none allocated yet) from `pools` (`gather_pools` for the node).
        `domains`: (driver, pool, device) -> NVLink domain index (-1 or absent: unknown),
        None for upstream's order. `slices`: the ResourceSlices the pools came from, for the
        allocation's node selector (pools keep only slice names; a slice not given counts
        as local to the node). Raises `SelectorError` and `AllocationError`."""
        selection = Selection(
            self._matcher, node_name, labels, tuple(claim_label(claim) for claim in claims)
        )
        requests = prepare(claims, self._classes, pools, selection.selectable)
        use = replace(self._shared, taken=self._in_use)
        search = Search(
            claims, requests, candidates(pools), selection, use, (self._max_steps, domains)
        )
        try:
            found = search.run()
        except (SearchExceeded, RecursionError):
            # A search deeper than Python's stack (hundreds of devices in one attempt) is
            # reported like a spent budget: an error of the attempt, never a wrong answer.
            reason = TIMED_OUT.format(node=node_name)
            return NodeAllocation(None, reason, exceeded=True, steps=search.steps)
        if not found:
            reason = INVALID_POOLS if any(pool.invalid for pool in pools) else CANNOT_ALLOCATE
            return NodeAllocation(None, reason, steps=search.steps)
        selections = _slice_selections(slices)
        allocations = tuple(
            build_allocation(
                claim,
                search.results[index],
                search.chosen_alternatives(index),
                node_name,
                selections,
            )
            for index, claim in enumerate(claims)
        )
        return NodeAllocation(allocations, steps=search.steps)


def _slice_selections(slices: Sequence[ResourceSlice]) -> dict[str, NodeSelection]:
    return {resource_slice.name: resource_slice.node_selection for resource_slice in slices}
