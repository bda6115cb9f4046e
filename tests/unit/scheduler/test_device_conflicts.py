"""Detection and reporting of a DRA device allocated to two ResourceClaims (what kube-scheduler
and gpu-scheduler sharing a pool, or a stale leader, can leave)."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from scheduler.core.conflicts import (
    DEVICE_REASON,
    ConflictMonitor,
    DeviceConflict,
    find_device_conflicts,
)
from scheduler.kube.leader import AlwaysLeader
from scheduler.model.claims import parse_resource_claim
from scheduler.model.devices import parse_resource_slice
from scheduler.state.dra import DraStore
from tests.dra_objects import DRIVER, allocated, pod_ref, resource_claim, resource_slice, result
from tests.unit.scheduler.builders import cluster, make_node

SHARE_A = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a01"
SHARE_B = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a02"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str, str]] = []

    def emit(self, ref: Any, type_: str, reason: str, action: str, note: str) -> bool:
        self.events.append((ref.kind, ref.namespace, ref.name, reason, note))
        return True


def claim(name: str, *results: dict[str, Any], pod: str | None = None) -> dict[str, Any]:
    reserved = [pod_ref(pod, f"uid-{pod}")] if pod else []
    return resource_claim(
        name,
        status=allocated(*results, reserved_for=reserved),
        metadata={"uid": f"uid-{name}", "resourceVersion": "1"},
    )


def store_of(*claims: dict[str, Any], node: str | None = "node-a") -> DraStore:
    store = DraStore()
    spread: dict[str, Any] = {} if node else {"allNodes": True}
    store.put_slice(
        parse_resource_slice(resource_slice("slice-a", node=node, pool="node-a", **spread))
    )
    for raw in claims:
        store.put_claim(parse_resource_claim(raw))
    return store


def test_claims_on_distinct_devices_do_not_conflict() -> None:
    store = store_of(
        claim("a", result("gpus", "gpu-0"), result("gpus", "gpu-1")),
        claim("b", result("gpus", "gpu-2")),
    )
    assert find_device_conflicts(store) == []


def test_a_device_allocated_to_two_claims_is_found_with_their_pods_and_node() -> None:
    store = store_of(
        claim("a", result("gpus", "gpu-0"), result("gpus", "gpu-1"), pod="pa"),
        claim("b", result("gpus", "gpu-1"), result("gpus", "gpu-2"), pod="pb"),
        claim("c", result("gpus", "gpu-3")),
    )
    assert find_device_conflicts(store) == [
        DeviceConflict(
            (DRIVER, "node-a", "gpu-1"),
            ("default/a", "default/b"),
            (("default/pa", "uid-pa"), ("default/pb", "uid-pb")),
            "node-a",
        )
    ]


def test_distinct_shares_do_not_conflict_but_the_same_share_or_a_whole_device_does() -> None:
    def shared(share: str) -> dict[str, Any]:
        return result("gpus", "gpu-0", shareID=share, consumedCapacity={"memory": "10Gi"})

    assert (
        find_device_conflicts(store_of(claim("a", shared(SHARE_A)), claim("b", shared(SHARE_B))))
        == []
    )
    same = find_device_conflicts(store_of(claim("a", shared(SHARE_A)), claim("b", shared(SHARE_A))))
    assert [c.claims for c in same] == [("default/a", "default/b")]
    whole = find_device_conflicts(
        store_of(claim("a", shared(SHARE_A)), claim("b", result("gpus", "gpu-0")))
    )
    assert [c.claims for c in whole] == [("default/a", "default/b")]


def test_admin_access_takes_no_device() -> None:
    store = store_of(
        claim("a", result("gpus", "gpu-0")),
        claim("monitor", result("gpus", "gpu-0", adminAccess=True)),
    )
    assert find_device_conflicts(store) == []


def test_only_the_claims_that_clash_are_named() -> None:
    """Three claims hold shares of one device; only the two with the same share conflict."""
    store = store_of(
        claim("a", result("gpus", "gpu-0", shareID=SHARE_A)),
        claim("b", result("gpus", "gpu-0", shareID=SHARE_B)),
        claim("c", result("gpus", "gpu-0", shareID=SHARE_B)),
    )
    (conflict,) = find_device_conflicts(store)
    assert conflict.claims == ("default/b", "default/c")


def test_the_monitor_reports_a_device_conflict_once_on_the_node_naming_both_claims() -> None:
    cache = cluster(make_node("node-a", gpus=0))
    cache.dra = store_of(
        claim("a", result("gpus", "gpu-0"), pod="pa"),
        claim("b", result("gpus", "gpu-0"), pod="pb"),
    )
    recorder = Recorder()
    monitor = ConflictMonitor(cache, recorder, AlwaysLeader("me"), lambda: True)  # type: ignore[arg-type]
    with capture_logs() as logs:
        assert len(monitor.scan()) == 1
        assert monitor.scan() == []  # still there: not again
    assert monitor.reported == 1
    (event,) = recorder.events
    assert event[:4] == ("Node", "", "node-a", DEVICE_REASON)
    assert f"device {DRIVER}/node-a/gpu-0" in event[4]
    assert "default/a, default/b" in event[4] and "default/pa, default/pb" in event[4]
    (line,) = [entry for entry in logs if entry["event"] == "device_conflict"]
    assert line["claims"] == ["default/a", "default/b"]
    assert line["log_level"] == "error"

    cache.dra.drop_claim("default/b")
    assert monitor.scan() == []
    cache.dra.put_claim(parse_resource_claim(claim("b", result("gpus", "gpu-0"))))
    assert len(monitor.scan()) == 1  # it came back: reported again
    assert monitor.reported == 2


def test_a_conflict_in_a_pool_of_several_nodes_is_reported_on_the_pods() -> None:
    cache = cluster(make_node("node-a", gpus=0))
    cache.dra = store_of(
        claim("a", result("gpus", "gpu-0"), pod="pa"),
        claim("b", result("gpus", "gpu-0"), pod="pb"),
        node=None,
    )
    assert not cache.dra.slices["slice-a"].node_selection.node_name
    recorder = Recorder()
    monitor = ConflictMonitor(cache, recorder, AlwaysLeader("me"), lambda: True)  # type: ignore[arg-type]
    with capture_logs():
        monitor.scan()
    assert [(kind, ns, name, reason) for kind, ns, name, reason, _ in recorder.events] == [
        ("Pod", "default", "pa", DEVICE_REASON),
        ("Pod", "default", "pb", DEVICE_REASON),
    ]
