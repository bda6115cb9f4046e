"""The NVLink-aware order in which the search tries a request's devices.

The search is complete: whatever the order, it finds a solution when one exists. The order only
decides which solution comes first. Given the node's devices -> NVLink domain map, a request's
candidates are tried in phases:

1. for each domain with room for the request (at least `count` devices it could use now: not
   in use, matching, not tainted against it), tightest first (fewest such devices, so roomier
   domains stay whole; a domain the claim's earlier requests already use first; for a share of
   a device, a domain already broken, where some device is in use, before a domain that is
   whole; then by domain index), only that domain's devices: a solution found here keeps the
   request in one domain;
2. then every device, domains ordered largest first (most usable devices; the claim's domains
   first; then by index) and devices of an unknown domain (-1 or absent) last, so a request that
   fits no domain spans as few as it can.

Within a domain devices keep the search's order (pool, slice, device). The last phase holds
every candidate, so feasibility is exactly that of the plain order; the earlier phases only
repeat part of the search. Without a map there is one phase, the plain order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from scheduler.dra.allocator_requests import Candidate, DeviceID

UNKNOWN = -1
"""The domain of a device the map does not place."""


def domain_phases(
    candidates: Sequence[Candidate],
    usable: Callable[[Candidate], bool],
    need: int,
    domains: Mapping[DeviceID, int],
    preferred: frozenset[int],
    busy: frozenset[int] | None = None,
) -> tuple[tuple[Candidate, ...], ...]:
    """The candidate lists to search in turn for a request wanting `need` devices; `usable`
    says whether a device could serve it now, `preferred` are the domains the claim already
    uses; `busy`, given for a share, the domains where some device is in use (tried before
    whole domains)."""

    def domain(candidate: Candidate) -> int:
        found = domains.get(candidate.id, UNKNOWN)
        return found if found >= 0 else UNKNOWN

    free = Counter(
        found
        for candidate in candidates
        if (found := domain(candidate)) != UNKNOWN and usable(candidate)
    )
    fitting = sorted(
        (index for index, count in free.items() if count >= need),
        key=lambda index: (
            index not in preferred,
            busy is not None and index not in busy,
            free[index],
            index,
        ),
    )
    phases = [
        tuple(candidate for candidate in candidates if domain(candidate) == index)
        for index in fitting
    ]
    known = sorted(
        {domain(candidate) for candidate in candidates} - {UNKNOWN},
        key=lambda index: (index not in preferred, -free[index], index),
    )
    rank = {index: position for position, index in enumerate(known)}
    phases.append(
        tuple(sorted(candidates, key=lambda candidate: rank.get(domain(candidate), len(rank))))
    )
    return tuple(phases)
