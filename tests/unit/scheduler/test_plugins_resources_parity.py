"""NodeResourcesFit against kube-scheduler's rules: extended resources, init containers,
sidecars, pod-level resources and overhead in the effective request."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_pod
from scheduler.model.resources import CPU, MEMORY, PODS
from scheduler.plugins.resources import NodeResourcesFit
from tests.unit.scheduler.builders import cluster, make_container, make_node, make_pod, rejected

FOO = "example.com/foo"


def sidecar(name: str, cpu: str) -> dict[str, Any]:
    container = make_container(name, cpu=cpu)
    container["restartPolicy"] = "Always"
    return container


def foo_pod(name: str, amount: int, node: str | None = None) -> dict[str, Any]:
    container = make_container(cpu="100m", limits={FOO: str(amount)})
    return make_pod(name, gpus=0, node=node, containers=[container])


def test_extended_resource_is_filtered() -> None:
    nodes = (make_node("none"), make_node("two", mig={FOO: "2"}), make_node("four", mig={FOO: "4"}))
    cache = cluster(*nodes, pods=[foo_pod("holder", 3, node="four")])
    plugin = NodeResourcesFit()
    found = rejected(plugin, parse_pod(foo_pod("new", 2)), Snapshot(cache))
    assert found == {f"Insufficient {FOO}": {"none", "four"}}
    cache.remove_pod("default/holder")  # the memoized free amounts follow the cache
    found = rejected(plugin, parse_pod(foo_pod("new", 2)), Snapshot(cache))
    assert found == {f"Insufficient {FOO}": {"none"}}


def test_extended_resource_requests_are_parsed_beside_the_vector() -> None:
    pod = parse_pod(foo_pod("p", 3))
    assert pod.scalar == {FOO: 3}
    assert parse_pod(make_pod("plain", gpus=2)).scalar == {}


@pytest.mark.parametrize(
    ("init", "expected_millis"),
    [
        # Plain init containers: max(sum of containers, largest init container).
        ([make_container("i1", cpu="300m"), make_container("i2", cpu="1")], 1000),
        ([make_container("i1", cpu="100m")], 500),
        # A sidecar runs beside the containers: it adds to their sum.
        ([sidecar("s1", "200m")], 700),
        # An init container after a sidecar runs beside it: 200m + 900m = 1100m > 700m.
        ([sidecar("s1", "200m"), make_container("i1", cpu="900m")], 1100),
        # An init container before the sidecar does not: max(900m, 500m + 200m) = 900m.
        ([make_container("i1", cpu="900m"), sidecar("s1", "200m")], 900),
        ([sidecar("s1", "200m"), sidecar("s2", "300m")], 1000),
    ],
)
def test_effective_cpu_request(init: list[dict[str, Any]], expected_millis: int) -> None:
    containers = [make_container("a", cpu="200m"), make_container("b", cpu="300m")]
    pod = parse_pod(make_pod("p", gpus=0, containers=containers, init_containers=init))
    assert pod.requests[CPU] == expected_millis
    assert pod.requests[PODS] == 1


def test_overhead_adds_to_the_request() -> None:
    pod = parse_pod(make_pod("p", gpus=0, cpu="1", overhead={"cpu": "250m", "memory": "1Gi"}))
    assert (pod.requests[CPU], pod.requests[MEMORY]) == (1250, 2**30)


def test_pod_level_requests_replace_the_container_sum_for_cpu_and_memory() -> None:
    raw = make_pod("p", gpus=1, cpu="100m", memory="1Gi", overhead={"cpu": "50m"})
    raw["spec"]["resources"] = {"requests": {"cpu": "2", "memory": "4Gi"}}
    pod = parse_pod(raw)
    assert (pod.requests[CPU], pod.requests[MEMORY]) == (2050, 4 * 2**30)
    assert pod.gpus == 1
    nodes = (make_node("small", cpu="1"), make_node("big", cpu="8"))
    assert rejected(NodeResourcesFit(), pod, Snapshot(cluster(*nodes))) == {
        "Insufficient cpu": {"small"}
    }


def test_bad_pod_level_request_is_a_field_error() -> None:
    raw = make_pod("p", gpus=0)
    raw["spec"]["resources"] = {"requests": {"cpu": "lots"}}
    assert [e.field for e in parse_pod(raw).errors] == ["spec.resources.requests.cpu"]


def test_pod_count_is_filtered() -> None:
    nodes = (make_node("full", pods=1), make_node("free", pods=2))
    holders = [make_pod("h1", gpus=0, node="full"), make_pod("h2", gpus=0, node="free")]
    found = rejected(
        NodeResourcesFit(),
        parse_pod(make_pod("p", gpus=0)),
        Snapshot(cluster(*nodes, pods=holders)),
    )
    assert found == {"Too many pods": {"full"}}
