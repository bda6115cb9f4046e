"""The `health` section: GPUs the scheduler never chooses because dcgm-exporter reports them sick
(a fatal Xid, uncorrectable ECC errors, a failed row remapping; see `reclaim.health`). It reads
the Prometheus of `reclaim.prometheusUrl`; without that URL no GPU is judged."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config.errors import Invalid
from scheduler.config.readers import boolean, number, show
from scheduler.config.tree import check_settings, reads

DEFAULT_FATAL_XIDS: tuple[int, ...] = (48, 63, 64, 74, 79, 95, 109, 119, 120, 140)
"""The same codes as `reclaim.health.DEFAULT_FATAL_XIDS` (a test keeps them equal; this
package imports nothing of `reclaim`)."""
MAX_XID = 65535


def _xid_list(value: object) -> tuple[int, ...]:
    """A list of Xid codes (integers 1..65535), sorted and without repeats; may be empty."""
    if not isinstance(value, list | tuple):
        raise Invalid(f"must be a list of Xid codes (integers), got {show(value)}")
    codes: set[int] = set()
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_XID:
            raise Invalid(f"must hold Xid codes, integers 1..{MAX_XID}, got {show(item)}")
        codes.add(item)
    return tuple(sorted(codes))


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """GPU health from dcgm-exporter's error series; see docs/health.md."""

    enabled: bool = field(default=True, metadata=reads(boolean))
    """Judge GPUs every `periodSeconds` and keep sick ones out of every choice."""
    fatal_xids: tuple[int, ...] = field(default=DEFAULT_FATAL_XIDS, metadata=reads(_xid_list))
    """Xid codes that make a GPU sick (default: those NVIDIA's Xid catalog resolves with a GPU
    reset or more; see docs/health.md)."""
    lookback_seconds: float = field(default=600.0, metadata=reads(number(minimum=1.0)))
    """A signal seen within this window keeps the GPU sick; it recovers once the signal stayed
    clear this long."""
    period_seconds: float = field(default=30.0, metadata=reads(number(minimum=1.0)))
    """How often the one health query is sent."""
    write_device_taint_rules: bool = field(default=False, metadata=reads(boolean))
    """The leader also writes a DeviceTaintRule (effect NoSchedule, key
    `gpu-scheduler.io/unhealthy`) for every sick GPU that is a DRA device, and deletes it when
    the GPU recovers, so other schedulers avoid it too."""

    def __post_init__(self) -> None:
        check_settings(self)
