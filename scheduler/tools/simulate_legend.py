"""What the columns of `gpu-scheduler simulate`'s tables mean: the legend printed under each
table and the `--help` epilog, from one list per table so the two never disagree.

`POD_COLUMNS`, `GANG_COLUMNS` and `SHARE_COLUMNS` hold (column, meaning) for the `--pods` table
(`scheduler.tools.simulate.render_table`), the gang table
(`scheduler.tools.simulate_gangs.render_gang_table`) and the `--shares` table
(`scheduler.tools.simulate_share.render_share_table`); the meanings are those of the JSON keys
the module docstrings of `simulate`, `simulate_gangs` and `simulate_share` define.
"""

from __future__ import annotations

from collections.abc import Sequence

POD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("PLACED / SKIPPED", "arrivals placed / that fit on no node (_MULTI_GPU: of 2 or more GPUs)"),
    ("GPUS_UNALLOCATED", "GPUs no placed pod asked for at the end, of all GPUs"),
    (
        "GPUS_STRANDED",
        "free GPUs at the end on nodes that cannot take a pod of the workload's largest GPU "
        "request (too few free GPUs, cpu or memory)",
    ),
    ("MULTI_GPU", "placed pods asking for 2 or more GPUs"),
    ("ONE_DOMAIN", "of those, the share inside one NVLink domain (best GPUs inside the node)"),
    (
        "ONE_DOMAIN_NAIVE",
        "the same if the node's lowest-numbered free GPUs were taken (what a device plugin "
        "blind to NVLink does; for gpu-scheduler equal to ONE_DOMAIN)",
    ),
    (
        "WHEN_POSSIBLE",
        "ONE_DOMAIN among the pods that could have had one domain when they arrived (some "
        "feasible node had a domain with enough free GPUs), 'of N' such pods",
    ),
    ("WALL_S / PODS/S", "time to place every arrival, and arrivals per second"),
)
GANG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("STARTED / STUCK", "gangs that reached minCount members / that never did"),
    ("PARTIAL_GPU_S", "GPU-seconds held by gangs with fewer than minCount members placed"),
    ("PARTIAL_AT_END", "stuck gangs holding GPUs when the run ended (and their GPUs)"),
    ("WAIT_P50_S / WAIT_P99_S", "arrival to start of the started gangs: median, 99th percentile"),
    ("IDLE_WHILE_WAITING_GPU_S", "unallocated GPU-seconds while at least one gang waits"),
    ("ONE_NODE", "started gangs on one node, of those that fit one node"),
    ("ONE_DOMAIN", "placed multi-GPU members whose GPUs lie in one NVLink domain"),
    (
        "GPU_BUSY / MAKESPAN_S",
        "GPU-seconds of started gangs over the cluster's until the end; the last event's time",
    ),
)

SHARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("PLACED / SKIPPED", "arrivals placed / that fit on no node"),
    ("SHARES", "GPU-sharing pods (a fraction of one GPU) placed / skipped"),
    ("WHOLE_GPU", "pods of whole GPUs placed / skipped"),
    ("GPUS_UNALLOCATED", "free GPU at the end, in GPUs (free thousandths / 1000), of all GPUs"),
    (
        "GPUS_FRAGMENTED",
        "of that, the GPU the workload's GPU pods could not use (Weng et al., ATC'23), of all GPUs",
    ),
    ("PARTLY_USED", "GPUs holding shares with room left"),
    ("ONE_DOMAIN", "placed pods of 2 or more GPUs inside one NVLink domain"),
    ("WALL_S / PODS/S", "time to place every arrival, and arrivals per second"),
)


def legend_lines(columns: Sequence[tuple[str, str]]) -> list[str]:
    """`columns:` and one indented `NAME  meaning` line per column, names aligned."""
    width = max(len(name) for name, _ in columns)
    return ["columns:", *(f"  {name.ljust(width)}  {meaning}" for name, meaning in columns)]


def help_epilog() -> str:
    """The `simulate --help` epilog: both legends."""
    pods = "\n".join(legend_lines(POD_COLUMNS)[1:])
    gangs = "\n".join(legend_lines(GANG_COLUMNS)[1:])
    shares = "\n".join(legend_lines(SHARE_COLUMNS)[1:])
    return (
        f"the --pods table's columns:\n{pods}\n\nthe gang table's columns:\n{gangs}\n\n"
        f"the --shares table's columns:\n{shares}"
    )
