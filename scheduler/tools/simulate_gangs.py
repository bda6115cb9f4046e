"""`gpu-scheduler simulate --gangs`: gangs placed all-or-nothing, against placing them pod by pod.

    gpu-scheduler simulate --nodes NODES --gangs GANGS.yaml [--policy P1,P2,...] [--seed 0]
    gpu-scheduler simulate --nodes NODES --random-gangs N [--seed 0] [--gang-topology-key KEY]

The workload is a list of gangs (`TraceGang`: members, GPUs per member, minCount, an optional
topology key, arrival time and run time), read from YAML (`read_gangs`) or drawn by a generator
seeded with `--seed` (`random_gangs`). Time moves from event to event (arrivals, gang ends); at
each event every waiting gang is tried in arrival order:

- `gpu-scheduler`: the daemon's gang cycle, `scheduler.gangs.planning.plan_gang` with the daemon's
  framework: at least minCount members placed at once (all that fit, up to every member), or
  none; members already placed count and pin the topology value. A started gang's remaining
  members are tried again at later events.
- `pod-by-pod` (gpu-scheduler's framework) and the baselines of `simulate_policies`
  (`least-allocated`, ...): each member placed on its own as soon as it fits, as a scheduler
  without gang support does; the topology key is not known to them. Members placed before the
  gang has minCount of them hold their GPUs while they wait.

A gang starts when minCount of its members are placed, runs `duration` seconds, then all its
members leave. The run ends when no event is left; a gang that never started is stuck (with a
partial placement, pod by pod, its members hold their GPUs for ever). Every policy sees the same
gangs; GPU indices come from `scheduler.core.placement.place` (pod by pod) or the plan (gangs).

Reported per policy (`GangResult.as_json`):

- `partial_gpu_seconds`: GPU-seconds held by members of gangs that have some but fewer than
  minCount members placed (0 for gpu-scheduler by construction); `partial_gangs_at_end`,
  `partial_gpus_at_end`: stuck gangs holding GPUs when the run ends;
- `gangs_started`, `gangs_stuck`; `wait_p50_s` / `wait_p99_s`: arrival to start of the started
  gangs (numpy's linear percentile);
- `idle_while_waiting_gpu_seconds`: unallocated GPU-seconds while at least one gang waits;
- `gangs_one_node_pct`: started gangs whose members all share one node (among gangs whose GPUs
  fit one node of the cluster); `members_one_domain_pct`: placed multi-GPU members whose GPUs lie
  inside one NVLink domain;
- `gpu_busy_pct`: GPU-seconds of started gangs over the cluster's GPU-seconds until the end;
  `makespan_s`: the time of the last event.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.config import SchedulerConfig
from scheduler.core.placement import place
from scheduler.framework.runtime import NO_NODE, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.gangs.planning import plan_gang
from scheduler.model.objects import NodeInfo, PodInfo, parse_pod
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache
from scheduler.tools.simulate_legend import GANG_COLUMNS, legend_lines
from scheduler.tools.simulate_policies import GPU_SCHEDULER, POLICIES, gpu_scheduler_framework
from scheduler.tools.simulate_trace import (
    TraceError,
    TracePod,
    pod_object,
    yaml_count,
    yaml_entries,
    yaml_quantity,
    yaml_text,
)
from topology.text import clip, quote

JsonObject = dict[str, Any]

POD_BY_POD = "pod-by-pod"
GANG_POLICIES = (GPU_SCHEDULER, POD_BY_POD, *(p for p in POLICIES if p != GPU_SCHEDULER))
"""Policies of a gang run: gpu-scheduler places gangs whole; every other one pod by pod."""
DEFAULT_GANG_POLICIES = (GPU_SCHEDULER, POD_BY_POD)
MAX_COUNT = 10_000
"""Largest `count` of one gang entry, and of `--random-gangs`."""
MAX_MEMBERS = 1_000
MAX_TOTAL_MEMBERS = 200_000
"""Largest number of member pods in one workload (all gangs, all copies)."""
MAX_SECONDS = 10**9
MULTI_GPU = 2

RANDOM_MEMBERS = (2, 4, 8, 16)
RANDOM_GPUS = (1, 2, 4, 8)
RANDOM_DURATION_S = (300, 3600)
"""Run time of a generated gang: uniform in [low, high) seconds."""
RANDOM_INTERVAL_S = 120.0
"""Mean time between generated arrivals (exponential)."""
RANDOM_TOPOLOGY_SHARE = 1 / 3
"""Share of generated gangs that get the topology key, when one is given."""


@dataclass(frozen=True)
class TraceGang:
    """One gang of the input: `members` pods of `gpus` GPUs (and `cpu`, `memory` each)."""

    name: str
    members: int
    gpus: int
    min_count: int
    duration_s: float
    arrival_s: float = 0.0
    topology_key: str = ""
    cpu: str = "1"
    memory: str = "1Gi"


# -- input ---------------------------------------------------------------------------------


def _seconds(entry: Mapping[str, Any], name: str, where: str, default: float | None) -> float:
    value = entry.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{where}: {name} must be a number of seconds, got {quote(value)}")
    if not 0 <= value <= MAX_SECONDS:
        raise TraceError(f"{where}: {name} must be between 0 and {MAX_SECONDS}, got {value}")
    return float(value)


def _bounded(entry: Mapping[str, Any], name: str, where: str, low: int, high: int) -> int:
    value = yaml_count(entry, name, where)
    if not low <= value <= high:
        raise TraceError(f"{where}: {name} must be between {low} and {high}, got {value}")
    return value


def read_gangs(path: Path) -> list[TraceGang]:
    """Gangs listed under `gangs:` in a YAML file; `TraceError` naming the entry and field.

    gangs:
      - name: ddp            # copies are named ddp-0, ddp-1, ... when count > 1
        members: 4
        gpus: 8              # per member
        min_count: 4         # optional: default every member
        duration: 600        # seconds the gang runs once started
        arrival: 0           # optional: seconds, default 0
        count: 2             # optional: copies, arriving `every` seconds apart
        every: 60            # optional, default 0
        topology_key: rack   # optional: all members on nodes with one value of this label
        cpu: "8"             # optional, per member (default 1)
        memory: 64Gi         # optional, per member (default 1Gi)
    """
    gangs: list[TraceGang] = []
    total = 0
    try:
        entries = yaml_entries(path, "gangs")
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror or error}") from error
    for where, entry in entries:
        name = yaml_text(entry, "name", where)
        members = _bounded(entry, "members", where, 1, MAX_MEMBERS)
        min_count = _bounded({"min_count": members, **entry}, "min_count", where, 1, members)
        count = _bounded({"count": 1, **entry}, "count", where, 1, MAX_COUNT)
        arrival = _seconds(entry, "arrival", where, 0.0)
        every = _seconds(entry, "every", where, 0.0)
        key = entry.get("topology_key", "")
        if not isinstance(key, str):
            raise TraceError(f"{where}: topology_key must be a label key, got {quote(key)}")
        total += members * count
        if total > MAX_TOTAL_MEMBERS:
            raise TraceError(
                f"{where}: more than {MAX_TOTAL_MEMBERS} member pods in all (members x count)"
            )
        for copy in range(count):
            gangs.append(
                TraceGang(
                    name=f"{name}-{copy}" if count > 1 else name,
                    members=members,
                    gpus=yaml_count(entry, "gpus", where),
                    min_count=min_count,
                    duration_s=_seconds(entry, "duration", where, None),
                    arrival_s=arrival + copy * every,
                    topology_key=key,
                    cpu=yaml_quantity({"cpu": "1", **entry}, "cpu", where),
                    memory=yaml_quantity({"memory": "1Gi", **entry}, "memory", where),
                )
            )
    names = [g.name for g in gangs]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise TraceError(f"{path}: gang {quote(twice)} is listed twice")
    return gangs


def random_gangs(
    count: int, seed: int, nodes: Sequence[NodeInfo], topology_key: str = ""
) -> list[TraceGang]:
    """`count` gangs drawn by a generator seeded with `seed`: `RANDOM_MEMBERS` members of
    `RANDOM_GPUS` GPUs (sizes larger than the largest node left out; members cut so the gang
    fits the empty cluster's GPUs), all members as minCount, run times in `RANDOM_DURATION_S`,
    exponential arrival gaps of mean `RANDOM_INTERVAL_S`; each gets `topology_key` (if given)
    with probability `RANDOM_TOPOLOGY_SHARE`."""
    if not 0 < count <= MAX_COUNT:
        raise TraceError(f"--random-gangs must be between 1 and {MAX_COUNT}, got {count}")
    largest = max((int(n.allocatable[GPU]) for n in nodes), default=0)
    sizes = [g for g in RANDOM_GPUS if g <= largest]
    if not sizes:
        raise TraceError("--random-gangs needs nodes with GPUs")
    rng = np.random.default_rng(seed)
    gangs = []
    arrival = 0.0
    for index in range(count):
        gpus = int(rng.choice(sizes))
        members = int(rng.choice(RANDOM_MEMBERS))
        slots = sum(int(n.allocatable[GPU]) // gpus for n in nodes)  # members that fit at all
        members = max(1, min(members, slots))
        with_key = bool(topology_key) and float(rng.random()) < RANDOM_TOPOLOGY_SHARE
        gangs.append(
            TraceGang(
                name=f"gang-{index}",
                members=members,
                gpus=gpus,
                min_count=members,
                duration_s=float(rng.integers(*RANDOM_DURATION_S)),
                arrival_s=round(arrival, 3),
                topology_key=topology_key if with_key else "",
            )
        )
        arrival += float(rng.exponential(RANDOM_INTERVAL_S))
    return gangs


def member_pods(gang: TraceGang) -> list[PodInfo]:
    """The gang's pending member pods, named `<gang>-m<index>`, pointing at PodGroup `gang`."""
    pods = []
    for index in range(gang.members):
        obj = pod_object(TracePod(f"{gang.name}-m{index}", gang.cpu, gang.memory, gang.gpus))
        obj["spec"]["schedulingGroup"] = {"podGroupName": gang.name}
        info = parse_pod(obj)
        if info.errors:
            problems = "; ".join(str(e) for e in info.errors)
            raise TraceError(f"gang {clip(gang.name)}: {clip(problems, 400)}")
        pods.append(info)
    return pods


# -- one policy ----------------------------------------------------------------------------


@dataclass
class _Running:
    """A gang during the run."""

    gang: TraceGang
    pods: list[PodInfo]
    placed: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    """Member key -> (node, GPUs)."""
    started_at: float | None = None

    @property
    def held_gpus(self) -> int:
        return self.gang.gpus * len(self.placed)

    @property
    def partial(self) -> bool:
        return self.started_at is None and 0 < len(self.placed) < self.gang.min_count


@dataclass
class GangResult:
    """Counters of one policy's run; `as_json` gives the reported figures."""

    policy: str
    gangs: int = 0
    gangs_started: int = 0
    gangs_stuck: int = 0
    partial_gpu_seconds: float = 0.0
    partial_gangs_at_end: int = 0
    partial_gpus_at_end: int = 0
    idle_while_waiting_gpu_seconds: float = 0.0
    busy_gpu_seconds: float = 0.0
    gpus_total: int = 0
    makespan_s: float = 0.0
    waits: list[float] = field(default_factory=list)
    one_node: int = 0
    one_node_possible: int = 0
    multi_gpu_members: int = 0
    one_domain_members: int = 0
    wall_s: float = 0.0

    def as_json(self) -> JsonObject:
        def pct(part: float, whole: float) -> float | None:
            return round(100.0 * part / whole, 2) if whole else None

        waits = np.asarray(self.waits, dtype=np.float64)  # waits: (started,)
        return {
            "policy": self.policy,
            "gangs": self.gangs,
            "gangs_started": self.gangs_started,
            "gangs_stuck": self.gangs_stuck,
            "partial_gpu_seconds": round(self.partial_gpu_seconds, 1),
            "partial_gangs_at_end": self.partial_gangs_at_end,
            "partial_gpus_at_end": self.partial_gpus_at_end,
            "wait_p50_s": round(float(np.percentile(waits, 50)), 1) if waits.size else None,
            "wait_p99_s": round(float(np.percentile(waits, 99)), 1) if waits.size else None,
            "idle_while_waiting_gpu_seconds": round(self.idle_while_waiting_gpu_seconds, 1),
            "gangs_one_node_pct": pct(self.one_node, self.one_node_possible),
            "members_one_domain_pct": pct(self.one_domain_members, self.multi_gpu_members),
            "gpu_busy_pct": pct(self.busy_gpu_seconds, self.gpus_total * self.makespan_s),
            "makespan_s": round(self.makespan_s, 1),
            "wall_s": round(self.wall_s, 3),
        }


def _one_domain(node: NodeInfo, gpus: tuple[int, ...]) -> bool:
    ids = node.topology.gpu_domain_ids()
    return len({ids[g] for g in gpus}) == 1


def _try_gang(cache: ClusterCache, framework: Framework, run: _Running) -> None:
    """gpu-scheduler: the daemon's gang cycle on the members not placed yet."""
    pending = [p for p in run.pods if p.key not in run.placed]
    if not pending:
        return
    pinned: set[str] = set()
    key = run.gang.topology_key
    for node, _ in run.placed.values():
        value = cache.nodes[node].labels.get(key) if key else None
        if value is not None:
            pinned.add(value)
    need = max(run.gang.min_count - len(run.placed), 0)
    plan = plan_gang(cache, framework, pending, need, key, pinned)
    if plan.fits:  # the placements stay assumed in the cache
        for member in plan.placed:
            run.placed[member.pod.key] = (member.node, member.gpus)


def _try_pods(cache: ClusterCache, framework: Framework, run: _Running) -> None:
    """Pod by pod: each member not placed yet goes wherever it fits now, on its own."""
    snapshot = Snapshot(cache)
    for pod in run.pods:
        if pod.key in run.placed:
            continue
        evaluation = framework.evaluate(pod, snapshot)
        if evaluation.chosen == NO_NODE:
            continue
        placement = place(cache, pod, evaluation)
        cache.assume(pod, placement.node, placement.gpus)
        run.placed[pod.key] = (placement.node, placement.gpus)


def simulate_gang_policy(
    policy: str, framework: Framework, nodes: Sequence[NodeInfo], gangs: Sequence[TraceGang]
) -> GangResult:
    """Run `gangs` on a fresh cache of `nodes` (see the module docstring)."""
    started = time.perf_counter()
    result = GangResult(policy, gangs=len(gangs))
    cache = ClusterCache()
    for node in nodes:
        cache.add_or_update_node(node)
    result.gpus_total = sum(int(n.allocatable[GPU]) for n in nodes)
    largest = max((int(n.allocatable[GPU]) for n in nodes), default=0)
    gang_wise = policy == GPU_SCHEDULER
    arrivals = sorted(
        (_Running(g, member_pods(g)) for g in gangs), key=lambda r: (r.gang.arrival_s, r.gang.name)
    )
    waiting: list[_Running] = []  # arrived, not started
    running: list[_Running] = []  # started, not ended
    now = 0.0
    next_arrival = 0
    while next_arrival < len(arrivals) or running:
        ends = [r.started_at + r.gang.duration_s for r in running if r.started_at is not None]
        upcoming = arrivals[next_arrival].gang.arrival_s if next_arrival < len(arrivals) else None
        at = min([*ends, *([upcoming] if upcoming is not None else [])])
        _account(result, cache, waiting, running, at - now)
        now = at
        for run in [r for r in running if r.started_at is not None]:
            if _end(run) <= now:
                running.remove(run)
                for key in run.placed:
                    cache.remove_pod(key)
        while next_arrival < len(arrivals) and arrivals[next_arrival].gang.arrival_s <= now:
            waiting.append(arrivals[next_arrival])
            next_arrival += 1
        for run in [*waiting, *running]:
            before = set(run.placed)
            if gang_wise:
                _try_gang(cache, framework, run)
            else:
                _try_pods(cache, framework, run)
            for key in set(run.placed) - before:
                host, gpus = run.placed[key]
                if run.gang.gpus >= MULTI_GPU:
                    result.multi_gpu_members += 1
                    result.one_domain_members += _one_domain(cache.nodes[host], gpus)
            if run.started_at is None and len(run.placed) >= run.gang.min_count:
                run.started_at = now
                waiting.remove(run)
                running.append(run)
                result.gangs_started += 1
                result.waits.append(now - run.gang.arrival_s)
                if run.gang.gpus * run.gang.members <= largest:
                    result.one_node_possible += 1
                    result.one_node += len({n for n, _ in run.placed.values()}) == 1
    result.makespan_s = now
    result.gangs_stuck = len(waiting)
    stuck_partial = [r for r in waiting if r.partial]
    result.partial_gangs_at_end = len(stuck_partial)
    result.partial_gpus_at_end = sum(r.held_gpus for r in stuck_partial)
    result.wall_s = time.perf_counter() - started
    return result


def _end(run: _Running) -> float:
    """When a started gang ends."""
    assert run.started_at is not None
    return run.started_at + run.gang.duration_s


def _account(
    result: GangResult,
    cache: ClusterCache,
    waiting: Sequence[_Running],
    running: Sequence[_Running],
    span: float,
) -> None:
    """Add `span` seconds of the current state to the GPU-second counters."""
    if span <= 0:
        return
    result.partial_gpu_seconds += span * sum(r.held_gpus for r in waiting if r.partial)
    result.busy_gpu_seconds += span * sum(r.held_gpus for r in running)
    if waiting:
        held = sum(r.held_gpus for r in [*waiting, *running])
        result.idle_while_waiting_gpu_seconds += span * max(result.gpus_total - held, 0)


def simulate_gangs(
    nodes: Sequence[NodeInfo],
    gangs: Sequence[TraceGang],
    policies: Sequence[str],
    *,
    seed: int = 0,
    settings: SchedulerConfig | None = None,
) -> list[GangResult]:
    """Run each of `policies` (names in `GANG_POLICIES`; `ValueError` otherwise) on `gangs`."""
    unknown = [p for p in policies if p not in GANG_POLICIES]
    if unknown:
        known = ", ".join(GANG_POLICIES)
        raise ValueError(f"unknown policy {', '.join(unknown)} for gangs (known: {known})")
    config = settings or SchedulerConfig()
    results = []
    for name in policies:
        build = gpu_scheduler_framework if name == POD_BY_POD else POLICIES[name]
        results.append(simulate_gang_policy(name, build(config, seed), nodes, gangs))
    return results


# -- output --------------------------------------------------------------------------------


def _cell(value: object, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def _seconds_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_gang_table(
    nodes_path: Path, source: str, gangs: Sequence[TraceGang], results: Sequence[GangResult]
) -> str:
    """The header lines and one row per policy."""
    gpus = results[0].gpus_total if results else 0
    demand = sum(g.members * g.gpus for g in gangs)
    keyed = sum(1 for g in gangs if g.topology_key)
    lines = [
        f"nodes: {nodes_path} ({gpus} GPUs)",
        f"gangs: {source} ({len(gangs)} gangs, {sum(g.members for g in gangs)} members, "
        f"{demand} GPUs in all, {keyed} with a topology key); arrivals in time, each gang runs "
        "its duration once minCount members are placed",
        "partial GPU-s: GPU-seconds held by gangs with fewer than minCount members placed",
        "",
    ]
    header = [
        "POLICY",
        "STARTED",
        "STUCK",
        "PARTIAL_GPU_S",
        "PARTIAL_AT_END",
        "WAIT_P50_S",
        "WAIT_P99_S",
        "IDLE_WHILE_WAITING_GPU_S",
        "ONE_NODE",
        "ONE_DOMAIN",
        "GPU_BUSY",
        "MAKESPAN_S",
    ]
    table = [header]
    for result in results:
        row = result.as_json()
        table.append(
            [
                row["policy"],
                f"{row['gangs_started']}/{row['gangs']}",
                str(row["gangs_stuck"]),
                f"{row['partial_gpu_seconds']:.0f}",
                f"{row['partial_gangs_at_end']} ({row['partial_gpus_at_end']} GPUs)",
                _seconds_cell(row["wait_p50_s"]),
                _seconds_cell(row["wait_p99_s"]),
                f"{row['idle_while_waiting_gpu_seconds']:.0f}",
                _cell(row["gangs_one_node_pct"], " %"),
                _cell(row["members_one_domain_pct"], " %"),
                _cell(row["gpu_busy_pct"], " %"),
                f"{row['makespan_s']:.0f}",
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    return "\n".join([*lines, "", *legend_lines(GANG_COLUMNS)])
