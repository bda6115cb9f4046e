"""What the daemon's scrape-time metrics read: GPUs per node and NVLink domain from the cache,
and the count of gated pods the pod handler keeps."""

from __future__ import annotations

from metrics.collectors import DomainGPUs
from scheduler.core.handlers import PodHandler
from scheduler.model.objects import parse_node
from scheduler.state.readings import domain_gpus
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info
from tests.unit.scheduler.core_api_double import harness


def test_domain_gpus_count_bound_assumed_and_reserved_pods() -> None:
    cache = cluster(
        make_node("a", gpus=8),  # default layout: domains 0-3 and 4-7
        make_node("b", gpus=4, domains="0-1,2-3"),
        make_node("cpu", gpus=0),
        pods=[make_pod("bound", node="a", gpus=2, gpu_indices="0,1")],
    )
    cache.assume(pod_info("assumed", gpus=1), "a", (4,))
    cache.reserve(pod_info("nominated", gpus=2), "b", (2, 3), now=0.0)
    assert sorted(domain_gpus(cache), key=lambda d: (d.node, d.domain)) == [
        DomainGPUs("a", 0, allocatable=4, free=2),
        DomainGPUs("a", 1, allocatable=4, free=3),
        DomainGPUs("b", 0, allocatable=2, free=2),
        DomainGPUs("b", 1, allocatable=2, free=0),
    ]
    cache.forget("default/assumed")
    cache.remove_node("b")
    assert DomainGPUs("a", 1, allocatable=4, free=4) in domain_gpus(cache)
    assert {d.node for d in domain_gpus(cache)} == {"a"}


def test_a_node_that_shrinks_shows_its_new_domains_only() -> None:
    cache = cluster(make_node("a", gpus=8))
    cache.add_or_update_node(parse_node(make_node("a", gpus=2, domains="0-1")))
    assert domain_gpus(cache) == [DomainGPUs("a", 0, allocatable=2, free=2)]


def gated(name: str) -> dict[str, object]:
    pod = make_pod(name)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    return pod


def test_gated_pods_are_counted_until_ungated_bound_or_deleted() -> None:
    h = harness(cluster(make_node("n")))
    handler = PodHandler(h.context, h.queue)
    for name in ("g1", "g2", "g3"):
        handler.on_add(gated(name))
    handler.on_add(make_pod("plain"))
    assert handler.gated_keys == {"default/g1", "default/g2", "default/g3"}
    handler.on_update(gated("g1"), make_pod("g1"))  # last gate removed: queued
    handler.on_update(gated("g2"), make_pod("g2", node="n"))  # bound by someone else
    handler.on_delete(gated("g3"))
    assert handler.gated_keys == set()
    assert "default/g1" in h.queue
