"""Scrape-time collectors: metrics whose values are read from plain data when /metrics is
scraped, so nothing has to be kept in step as the state changes.

`Reading` is the one collector type: a metric family (gauge or counter) whose samples a callable
returns at scrape time. The functions below turn plain data into those samples; the daemon
passes callables reading its queue, cache, counters and Lease (`scheduler.daemon`). They never
see the scheduler's objects, only numbers, strings and mappings.

    metric                                        kind     labels               read from
    scheduler_pending_pods                        gauge    queue                queue pools
    gpu_scheduler_oldest_pending_pod_age_seconds  gauge                         queue times
    gpu_scheduler_node_gpus                       gauge    node, domain, state  the cache
    gpu_scheduler_leader                          gauge    identity             leader elector
    gpu_scheduler_reclaim_attempts_total          counter                       reclaim counters
    gpu_scheduler_reclaim_evictions_total         counter  result               reclaim counters
    gpu_scheduler_reclaim_skips_total             counter  reason               reclaim counters
    gpu_scheduler_events_dropped_total            counter                       event recorder
    gpu_scheduler_gpu_conflicts_total             counter                       conflict monitor

`scheduler_pending_pods` is kube-scheduler's: `active`, `backoff`, `unschedulable` (pods that
were tried and fit nowhere) and `gated` (pods with scheduling gates, never tried); pods in a
running scheduling or binding cycle are in none of them. Every replica, leader or not, watches
the pending pods, so a follower shows them too (in `active`: it never tries them).

`gpu_scheduler_oldest_pending_pod_age_seconds` is the time since the longest-waiting pod still
pending (in any pool or in a running cycle; gated pods not counted) first entered the queue, 0
when none is pending. kube-scheduler has no such metric; an alert on pods pending too long
needs it.

`gpu_scheduler_node_gpus` has, per node and NVLink domain (`domain` is the domain's index on the
node), the `allocatable`, `allocated` (taken by bound, assumed or reserved pods) and `free` GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Literal, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

Kind = Literal["gauge", "counter"]
Sample = tuple[tuple[str, ...], float]
"""Label values (in the family's label order) and the value."""

PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated")
GPU_STATES = ("allocatable", "allocated", "free")


class Reading:
    """A gauge or counter family whose samples `read()` returns when scraped.

    `describe()` yields the family without samples, so registering it reads nothing (the
    registry asks for names at registration) and a reader may depend on objects made later.
    A counter's `name` is given without `_total`; the exposition adds it.
    """

    def __init__(
        self,
        kind: Kind,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        read: Callable[[], Iterable[Sample]],
    ) -> None:
        if kind == "counter" and name.endswith("_total"):
            raise ValueError(f"counter {name}: give the name without _total")
        self.kind = kind
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.read = read

    def _family(self) -> GaugeMetricFamily | CounterMetricFamily:
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        return CounterMetricFamily(self.name, self.documentation, labels=self.labels)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for label_values, value in self.read():
            if len(label_values) != len(self.labels):
                raise ValueError(f"{self.name} takes labels {self.labels}, got {label_values}")
            family.add_metric(list(label_values), value)
        yield family


# -- plain data -> samples -----------------------------------------------------------------------


def pending_samples(pools: Mapping[str, int], gated: int) -> list[Sample]:
    """`scheduler_pending_pods` from the queue's pool sizes and the count of gated pods; other
    pools (pods in flight) are left out, as kube-scheduler leaves them out."""
    sizes = {**pools, "gated": gated}
    return [((queue,), float(sizes.get(queue, 0))) for queue in PENDING_QUEUES]


class DomainGPUs(NamedTuple):
    """The GPUs of one NVLink domain of a node (a tuple: sorts by node, then domain)."""

    node: str
    domain: int
    allocatable: int
    free: int


def node_gpu_samples(domains: Iterable[DomainGPUs]) -> list[Sample]:
    """`gpu_scheduler_node_gpus`: allocatable, allocated and free GPUs per node and domain,
    sorted by node and domain. A domain reporting more free GPUs than it has counts as fully
    free (allocated is never negative)."""
    samples: list[Sample] = []
    allocatable, allocated, free = GPU_STATES
    for node, domain, size, left in sorted(domains):
        idle = min(max(left, 0), size)
        index = str(domain)
        samples.append(((node, index, allocatable), float(size)))
        samples.append(((node, index, allocated), float(size - idle)))
        samples.append(((node, index, free), float(idle)))
    return samples


def oldest_age_samples(oldest_queued_at: float | None, now: float) -> list[Sample]:
    """`gpu_scheduler_oldest_pending_pod_age_seconds`: `now - oldest_queued_at` (both on one
    clock), 0 when no pod is pending."""
    age = 0.0 if oldest_queued_at is None else max(now - oldest_queued_at, 0.0)
    return [((), age)]


def leader_samples(identity: str, leading: bool) -> list[Sample]:
    """`gpu_scheduler_leader`: 1 while this process holds the Lease, else 0."""
    return [((identity,), 1.0 if leading else 0.0)]


def count_samples(counts: Mapping[str, int]) -> list[Sample]:
    """One sample per key of `counts`, sorted by key (a counter by reason or result)."""
    return [((key,), float(value)) for key, value in sorted(counts.items())]


def labelled_samples(counts: Mapping[tuple[str, ...], int]) -> list[Sample]:
    """One sample per label tuple of `counts`, sorted (a gauge by several labels, e.g.
    `gpu_scheduler_unhealthy_gpus` by node and reason)."""
    return [(labels, float(value)) for labels, value in sorted(counts.items())]


def single(value: float) -> list[Sample]:
    """The one sample of a family without labels."""
    return [((), float(value))]
