"""MIG profiles advertised in node capacity, and free MIG instances as a (nodes, profiles) array.

With the NVIDIA device plugin's `mixed` strategy a node advertises one extended resource per MIG
profile, e.g. `nvidia.com/mig-1g.18gb: 7` or `nvidia.com/mig-3g.71gb: 2`. A profile name reads
`<g>g.<mem>gb[<extension>]`: `g` compute slices (1, 2, 3, 4 or 7 on A100/H100/H200-class GPUs),
`mem` GB of memory, and an optional media extension such as `+me` (the instance owns the media
engines), `+me.all`, `+gfx` or `-me`.

Keys that do not start with `nvidia.com/mig-` are not MIG resources and are ignored. Keys that do
start with it but do not follow the grammar raise `TopologyError` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.domains import TopologyError
from topology.text import quote

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""Prefix of every MIG extended resource."""
VALID_COMPUTE_SLICES = frozenset({1, 2, 3, 4, 7})
"""Compute-slice counts a MIG profile can have."""
MAX_NUMBER_DIGITS = 4
"""Longest number accepted for slices or memory in a profile name."""
MAX_QUANTITY_DIGITS = 9
"""Longest integer accepted for a resource quantity."""

_PROFILE_RE = re.compile(
    rf"^([0-9]{{1,{MAX_NUMBER_DIGITS}}})g\.([0-9]{{1,{MAX_NUMBER_DIGITS}}})gb"
    r"((?:\+[a-z]+(?:\.[a-z]+)?)|-me)?$"
)
_QUANTITY_RE = re.compile(rf"^[0-9]{{1,{MAX_QUANTITY_DIGITS}}}$")


@dataclass(frozen=True, slots=True, order=True)
class MigProfile:
    """One MIG profile, e.g. `nvidia.com/mig-1g.18gb+me` -> (1, 18, "+me").

    `compute_slices` is in `VALID_COMPUTE_SLICES`, `memory_gb >= 1`, `extension` is "" or the
    media extension as written (`+me`, `+me.all`, `+gfx`, `-me`).
    """

    compute_slices: int
    memory_gb: int
    extension: str = ""

    @property
    def name(self) -> str:
        """Profile name as nvidia-smi prints it, e.g. `1g.18gb+me`."""
        return f"{self.compute_slices}g.{self.memory_gb}gb{self.extension}"

    @property
    def resource_key(self) -> str:
        """Extended resource name, e.g. `nvidia.com/mig-1g.18gb+me`."""
        return f"{MIG_RESOURCE_PREFIX}{self.name}"


def is_mig_resource(key: str) -> bool:
    """Whether `key` names a MIG extended resource (by prefix only)."""
    return key.startswith(MIG_RESOURCE_PREFIX)


def parse_mig_profile(resource_key: str) -> MigProfile:
    """Parse a MIG resource key such as `nvidia.com/mig-3g.71gb`.

    Raises `TopologyError` naming the key if it lacks the `nvidia.com/mig-` prefix, does not read
    `<g>g.<mem>gb[<extension>]`, has a compute-slice count outside `VALID_COMPUTE_SLICES`, or has
    zero memory.
    """
    if not is_mig_resource(resource_key):
        raise TopologyError(f"resource {quote(resource_key)} is not a MIG resource")
    match = _PROFILE_RE.match(resource_key[len(MIG_RESOURCE_PREFIX) :])
    if match is None:
        raise TopologyError(
            f"resource {quote(resource_key)}: MIG profile is not <g>g.<mem>gb[+ext], e.g. 1g.18gb"
        )
    slices, memory = int(match.group(1)), int(match.group(2))
    if slices not in VALID_COMPUTE_SLICES:
        allowed = ", ".join(str(s) for s in sorted(VALID_COMPUTE_SLICES))
        raise TopologyError(
            f"resource {quote(resource_key)}: {slices} compute slices is not one of {allowed}"
        )
    if memory < 1:
        raise TopologyError(f"resource {quote(resource_key)}: MIG profile has no memory")
    return MigProfile(slices, memory, match.group(3) or "")


def _quantity(resource_key: str, value: int | str) -> int:
    """A whole, non-negative resource count below 10**MAX_QUANTITY_DIGITS from an int or a
    decimal string; `TopologyError` for anything else (a float, a huge int ...)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TopologyError(
            f"resource {quote(resource_key)}: quantity {quote(value)} is not a count"
        )
    if isinstance(value, int):
        count = value
    elif _QUANTITY_RE.match(value.strip()):
        count = int(value.strip())
    else:
        raise TopologyError(
            f"resource {quote(resource_key)}: quantity {quote(value)} is not a count"
        )
    if count < 0:
        raise TopologyError(f"resource {quote(resource_key)}: quantity {quote(count)} is negative")
    if count >= 10**MAX_QUANTITY_DIGITS:
        raise TopologyError(f"resource {quote(resource_key)}: quantity {quote(count)} is too large")
    return count


@dataclass(frozen=True, slots=True, eq=False)
class MigArrays:
    """MIG instances per node and profile.

    `profiles[p]` names column `p` of both arrays; profiles are sorted by (slices, memory,
    extension). `capacity` and `free` are int64 of shape (nodes, profiles); `free` is
    `capacity - requested`, floored at 0.
    """

    profiles: tuple[MigProfile, ...]
    capacity: npt.NDArray[np.int64]
    free: npt.NDArray[np.int64]


def mig_arrays(
    capacities: Sequence[Mapping[str, int | str]],
    requested: Sequence[Mapping[str, int]],
    profiles: Sequence[MigProfile] | None = None,
) -> MigArrays:
    """Free MIG instances of every node, as a (nodes, profiles) array.

    `capacities[n]` is node n's capacity (or allocatable) map; non-MIG keys are ignored.
    `requested[n]` maps MIG resource keys to the instances that pods on node n request; it must
    have one entry per node. `profiles` fixes the columns; by default they are the sorted union
    of the profiles found in `capacities` (a profile a node lacks counts 0 there). Requests for a
    profile outside the columns are ignored. Raises `TopologyError` for malformed MIG keys or
    quantities, and `ValueError` if the two sequences differ in length.
    """
    if len(capacities) != len(requested):
        raise ValueError(f"{len(capacities)} capacity maps but {len(requested)} request maps")
    parsed: list[dict[MigProfile, int]] = []
    for capacity in capacities:
        node: dict[MigProfile, int] = {}
        for key, value in capacity.items():
            if is_mig_resource(key):
                node[parse_mig_profile(key)] = _quantity(key, value)
        parsed.append(node)
    columns = tuple(sorted({p for node in parsed for p in node} if profiles is None else profiles))
    column_of = {profile: index for index, profile in enumerate(columns)}
    capacity_array = np.zeros((len(parsed), len(columns)), dtype=np.int64)  # (nodes, profiles)
    requested_array = np.zeros_like(capacity_array)  # (nodes, profiles)
    for row, (node, asked) in enumerate(zip(parsed, requested, strict=True)):
        for profile, count in node.items():
            if profile in column_of:
                capacity_array[row, column_of[profile]] = count
        for key, count in asked.items():
            profile = parse_mig_profile(key)
            if profile in column_of:
                requested_array[row, column_of[profile]] += _quantity(key, count)
    free = np.maximum(capacity_array - requested_array, 0)  # (nodes, profiles)
    return MigArrays(columns, capacity_array, free)
