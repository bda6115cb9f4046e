"""Scrape-time collectors on plain data: the samples each function gives, and what a registry
holding a `Reading` renders."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from metrics.collectors import (
    DomainGPUs,
    Reading,
    Sample,
    count_samples,
    leader_samples,
    node_gpu_samples,
    oldest_age_samples,
    pending_samples,
    single,
)


def test_pending_pods_are_kube_schedulers_four_queues_and_leave_in_flight_out() -> None:
    pools = {"active": 3, "backoff": 1, "unschedulable": 7, "in_flight": 5}
    assert pending_samples(pools, gated=2) == [
        (("active",), 3.0),
        (("backoff",), 1.0),
        (("unschedulable",), 7.0),
        (("gated",), 2.0),
    ]


def test_pending_pods_of_a_missing_pool_are_zero() -> None:
    assert pending_samples({}, gated=0) == [
        ((queue,), 0.0) for queue in ("active", "backoff", "unschedulable", "gated")
    ]


def test_node_gpus_per_domain_in_node_and_domain_order() -> None:
    domains = [
        DomainGPUs("b", 0, allocatable=8, free=8),
        DomainGPUs("a", 1, allocatable=4, free=1),
        DomainGPUs("a", 0, allocatable=4, free=0),
    ]
    assert node_gpu_samples(domains) == [
        (("a", "0", "allocatable"), 4.0),
        (("a", "0", "allocated"), 4.0),
        (("a", "0", "free"), 0.0),
        (("a", "1", "allocatable"), 4.0),
        (("a", "1", "allocated"), 3.0),
        (("a", "1", "free"), 1.0),
        (("b", "0", "allocatable"), 8.0),
        (("b", "0", "allocated"), 0.0),
        (("b", "0", "free"), 8.0),
    ]


@pytest.mark.parametrize(
    ("free", "allocated", "shown_free"), [(9, 0, 4), (-2, 4, 0), (4, 0, 4), (0, 4, 0)]
)
def test_node_gpus_never_show_negative_or_excess_counts(
    free: int, allocated: int, shown_free: int
) -> None:
    samples = dict(node_gpu_samples([DomainGPUs("n", 0, allocatable=4, free=free)]))
    assert samples[("n", "0", "allocated")] == allocated
    assert samples[("n", "0", "free")] == shown_free


def test_leader_and_counts() -> None:
    assert leader_samples("replica-a", True) == [(("replica-a",), 1.0)]
    assert leader_samples("replica-b", False) == [(("replica-b",), 0.0)]
    assert count_samples({"no-candidates": 2, "cooling-down": 5}) == [
        (("cooling-down",), 5.0),
        (("no-candidates",), 2.0),
    ]
    assert single(3) == [((), 3.0)]


def test_a_registered_reading_renders_its_samples_when_scraped() -> None:
    values: dict[str, int] = {}
    registry = CollectorRegistry()
    registry.register(
        Reading(
            "counter", "x_skips", "Skips by reason.", ("reason",), lambda: count_samples(values)
        )
    )
    registry.register(Reading("gauge", "x_up", "Up.", (), lambda: single(len(values))))
    values["busy"] = 4
    text = generate_latest(registry).decode()
    assert "# TYPE x_skips_total counter" in text
    assert 'x_skips_total{reason="busy"} 4.0' in text
    assert "x_up 1.0" in text
    values["busy"] = 6  # read again at the next scrape
    assert registry.get_sample_value("x_skips_total", {"reason": "busy"}) == 6


def test_registering_reads_nothing() -> None:
    def broken() -> list[Sample]:
        raise AssertionError("read at registration")

    registry = CollectorRegistry(auto_describe=True)
    registry.register(Reading("gauge", "x_later", "Read later.", (), broken))
    with pytest.raises(AssertionError, match="read at registration"):
        generate_latest(registry)


def test_a_reading_refuses_samples_with_the_wrong_labels() -> None:
    reading = Reading("gauge", "x_nodes", "Nodes.", ("node",), lambda: [(("a", "b"), 1.0)])
    with pytest.raises(ValueError, match=r"x_nodes takes labels \('node',\)"):
        list(reading.collect())


def test_a_counter_reading_is_named_without_total() -> None:
    with pytest.raises(ValueError, match="without _total"):
        Reading("counter", "x_total", "Bad.", (), lambda: single(0))


def test_the_same_name_twice_in_one_registry_is_refused_but_two_registries_are_independent() -> (
    None
):
    first, second = CollectorRegistry(), CollectorRegistry()
    for registry in (first, second):
        registry.register(Reading("gauge", "x_same", "Same.", (), lambda: single(1)))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        first.register(Reading("gauge", "x_same", "Same.", (), lambda: single(1)))
    assert second.get_sample_value("x_same") == 1


def test_oldest_pending_age() -> None:
    assert oldest_age_samples(None, 500.0) == [((), 0.0)]
    assert oldest_age_samples(380.0, 500.0) == [((), 120.0)]
    assert oldest_age_samples(501.0, 500.0) == [((), 0.0)]  # never negative
