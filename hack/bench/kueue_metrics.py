"""The Kueue stranding benchmark's job stream and metrics: pure, seeded, no API calls.

Jobs: a seeded stream of Kueue Jobs, each of `pods` pods asking `gpus` GPUs apiece (the shapes
of `Mix.shapes`: 1 x 1, 1 x 2, 1 x 8 and 2 x 8 GPUs by default), spread round-robin over the
team queues, arriving at a steady rate chosen so that the GPU-seconds asked per second are `load`
times the cluster's GPUs (demand beyond capacity: Kueue queues the rest). A job runs `duration_s`
once all its pods are bound, then finishes.

Stranding: Kueue admits a workload when its ClusterQueue's quota covers it; the quota knows GPU
counts, not which node has them. An admitted workload whose pods are not all bound is *stranded*
at a moment when the free GPUs of the flavor's nodes add up to what its unbound pods ask but they
do not fit (each pod needs its GPUs on one node): the free GPUs are scattered. `StrandingMeter`
is fed snapshots (free GPUs per node, unbound pods per admitted workload) and counts, per
workload, the most free GPUs it saw scattered that way, and over time the GPU-seconds during
which any admitted workload was stranded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (1, 8), (2, 8))
"""(pods, GPUs per pod) of the job shapes."""
DEFAULT_WEIGHTS: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)


@dataclass(frozen=True)
class Mix:
    """What the seeded job stream looks like."""

    jobs: int = 120
    shapes: tuple[tuple[int, int], ...] = DEFAULT_SHAPES
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    min_duration_s: float = 10.0
    max_duration_s: float = 30.0
    load: float = 1.5
    """GPU-seconds asked per second, as a multiple of the cluster's GPUs."""


@dataclass(frozen=True)
class QueuedJob:
    """One Job of the stream."""

    name: str
    queue: str
    """The team's LocalQueue."""
    pods: int
    gpus: int
    """GPUs asked by each pod."""
    arrival_s: float
    duration_s: float

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus


def generate(mix: Mix, capacity_gpus: int, queues: Sequence[str], seed: int) -> list[QueuedJob]:
    """The seeded job stream for a cluster of `capacity_gpus` GPUs (see the module docstring)."""
    if not queues:
        raise ValueError("at least one queue is needed")
    if len(mix.shapes) != len(mix.weights):
        raise ValueError("Mix.shapes and Mix.weights differ in length")
    rng = np.random.default_rng(seed)
    weights = np.asarray(mix.weights, dtype=float)  # (shapes,)
    picks = rng.choice(len(mix.shapes), size=mix.jobs, p=weights / weights.sum())  # (jobs,)
    durations = rng.uniform(mix.min_duration_s, mix.max_duration_s, size=mix.jobs)  # (jobs,)
    asked = sum(
        mix.shapes[int(i)][0] * mix.shapes[int(i)][1] * float(d)
        for i, d in zip(picks, durations, strict=True)
    )
    interval = asked / mix.jobs / (mix.load * capacity_gpus) if mix.jobs and capacity_gpus else 0.0
    return [
        QueuedJob(
            f"j-{index:04d}",
            queues[index % len(queues)],
            mix.shapes[int(pick)][0],
            mix.shapes[int(pick)][1],
            index * interval,
            float(duration),
        )
        for index, (pick, duration) in enumerate(zip(picks, durations, strict=True))
    ]


def window_s(jobs: Sequence[QueuedJob]) -> float:
    """Seconds from the first arrival to one interval past the last."""
    if len(jobs) < 2:
        return 0.0
    return jobs[-1].arrival_s + (jobs[1].arrival_s - jobs[0].arrival_s)


def fits(pods: int, gpus: int, free: Sequence[int]) -> bool:
    """Whether `pods` pods of `gpus` GPUs each fit nodes with `free` GPUs free (each pod on one
    node; pods of one size, so counting per node is exact)."""
    if pods <= 0:
        return True
    return gpus > 0 and sum(f // gpus for f in free) >= pods


def stranded(free: Mapping[str, int], waiting: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """For each waiting workload (name -> (unbound pods, GPUs per pod)) that is stranded now (see
    the module docstring), the free GPUs scattered over the nodes: their total."""
    total = sum(free.values())
    result: dict[str, int] = {}
    for name, (pods, gpus) in waiting.items():
        if pods > 0 and pods * gpus <= total and not fits(pods, gpus, list(free.values())):
            result[name] = total
    return result


@dataclass
class StrandingMeter:
    """Accumulates snapshots of one run (`observe`, at increasing times)."""

    worst: dict[str, int] = field(default_factory=dict)
    """Per workload ever stranded: the most free GPUs it saw scattered."""
    stranded_gpu_s: float = 0.0
    """Integral over time of the free GPUs while at least one admitted workload was stranded."""
    pending_samples: list[int] = field(default_factory=list)
    """Per snapshot: admitted workloads with pods not bound."""
    episodes: list[tuple[float, str, tuple[int, ...]]] = field(default_factory=list)
    """(time, workload, free GPUs per node) each time a workload becomes stranded."""
    stranded_s: dict[str, float] = field(default_factory=dict)
    """Per workload ever stranded: how long it was (time between snapshots, counted at the
    earlier one)."""
    last_at: float | None = None
    last_stranded_gpus: int = 0
    last_stranded: frozenset[str] = frozenset()

    def observe(
        self, at: float, free: Mapping[str, int], waiting: Mapping[str, tuple[int, int]]
    ) -> None:
        """One snapshot at time `at`: free GPUs per node, and per admitted workload with unbound
        pods its (unbound pods, GPUs per pod). The time since the previous snapshot is counted
        at the previous snapshot's stranded GPUs."""
        if self.last_at is not None:
            elapsed = max(0.0, at - self.last_at)
            self.stranded_gpu_s += self.last_stranded_gpus * elapsed
            for name in self.last_stranded:
                self.stranded_s[name] = self.stranded_s.get(name, 0.0) + elapsed
        now = stranded(free, waiting)
        for name, gpus in now.items():
            self.worst[name] = max(self.worst.get(name, 0), gpus)
            if name not in self.last_stranded:
                self.episodes.append((at, name, tuple(sorted(free.values(), reverse=True))))
        self.last_stranded = frozenset(now)
        self.pending_samples.append(sum(1 for pods, _ in waiting.values() if pods > 0))
        self.last_at = at
        self.last_stranded_gpus = sum(free.values()) if now else 0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q` quantile (0 < q <= 1) of `values`; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class RunMetrics:
    run: str
    jobs: int
    admitted: int
    """Workloads Kueue admitted during the run."""
    completed: int
    """Admitted workloads whose pods were all bound."""
    stranded_workloads: int
    """Admitted workloads stranded at least once."""
    stranded_gpus_per_admitted: float | None
    """Sum over admitted workloads of the most GPUs each saw scattered, per admitted workload."""
    stranded_gpu_s: float
    pending_mean: float | None
    """Admitted workloads waiting on placement, mean over snapshots."""
    pending_max: int
    admit_to_bound_p50_s: float | None
    admit_to_bound_p99_s: float | None
    multi_gpu_pods: int
    """Bound pods asking 2..(largest NVLink domain) GPUs."""
    one_domain_pct: float | None
    """Of those, the share inside one NVLink domain."""


def summarize(
    run: str,
    jobs: int,
    admitted_at: Mapping[str, float],
    bound_at: Mapping[str, float],
    meter: StrandingMeter,
    nvlink: tuple[int, int],
) -> RunMetrics:
    """One run's metrics from when each workload was admitted (`admitted_at`) and had all its
    pods bound (`bound_at`), the meter, and (multi-GPU pods, those inside one domain)."""
    waits = [bound_at[n] - at for n, at in admitted_at.items() if n in bound_at]
    eligible, inside = nvlink
    worst = sum(gpus for name, gpus in meter.worst.items() if name in admitted_at)
    samples = meter.pending_samples
    return RunMetrics(
        run=run,
        jobs=jobs,
        admitted=len(admitted_at),
        completed=len(waits),
        stranded_workloads=sum(1 for name in meter.worst if name in admitted_at),
        stranded_gpus_per_admitted=worst / len(admitted_at) if admitted_at else None,
        stranded_gpu_s=meter.stranded_gpu_s,
        pending_mean=sum(samples) / len(samples) if samples else None,
        pending_max=max(samples, default=0),
        admit_to_bound_p50_s=percentile(waits, 0.5),
        admit_to_bound_p99_s=percentile(waits, 0.99),
        multi_gpu_pods=eligible,
        one_domain_pct=100.0 * inside / eligible if eligible else None,
    )


RATIO_KEYS = (
    "admitted",
    "stranded_workloads",
    "stranded_gpus_per_admitted",
    "stranded_gpu_s",
    "pending_mean",
    "admit_to_bound_p50_s",
    "admit_to_bound_p99_s",
    "one_domain_pct",
)


def ratios(ours: RunMetrics, theirs: RunMetrics) -> dict[str, float | None]:
    """ours / theirs per metric of `RATIO_KEYS`: None where either is missing or theirs is 0
    while ours is not; 1.0 when both are 0."""
    result: dict[str, float | None] = {}
    for key in RATIO_KEYS:
        a, b = getattr(ours, key), getattr(theirs, key)
        if a is None or b is None:
            result[key] = None
        elif b == 0:
            result[key] = 1.0 if a == 0 else None
        else:
            result[key] = float(a) / float(b)
    return result
