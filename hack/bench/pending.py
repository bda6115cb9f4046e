"""Why a benchmark run left pods pending, pod by pod, next to what the other runs did with them.

`pending_reasons(core, namespace, names)` reads, before a run's pods are deleted, the
PodScheduled=False message of each pod in `names` that no scheduler bound (the message of the
scheduler's last attempt: "0/1000 nodes are available: ..."), or what else is known of it.

`pending_rows(runs, kinds, sizes)` lines up every run's pending pods (pure): per pod its kind in
the pod set (plain, preferred, required, spread, gang), its GPUs, the run's reason, and for every
other run where that pod went (a node name, or "pending"). `reason_counts` groups them by kind and
reason for a summary.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

NO_CONDITION = "no PodScheduled=False condition (never attempted, or attempt in flight)"
PENDING = "pending"
COUNTS = re.compile(r"0/\d+ nodes are available: ")
"""The node total of a FitError message (anywhere in a reason): left out when reasons are
grouped."""


@dataclass(frozen=True)
class RunPlacements:
    """What one run did with the pod set: the node of each bound pod, the reason of each
    pending one."""

    run: str
    nodes: Mapping[str, str]
    reasons: Mapping[str, str]


@dataclass(frozen=True)
class PendingRow:
    """One pod pending in `run`: its kind and GPUs, the run's reason, and where each other run
    placed it (node name or PENDING)."""

    run: str
    pod: str
    kind: str
    gpus: int
    reason: str
    elsewhere: Mapping[str, str]


def scheduled_false_message(pod: Mapping[str, Any]) -> str:
    """The message of the pod's PodScheduled=False condition, prefixed by its reason; or
    NO_CONDITION."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', '')}: {condition.get('message', '')}"
    return NO_CONDITION


async def pending_reasons(
    core: client.CoreV1Api, namespace: str, names: Sequence[str]
) -> dict[str, str]:
    """`scheduled_false_message` of each pod of `names` that is not bound (one list call)."""
    wanted = set(names)
    response: Any = await core.list_namespaced_pod(namespace, _preload_content=False)
    items = json.loads(await response.read())["items"]
    response.release()
    return {
        pod["metadata"]["name"]: scheduled_false_message(pod)
        for pod in items
        if pod["metadata"]["name"] in wanted and not (pod.get("spec") or {}).get("nodeName")
    }


def pending_rows(
    runs: Sequence[RunPlacements], kinds: Mapping[str, str], sizes: Mapping[str, int]
) -> list[PendingRow]:
    """Every run's pending pods, in run order then pod name, each with where the other runs
    placed it."""
    rows: list[PendingRow] = []
    for run in runs:
        for pod in sorted(run.reasons):
            elsewhere = {
                other.run: other.nodes.get(pod, PENDING) for other in runs if other is not run
            }
            rows.append(
                PendingRow(
                    run.run,
                    pod,
                    kinds.get(pod, "plain"),
                    sizes.get(pod, 0),
                    run.reasons[pod],
                    elsewhere,
                )
            )
    return rows


def reason_counts(rows: Sequence[PendingRow], other: str) -> Counter[tuple[str, str, str, bool]]:
    """(run, kind, reason without its node total, whether run `other` bound the pod) -> pods."""
    return Counter(
        (
            row.run,
            row.kind,
            COUNTS.sub("", row.reason),
            row.elsewhere.get(other, PENDING) != PENDING,
        )
        for row in rows
        if row.run != other
    )


def render_pending(rows: Sequence[PendingRow], other: str) -> list[str]:
    """Lines: the pending pods grouped by run, kind and reason (with how many of them run
    `other` bound), then one line per pod with where the other runs placed it."""
    lines = []
    for (run, kind, reason, bound), count in sorted(reason_counts(rows, other).items()):
        theirs = f"bound by {other}" if bound else "pending there too"
        lines.append(f"  {run:<15} {count:>4} {kind:<10} {theirs:<28} {reason[:160]}")
    for row in rows:
        where = ", ".join(f"{run}: {node}" for run, node in row.elsewhere.items())
        lines.append(
            f"  {row.run} {row.pod} {row.kind} {row.gpus} GPUs | {where} | {row.reason[:200]}"
        )
    return lines


@dataclass(frozen=True)
class NodeKind:
    """A node type of the run: its name, GPUs per node and node names."""

    name: str
    gpus: int
    nodes: tuple[str, ...]


def occupancy_lines(
    runs: Sequence[RunPlacements], kinds: Sequence[NodeKind], sizes: Mapping[str, int]
) -> list[str]:
    """Per run and node type at the end of the run: nodes untouched, partly used and full, and
    the GPUs its pods hold by pod size ("8x40" is 40 GPUs held by 8-GPU pods)."""
    lines = []
    for run in runs:
        used: Counter[str] = Counter()
        by_size: dict[str, Counter[int]] = {}
        for pod, node in run.nodes.items():
            used[node] += sizes.get(pod, 0)
            by_size.setdefault(node, Counter())[sizes.get(pod, 0)] += sizes.get(pod, 0)
        for kind in kinds:
            full = sum(1 for n in kind.nodes if used[n] >= kind.gpus)
            empty = sum(1 for n in kind.nodes if used[n] == 0)
            held: Counter[int] = Counter()
            for node in kind.nodes:
                held.update(by_size.get(node, Counter()))
            shares = " ".join(f"{size}x{gpus}" for size, gpus in sorted(held.items()))
            lines.append(
                f"  {run.run:<15} {kind.name:<13} {len(kind.nodes):>5} nodes: {empty:>4} untouched "
                f"{len(kind.nodes) - empty - full:>4} partly used {full:>4} full | GPUs held "
                f"by pod size: {shares}"
            )
    return lines
