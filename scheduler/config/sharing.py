"""The `sharing` section: GPUs the NVIDIA device plugin shares by time-slicing or MPS.

What the scheduler reads from the nodes themselves (replicas per GPU, the strategy, the shared
resource name) is in `scheduler.model.gpu_sharing`; these settings say what it cannot read
there: where to put replicas, and how the device plugin treats a request for more than one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.errors import Invalid
from scheduler.config.readers import boolean, number, show
from scheduler.config.tree import check_settings, reads
from topology.replicas import PACK, POLICIES


def _placement(value: object) -> str:
    if isinstance(value, str) and value in POLICIES:
        return value
    raise Invalid(f"must be one of {', '.join(POLICIES)}, got {show(value)}")


@dataclass(frozen=True, slots=True)
class SharingConfig:
    """Time-sliced and MPS GPUs (see docs/sharing.md)."""

    time_sliced_placement: str = field(default=PACK, metadata=reads(_placement))
    """pack: a replica goes to the physical GPU with the most replicas taken that still has
    one free, on the node with the most partly used GPUs, keeping whole GPUs free; spread: to
    the GPU with the fewest replicas taken, on the node with the most whole GPUs free."""
    weight: float = field(default=10.0, metadata=reads(number(minimum=0.0)))
    """Multiplier of the GpuSharing score (0..100 points) among the node scores; 0 leaves the
    node to the other scores (the GPU inside it is still chosen by the placement)."""
    fail_requests_greater_than_one: bool = field(default=False, metadata=reads(boolean))
    """The device plugin's `sharing.timeSlicing.failRequestsGreaterThanOne` on the time-slicing
    nodes: pods asking for more than one replica do not fit there (the kubelet would fail them
    at admission). MPS nodes always refuse them (the plugin's default for MPS)."""

    def __post_init__(self) -> None:
        check_settings(self)
