"""NodePorts: kube-scheduler's host-port conflict rule, counted over every pod on the node."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework.interface import CycleState
from scheduler.model.objects import parse_pod
from scheduler.model.podfields import HostPort
from scheduler.plugins.node_ports import REASON, NodePorts
from tests.unit.scheduler.builders import (
    cluster,
    make_container,
    make_node,
    make_pod,
    rejected,
    snapshot_of,
)


def port(host_port: object, protocol: str | None = None, host_ip: str | None = None) -> Any:
    raw: dict[str, object] = {"containerPort": 8080, "hostPort": host_port}
    if protocol is not None:
        raw["protocol"] = protocol
    if host_ip is not None:
        raw["hostIP"] = host_ip
    return raw


def with_ports(name: str, *ports: Any, node: str | None = None, scheduler: str = "") -> Any:
    container = make_container(cpu="100m")
    container["ports"] = list(ports)
    pod = make_pod(name, gpus=0, node=node, containers=[container])
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    return pod


def verdict(pod: Any, *holders: Any) -> dict[str, set[str]]:
    snapshot = snapshot_of(make_node("a"), make_node("b"), pods=holders)
    return rejected(NodePorts(), parse_pod(pod), snapshot)


@pytest.mark.parametrize(
    ("used", "wanted", "conflict"),
    [
        (port(80), port(80), True),
        (port(80), port(81), False),
        (port(80, "TCP"), port(80, "UDP"), False),
        (port(80, "UDP"), port(80, "UDP"), True),
        (port(80, None, "10.0.0.1"), port(80, None, "10.0.0.2"), False),
        (port(80, None, "10.0.0.1"), port(80, None, "10.0.0.1"), True),
        (port(80, None, "0.0.0.0"), port(80, None, "10.0.0.2"), True),
        (port(80, None, "10.0.0.1"), port(80), True),  # empty hostIP is 0.0.0.0
        (port(80, "SCTP", "10.0.0.1"), port(80, "TCP", "0.0.0.0"), False),
    ],
)
def test_conflict_rule(used: Any, wanted: Any, conflict: bool) -> None:
    holder = with_ports("holder", used, node="a")
    found = verdict(with_ports("new", wanted), holder)
    assert found == ({REASON: {"a"}} if conflict else {})


def test_pods_of_other_schedulers_hold_ports_too() -> None:
    holder = with_ports("holder", port(9000), node="b", scheduler="default-scheduler")
    assert verdict(with_ports("new", port(9000)), holder) == {REASON: {"b"}}


def test_pod_without_host_ports_is_never_rejected() -> None:
    holder = with_ports("holder", port(9000), node="a")
    assert verdict(make_pod("plain", gpus=1), holder) == {}
    plain = with_ports("plain", {"containerPort": 9000})
    assert parse_pod(plain).host_ports == ()


def test_sidecar_ports_count_and_plain_init_container_ports_do_not() -> None:
    sidecar = make_container("proxy")
    sidecar["restartPolicy"] = "Always"
    sidecar["ports"] = [port(15000)]
    setup = make_container("setup")
    setup["ports"] = [port(16000)]
    pod = make_pod("mesh", gpus=0, node="a", init_containers=[sidecar, setup])
    assert parse_pod(pod).host_ports == (HostPort("0.0.0.0", "TCP", 15000),)
    assert verdict(with_ports("new", port(15000)), pod) == {REASON: {"a"}}
    assert verdict(with_ports("new", port(16000)), pod) == {}


def test_ports_leave_with_the_pod() -> None:
    cache = cluster(make_node("a"), pods=[with_ports("holder", port(80), node="a")])
    plugin = NodePorts()
    pod = parse_pod(with_ports("new", port(80)))
    from scheduler.framework.snapshot import Snapshot

    assert rejected(plugin, pod, Snapshot(cache)) == {REASON: {"a"}}
    cache.remove_pod("default/holder")
    assert rejected(plugin, pod, Snapshot(cache)) == {}
    assert plugin.filter(pod, Snapshot(cache), CycleState()) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [("80", "must be an integer"), (70000, "must be 1-65535"), (-1, "must be 1-65535")],
)
def test_bad_host_port_is_a_field_error(value: object, message: str) -> None:
    pod = parse_pod(with_ports("bad", port(value)))
    assert [(e.field, message in e.message) for e in pod.errors] == [
        ("spec.containers[0].ports[0].hostPort", True)
    ]
    assert pod.host_ports == ()
