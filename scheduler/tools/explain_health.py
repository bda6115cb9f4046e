"""GPU health for `gpu-scheduler explain`: the sick GPUs the daemon would see now.

With `health.enabled` and `reclaim.prometheusUrl` set, `explain --pod` sends the daemon's one
health query (`reclaim.health.read_health`) and records the verdicts in its cache the way the
daemon does (`scheduler.state.gpu_health.record_verdicts`), so rejections name the sick GPUs
and each row lists them (`unhealthy_gpus`). Prometheus unreachable: a one-line note on stderr
and no GPU counts as sick. Offline (`--pod-file`) nothing is queried.
"""

from __future__ import annotations

import sys

from reclaim.health import GpuRef, Sickness
from reclaim.prometheus import PrometheusQueryFailed
from scheduler.config import SchedulerConfig


async def read_sick_gpus(settings: SchedulerConfig) -> dict[GpuRef, Sickness]:
    """The sick GPUs now; {} when health is off, no Prometheus is configured or it fails."""
    from scheduler.core.health_task import health_source

    source = health_source(settings)
    if source is None:
        return {}
    try:
        return await source.sick_gpus()
    except PrometheusQueryFailed as error:
        print(f"note: GPU health not read ({error}); no GPU counts as sick", file=sys.stderr)
        return {}
    finally:
        await source.close()


def unhealthy_note(unhealthy: dict[str, str]) -> str:
    """The table's note for a node with sick GPUs: "unhealthy GPUs (not chosen): 3 XID 79"."""
    listed = ", ".join(f"{index} {why}" for index, why in unhealthy.items())
    return f"unhealthy GPUs (not chosen): {listed}"
