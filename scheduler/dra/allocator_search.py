"""The backtracking search of the allocator: claim by claim, request by request, device by
device, the first complete solution wins, as `allocateOne` and `allocateDevice`
(k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/incubating/
allocator_incubating.go) search:

- a request with firstAvailable entries tries them in order; the first entry that leads to a
  complete solution is the one allocated;
- a request for `count` devices tries combinations only (the next device of the same request
  comes after the previous one in the candidate order), so the search is complete without
  trying permutations; a request for all devices takes exactly its precomputed devices;
- a device is taken when it is not in use (taken whole by a claim of the cluster, or for an
  earlier claim or request of this attempt; a request with admin access skips that test except
  for its own claim's devices), the selectors accept it, its capacities fit the request
  (`scheduler.dra.consumable`), its shared counters suffice, its taints are tolerated, and the
  claim's constraints still hold;
- a device that allows multiple allocations (DRAConsumableCapacity) is never taken whole: each
  result on it is a share with a new `shareID` and its `consumedCapacity`, and further requests,
  of this attempt or later ones, may share it while the capacity lasts; its shared counters are
  charged by its first share only (`allocateDevice`'s `skipCounterCheck`);
- a claim never gets more than 32 results: when what is left of a request cannot fit, the
  search backs out of the request at once ("limit"), which lets a firstAvailable request try an
  entry that needs fewer devices.

`Search.steps` counts the work: each attempt (upstream's `allocateOne` invocations) and each
candidate device examined; past `max_steps` the search stops with `SearchExceeded`. Candidate
order is upstream's unless NVLink domains are given (`scheduler.dra.allocator_order`); then a
request first tries the devices already shared where it fits, tightest fit first
(`scheduler.dra.allocator_packing`), and only then untouched ones; and a request that partitions
can serve (MIG placements) tries them first in the fragmentation-aware order of
`scheduler.dra.partitions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum

from scheduler.dra.allocator_constraints import Constraint
from scheduler.dra.allocator_counters import CounterLedger
from scheduler.dra.allocator_order import UNKNOWN, domain_phases
from scheduler.dra.allocator_packing import Shares, packed
from scheduler.dra.allocator_requests import (
    AllocationError,
    Candidate,
    DeviceID,
    RequestData,
    claim_label,
)
from scheduler.dra.allocator_results import Chosen
from scheduler.dra.allocator_select import Selection, taint_prevents
from scheduler.dra.consumable import CapacityError, DeviceUse, new_share_id
from scheduler.dra.partitions import Partitions
from scheduler.model.allocations import MAX_RESULTS
from scheduler.model.claims import ResourceClaim


class SearchExceeded(Exception):
    """The search used its step budget without an answer."""


class Outcome(Enum):
    FOUND = "found"
    NONE = "none"
    LIMIT = "limit"
    """The 32-results limit of a claim was hit: no other device of this request can help."""


class Search:
    """One search over the claims of one attempt on one node."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        requests: tuple[tuple[tuple[RequestData, ...], ...], ...],
        candidates: tuple[Candidate, ...],
        selection: Selection,
        use: DeviceUse,
        limits: tuple[int, Mapping[DeviceID, int] | None],
    ) -> None:
        """`use`: what claims of the cluster and in flight hold; `limits`: the step budget and
        the NVLink domain map (None: upstream's order)."""
        self._claims = claims
        self._requests = requests
        self._candidates = candidates
        self._selection = selection
        self._in_use = use.taken
        self._shares = Shares(use)
        self._shareable = any(c.entry.device.allow_multiple_allocations for c in candidates)
        self._max_steps, self._domains = limits
        self._constraints = [
            [Constraint(spec) for spec in claim.spec.constraints] for claim in claims
        ]
        self._taking: dict[DeviceID, set[int]] = {}
        self._counters = CounterLedger(use.allocated)
        self._partitions = Partitions(candidates) if self._domains is not None else None
        self.results: list[list[Chosen]] = [[] for _ in claims]
        self.selected: dict[tuple[int, int], int] = {}
        """(claim, request) -> index of the firstAvailable entry allocated."""
        self.steps = 0

    def run(self) -> bool:
        """Whether a solution was found (then `results` and `selected` hold it)."""
        return self._one(0, 0, 0, 0, in_entry=False, order=(), start=0) is Outcome.FOUND

    def chosen_alternatives(self, claim_index: int) -> tuple[RequestData, ...]:
        """Per request of the claim, the alternative allocated."""
        return tuple(
            alternatives[self.selected.get((claim_index, request_index), 0)]
            for request_index, alternatives in enumerate(self._requests[claim_index])
        )

    def _one(
        self,
        claim: int,
        request: int,
        sub: int,
        device: int,
        *,
        in_entry: bool,
        order: tuple[Candidate, ...],
        start: int,
    ) -> Outcome:
        """`allocateOne`: find device `device` of entry `sub` of request `request` of claim
        `claim`, trying `order` from `start` (an empty `order`: the request's first device)."""
        self._tick()
        if claim >= len(self._claims):
            return Outcome.FOUND
        if request >= len(self._requests[claim]):
            outcome = self._one(claim + 1, 0, 0, 0, in_entry=False, order=(), start=0)
            return Outcome.NONE if outcome is Outcome.LIMIT else outcome
        alternatives = self._requests[claim][request]
        data = alternatives[sub]
        if not in_entry and data.subrequest:
            return self._entries(claim, request, device, len(alternatives))
        if data.all_mode and not data.all_devices:
            return Outcome.NONE
        if device >= data.num_devices:
            return self._one(claim, request + 1, 0, 0, in_entry=False, order=(), start=0)
        if data.num_devices - device > MAX_RESULTS - len(self.results[claim]):
            return Outcome.LIMIT
        if data.all_mode:
            return self._all(data, device, in_entry)
        if device > 0:
            return self._try(data, device, in_entry, order, start)
        for phase in self._phases(data):
            outcome = self._try(data, device, in_entry, phase, 0)
            if outcome is not Outcome.NONE:
                return outcome
        return Outcome.NONE

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > self._max_steps:
            raise SearchExceeded

    def _entries(self, claim: int, request: int, device: int, count: int) -> Outcome:
        """firstAvailable: each entry in turn; LIMIT only when every entry hit the limit."""
        all_limit = True
        for sub in range(count):
            outcome = self._one(claim, request, sub, device, in_entry=True, order=(), start=0)
            if outcome is Outcome.LIMIT:
                continue
            all_limit = False
            if outcome is Outcome.FOUND:
                self.selected[(claim, request)] = sub
                return outcome
        return Outcome.LIMIT if all_limit else Outcome.NONE

    def _all(self, data: RequestData, device: int, in_entry: bool) -> Outcome:
        """allocationMode All: the next precomputed device or no solution."""
        undo = self._take(data, data.all_devices[device], must=True)
        if undo is None:
            return Outcome.NONE
        outcome = self._one(
            data.claim_index,
            data.request_index,
            data.sub_index,
            device + 1,
            in_entry=in_entry,
            order=(),
            start=0,
        )
        if outcome is not Outcome.FOUND:
            undo()
        return outcome

    def _try(
        self,
        data: RequestData,
        device: int,
        in_entry: bool,
        order: tuple[Candidate, ...],
        start: int,
    ) -> Outcome:
        """Each candidate of `order` from `start` as device `device` of the request."""
        for index in range(start, len(order)):
            self._tick()
            candidate = order[index]
            if not self._free_for(data, candidate):
                continue
            if not self._selection.selectable(data, candidate):
                continue
            if self._capacity_counts(data, candidate) and not self._capacity_fits(
                data, candidate, "checking"
            ):
                continue
            undo = self._take(data, candidate, must=False)
            if undo is None:
                continue
            outcome = self._one(
                data.claim_index,
                data.request_index,
                data.sub_index,
                device + 1,
                in_entry=in_entry,
                order=order,
                start=index + 1,
            )
            if outcome is Outcome.FOUND:
                return outcome
            undo()
            if outcome is Outcome.LIMIT:
                return outcome
        return Outcome.NONE

    def _phases(self, data: RequestData) -> tuple[tuple[Candidate, ...], ...]:
        if self._domains is None:
            return (self._candidates,)
        domains = self._domains
        claim_domains = frozenset(
            domains.get(entry.candidate.id, UNKNOWN) for entry in self.results[data.claim_index]
        ) - {UNKNOWN}

        def serves(candidate: Candidate) -> bool:
            return (
                self._free_for(data, candidate)
                and self._selection.selectable(data, candidate)
                and not taint_prevents(candidate.entry.device, data.spec)
            )

        def untouched(candidate: Candidate) -> bool:
            """Free whole: not in use, and for a shareable device without any share."""
            shareable = candidate.entry.device.allow_multiple_allocations
            return not (shareable and self._shares.in_use(candidate.id)) and serves(candidate)

        busy = None
        if self._shareable and data.spec.capacity_requests:
            busy = frozenset(
                domains.get(candidate.id, UNKNOWN)
                for candidate in self._candidates
                if candidate.id in self._in_use
                or bool(self._taking.get(candidate.id))
                or self._shares.in_use(candidate.id)
            )
        phases = domain_phases(
            self._candidates, untouched, data.num_devices, domains, claim_domains, busy
        )
        if self._shareable:
            first = packed(self._candidates, serves, self._shares, data)
            phases = (first, *phases) if first else phases
        if self._partitions:
            occupied = self._partitions.occupied(self._counters.remaining)
            first = self._partitions.order(self._candidates, serves, occupied)
            phases = (first, *phases) if first else phases
        return phases

    def _free_for(self, data: RequestData, candidate: Candidate) -> bool:
        """The in-use test: admin access only avoids its own claim's devices."""
        taking = self._taking.get(candidate.id)
        if data.spec.admin_access:
            return not taking or data.claim_index not in taking
        return candidate.id not in self._in_use and not taking

    @staticmethod
    def _capacity_counts(data: RequestData, candidate: Candidate) -> bool:
        """Whether capacity can rule the device out: a request for capacity, or a device that
        allows multiple allocations (`Shares.fits` is True for any other)."""
        device = candidate.entry.device
        return bool(data.spec.capacity_requests) or device.allow_multiple_allocations

    def _capacity_fits(self, data: RequestData, candidate: Candidate, verb: str) -> bool:
        """`CmpRequestOverCapacity` for the candidate; an unrepresentable request is an error
        of the attempt."""
        try:
            return self._shares.fits(data, candidate)
        except CapacityError as error:
            raise AllocationError(
                f"claim {claim_label(self._claims[data.claim_index])}, request "
                f"{data.subrequest or data.request}: {verb} capacity for device "
                f"{candidate.name}: {error}"
            ) from error

    def _take(
        self, data: RequestData, candidate: Candidate, *, must: bool
    ) -> Callable[[], None] | None:
        """`allocateDevice`: take the candidate for the request, returning how to give it back;
        None when it cannot be taken."""
        device = candidate.entry.device
        if not self._free_for(data, candidate):
            return None
        shareable = device.allow_multiple_allocations
        counted = bool(device.consumes_counters) and not (
            shareable and self._shares.in_use(candidate.id)
        )
        if counted and not self._counters.reserve(candidate):
            return None
        if taint_prevents(device, data.spec):
            if counted:
                self._counters.release(candidate)
            return None
        constraints = self._constraints[data.claim_index]
        for added, constraint in enumerate(constraints):
            if constraint.add(data.request, data.subrequest, candidate.id[0], device):
                continue
            for earlier in reversed(constraints[:added]):
                earlier.remove(data.request, data.subrequest)
            if counted:
                self._counters.release(candidate)
            if must:
                raise AllocationError(
                    f"claim {claim_label(self._claims[data.claim_index])}, request "
                    f"{data.subrequest or data.request}: cannot add device {candidate.name} "
                    "because a claim constraint would not be satisfied"
                )
            return None
        if self._capacity_counts(data, candidate) and not self._capacity_fits(
            data, candidate, "rechecking"
        ):
            for constraint in reversed(constraints):
                constraint.remove(data.request, data.subrequest)
            if counted:
                self._counters.release(candidate)
            return None
        consumed = self._shares.take(data, candidate) if shareable else {}
        if not shareable:
            self._taking.setdefault(candidate.id, set()).add(data.claim_index)
        results = self.results[data.claim_index]
        results.append(Chosen(data, candidate, new_share_id() if shareable else "", consumed))

        def undo() -> None:
            results.pop()
            if shareable:
                self._shares.give_back(candidate, consumed)
            else:
                self._taking[candidate.id].discard(data.claim_index)
            for constraint in reversed(constraints):
                constraint.remove(data.request, data.subrequest)
            if counted:
                self._counters.release(candidate)

        return undo
