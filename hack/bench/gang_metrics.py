"""The gang benchmark's metrics: pure functions over what one run's watch saw.

Times are seconds from the start of the run (the first job's submission), on the benchmark's
monotonic clock; a pod's `bound_s` is when the watch first saw its `spec.nodeName` set and its
`freed_s` when the watch saw it deleted (its GPUs free again). The run ends at `end_s`; what is
still bound or waiting then is cut off there.

For every run (see `summarize`):

- partial GPU-s: GPU-seconds held by members of gangs that were *partially started*: some members
  bound while fewer than minCount were. Any scheduler binds a gang's pods with separate API calls,
  so even an all-at-once placement shows a few milliseconds between its first and last binding;
  a gang whose minCount-th member was bound within `burst_s` of its first counts as started at
  once (0 GPU-s), any other gang counts every GPU of every bound member from its binding until
  the gang reached minCount (or was deleted, or the run ended). `max_spread_s` reports the
  largest first-to-minCount-th spread among gangs started at once, so the allowance is visible;
- gangs started per minute: gangs that reached minCount bound members by `end_s`, per minute of
  the run;
- start p50 / p99: from a gang's submission (its first create request) to its minCount-th bound
  member, over started gangs;
- one domain / node / rack: over the members of started gangs, the share that sit in the gang's
  most used NVLink domain / node / rack (a 4-member gang with 3 members on node A and one on B
  scores 3/4 for one node). A member is in a domain when all its GPUs lie in one NVLink domain of
  its node. The domain share counts only gangs whose members ask at most the largest domain of
  the cluster (an 8-GPU member never fits one domain of 4);
- member in one domain: of the members of started gangs asking 2 GPUs up to the largest domain,
  the share whose own GPUs lie in one NVLink domain (what NCCL inside one pod sees);
- rack-bound honoured: of started gangs with a rack constraint, those whose members are all in
  one rack;
- GPUs idle while gangs wait: the mean number of unallocated GPUs over the time during which at
  least one gang was submitted but not started (allocated = GPUs of bound, not yet deleted pods).

Which GPUs a pod holds: gpu-scheduler writes them on the pod (`gpu-scheduler.io/gpus`);
kube-scheduler chooses a node only, so its pods are given, in the order the watch saw bindings
and deletions, the best GPUs the node has free at that moment (`topology.occupancy.choose_gpus`,
the choice an NVLink-aware device plugin would make). kube-scheduler itself knows nothing of
NVLink domains: its domain share measures how well its node choice leaves a device plugin room.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hack.bench.gang_workload import BenchNode, Job
from topology.occupancy import choose_gpus, parse_gpus_annotation

DEFAULT_BURST_S = 2.0


@dataclass(frozen=True)
class PodOutcome:
    """One pod of a run, as the watch saw it."""

    name: str
    gpus: int
    bound_s: float | None = None
    node: str | None = None
    gpus_annotation: str | None = None
    freed_s: float | None = None


@dataclass(frozen=True)
class JobOutcome:
    """One job of a run: when it was submitted and what became of its pods."""

    job: Job
    created_s: float | None
    """None when the run ended before the job was submitted."""
    pods: tuple[PodOutcome, ...]


@dataclass(frozen=True)
class RunMetrics:
    """One run's numbers (see the module docstring); None where nothing was measured."""

    run: str
    seconds: float
    gangs: int
    gangs_started: int
    singles: int
    singles_bound: int
    partial_gangs: int
    partial_gpu_s: float
    max_spread_s: float | None
    gangs_per_min: float
    start_p50_s: float | None
    start_p99_s: float | None
    one_domain_pct: float | None
    domain_members: int
    member_domain_pct: float | None
    multi_gpu_members: int
    one_node_pct: float | None
    one_rack_pct: float | None
    rack_bound_started: int
    rack_bound_in_one_rack: int
    idle_gpus_while_waiting: float | None
    idle_pct_while_waiting: float | None
    waiting_s: float


def start_time(job: JobOutcome, end_s: float) -> float | None:
    """When the job had all its members (its minCount) bound, None if not by `end_s`."""
    bound = sorted(p.bound_s for p in job.pods if p.bound_s is not None and p.bound_s <= end_s)
    return bound[job.job.members - 1] if len(bound) >= job.job.members else None


def partial_gpu_seconds(job: JobOutcome, end_s: float, burst_s: float) -> tuple[float, float]:
    """(GPU-seconds the gang held while partially started, first-to-minCount-th spread).

    The spread is 0 for a gang with no bound member, and the time from its first binding to
    `end_s` for one that never started."""
    bound = sorted(p.bound_s for p in job.pods if p.bound_s is not None and p.bound_s <= end_s)
    if not bound:
        return 0.0, 0.0
    started = start_time(job, end_s)
    spread = (started if started is not None else end_s) - bound[0]
    if started is not None and spread <= burst_s:
        return 0.0, spread
    until = started if started is not None else end_s
    held = 0.0
    for pod in job.pods:
        if pod.bound_s is None or pod.bound_s >= until:
            continue
        stop = min(until, pod.freed_s if pod.freed_s is not None else until)
        held += pod.gpus * max(0.0, stop - pod.bound_s)
    return held, spread


def replay_gpus(
    jobs: Sequence[JobOutcome], nodes: Mapping[str, BenchNode], end_s: float
) -> dict[str, tuple[int, ...]]:
    """GPU indices of every bound pod, by pod name: its annotation's when it has one, else the
    best choice among its node's GPUs free when it was bound, replaying bindings and deletions
    in time order (a deletion first at equal times). A pod that finds too few GPUs free gets
    ()."""
    events: list[tuple[float, int, PodOutcome]] = []
    for job in jobs:
        for pod in job.pods:
            if pod.bound_s is None or pod.node not in nodes or pod.bound_s > end_s:
                continue
            events.append((pod.bound_s, 1, pod))
            if pod.freed_s is not None and pod.freed_s <= end_s:
                events.append((pod.freed_s, 0, pod))
    events.sort(key=lambda event: (event[0], event[1]))
    used = {name: np.zeros(node.gpus, dtype=np.bool_) for name, node in nodes.items()}
    # used[node]: (gpus,) in use at the replayed moment
    chosen: dict[str, tuple[int, ...]] = {}
    for _, kind, pod in events:
        assert pod.node is not None
        mask = used[pod.node]
        if kind == 0:
            mask[list(chosen.get(pod.name, ()))] = False
            continue
        topology = nodes[pod.node].topology
        gpus: tuple[int, ...] = ()
        if pod.gpus_annotation:
            try:
                gpus = parse_gpus_annotation(pod.gpus_annotation, topology.gpu_count)
            except ValueError:
                gpus = ()
        else:
            choice = choose_gpus(topology, mask, pod.gpus)
            gpus = choice.gpus if choice is not None else ()
        mask[list(gpus)] = True
        chosen[pod.name] = gpus
    return chosen


def _dominant_share(keys: Sequence[Hashable | None]) -> int:
    """Members sharing the most common key (None never counts)."""
    counts = Counter(key for key in keys if key is not None)
    return max(counts.values(), default=0)


def _free_while_waiting(
    jobs: Sequence[JobOutcome], end_s: float, capacity: int
) -> tuple[float | None, float]:
    """(mean unallocated GPUs while at least one gang waited, seconds some gang waited)."""
    changes: list[tuple[float, int, int]] = []  # (time, change of allocated GPUs, of waiting)
    for job in jobs:
        for pod in job.pods:
            if pod.bound_s is not None and pod.bound_s < end_s:
                changes.append((pod.bound_s, pod.gpus, 0))
                if pod.freed_s is not None and pod.freed_s < end_s:
                    changes.append((pod.freed_s, -pod.gpus, 0))
        if job.job.gang and job.created_s is not None and job.created_s < end_s:
            started = start_time(job, end_s)
            changes.append((job.created_s, 0, 1))
            if started is not None:
                changes.append((started, 0, -1))
    if not changes:
        return None, 0.0
    changes.sort()
    times = np.asarray([c[0] for c in changes] + [end_s])  # times: (changes + 1,)
    allocated = np.cumsum([c[1] for c in changes])  # allocated: (changes,) after each change
    waiting = np.cumsum([c[2] for c in changes])  # waiting: (changes,) gangs waiting after it
    spans = np.clip(np.diff(times), 0.0, None)  # spans: (changes,) until the next change
    waited = spans * (waiting > 0)  # waited: (changes,)
    total = float(waited.sum())
    if total <= 0:
        return None, 0.0
    free = capacity - allocated  # free: (changes,)
    return float((free * waited).sum() / total), total


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.quantile(np.asarray(values), q, method="inverted_cdf"))


def _pct(part: int, whole: int) -> float | None:
    return 100.0 * part / whole if whole else None


def summarize(
    run: str,
    jobs: Sequence[JobOutcome],
    nodes: Sequence[BenchNode],
    end_s: float,
    burst_s: float = DEFAULT_BURST_S,
) -> RunMetrics:
    """Every metric of one run (see the module docstring)."""
    by_name = {node.name: node for node in nodes}
    capacity = sum(node.gpus for node in nodes)
    largest_domain = max((len(d) for n in nodes for d in n.topology.domains), default=0)
    gpus_of = replay_gpus(jobs, by_name, end_s)
    gangs = [job for job in jobs if job.job.gang]
    singles = [job for job in jobs if not job.job.gang]
    partial_gpu_s, partial_gangs, spreads, starts = 0.0, 0, [], []
    members = in_node = in_rack = domain_members = in_domain = multi_gpu = multi_inside = 0
    rack_bound = rack_honoured = 0
    for job in gangs:
        held, spread = partial_gpu_seconds(job, end_s, burst_s)
        partial_gpu_s += held
        partial_gangs += held > 0
        started = start_time(job, end_s)
        if started is None or job.created_s is None:
            continue
        if held == 0:
            spreads.append(spread)
        starts.append(started - job.created_s)
        placed = [p for p in job.pods if p.bound_s is not None and p.bound_s <= end_s]
        members += len(placed)
        in_node += _dominant_share([p.node for p in placed])
        racks = [by_name[p.node].rack if p.node in by_name else None for p in placed]
        in_rack += _dominant_share(racks)
        if job.job.rack_bound:
            rack_bound += 1
            rack_honoured += len(set(racks)) == 1 and None not in racks
        if job.job.gpus <= largest_domain:
            keys = [_domain_key(p, by_name, gpus_of) for p in placed]
            domain_members += len(placed)
            in_domain += _dominant_share(keys)
            if job.job.gpus > 1:
                multi_gpu += len(placed)
                multi_inside += sum(key is not None for key in keys)
    idle, waiting_s = _free_while_waiting(jobs, end_s, capacity)
    return RunMetrics(
        run=run,
        seconds=end_s,
        gangs=len(gangs),
        gangs_started=len(starts),
        singles=len(singles),
        singles_bound=sum(1 for j in singles if start_time(j, end_s) is not None),
        partial_gangs=partial_gangs,
        partial_gpu_s=partial_gpu_s,
        max_spread_s=max(spreads, default=None),
        gangs_per_min=len(starts) * 60.0 / end_s if end_s > 0 else 0.0,
        start_p50_s=_quantile(starts, 0.50),
        start_p99_s=_quantile(starts, 0.99),
        one_domain_pct=_pct(in_domain, domain_members),
        domain_members=domain_members,
        member_domain_pct=_pct(multi_inside, multi_gpu),
        multi_gpu_members=multi_gpu,
        one_node_pct=_pct(in_node, members),
        one_rack_pct=_pct(in_rack, members),
        rack_bound_started=rack_bound,
        rack_bound_in_one_rack=rack_honoured,
        idle_gpus_while_waiting=idle,
        idle_pct_while_waiting=100.0 * idle / capacity if idle is not None and capacity else None,
        waiting_s=waiting_s,
    )


def _domain_key(
    pod: PodOutcome, nodes: Mapping[str, BenchNode], gpus_of: Mapping[str, tuple[int, ...]]
) -> tuple[str, int] | None:
    """(node, domain index) holding all the pod's GPUs, None when they span domains."""
    gpus = gpus_of.get(pod.name, ())
    node = nodes.get(pod.node or "")
    if not gpus or node is None:
        return None
    for index, domain in enumerate(node.topology.domains):
        if set(gpus) <= set(domain):
            return node.name, index
    return None


RATIO_KEYS = (
    "partial_gpu_s",
    "gangs_per_min",
    "start_p50_s",
    "start_p99_s",
    "one_domain_pct",
    "member_domain_pct",
    "one_node_pct",
    "one_rack_pct",
    "idle_gpus_while_waiting",
)


def ratios(ours: RunMetrics, theirs: RunMetrics) -> dict[str, float | None]:
    """ours / theirs for each metric of `RATIO_KEYS`; None where theirs is 0 or missing
    (0 / 0 is reported as 1: both equal)."""
    result: dict[str, float | None] = {}
    for key in RATIO_KEYS:
        a, b = getattr(ours, key), getattr(theirs, key)
        if a is None or b is None or (isinstance(b, float) and math.isnan(b)):
            result[key] = None
        elif b == 0:
            result[key] = 1.0 if a == 0 else None
        else:
            result[key] = a / b
    return result
