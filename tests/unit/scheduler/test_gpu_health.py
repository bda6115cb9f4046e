"""Sick GPUs in the cache: never chosen, not free, named by the GPUHealth filter; DRA devices
with the sick GPU's UUID tainted in memory; the monitor applies verdicts, reports each change
once while leading and writes DeviceTaintRules only when asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reclaim.health import GpuRef, Sickness
from reclaim.prometheus import PrometheusUnavailable
from scheduler.config import config_from_data
from scheduler.core import health_task
from scheduler.core.health_task import GpuHealthMonitor
from scheduler.framework.snapshot import Snapshot
from scheduler.kube.device_taint_rules import UNHEALTHY_TAINT_KEY, health_rule_name
from scheduler.model.objects import parse_pod
from scheduler.plugins.gpu_health import GpuHealth
from scheduler.state.cache import ClusterCache
from scheduler.state.gpu_health import (
    apply_device_taints,
    devices_of_gpu,
    pods_on_devices,
    record_verdicts,
)
from scheduler.tools.explain import explain
from tests.dra_objects import (
    DRIVER,
    allocated,
    gpu_uuid,
    pod_ref,
    resource_claim,
    resource_slice,
    result,
)
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info, rejected
from tests.unit.scheduler.context import make_context
from tests.unit.scheduler.reclaim_doubles import Recorder
from topology.occupancy import choose_gpus

SICK = {3: "XID 79"}


def sick_cache(*pods: dict[str, Any]) -> ClusterCache:
    """Nodes n and m (8 GPUs each), GPU 3 of n sick, then `pods` added."""
    cache = cluster(make_node("n"), make_node("m"))
    assert cache.set_sick_gpus("n", SICK)
    for pod in pods:
        cache.add_pod(parse_pod(pod))
    return cache


def test_a_sick_gpu_is_not_free_and_never_chosen() -> None:
    cache = sick_cache()
    row = cache.row_of["n"]
    assert cache.free_per_domain[row].tolist() == [3, 4]
    topology = cache.nodes["n"].topology
    for count in range(1, 8):
        choice = choose_gpus(topology, cache.node_gpus_unavailable("n"), count)
        assert choice is not None and 3 not in choice.gpus
    assert choose_gpus(topology, cache.node_gpus_unavailable("n"), 8) is None


def test_a_pod_bound_without_gpu_indices_does_not_get_the_sick_gpu() -> None:
    cache = sick_cache(make_pod("p", gpus=4, node="n"))
    assert 3 not in cache.gpus_of("default/p")


def test_the_sick_set_survives_a_node_update_and_clears() -> None:
    cache = sick_cache()
    cache.add_or_update_node(cluster(make_node("n", labels={"x": "y"})).nodes["n"])
    assert bool(cache.gpu_sick[cache.row_of["n"], 3])
    assert not cache.set_sick_gpus("n", SICK)  # no change
    assert cache.set_sick_gpus("n", {})
    assert cache.free_per_domain[cache.row_of["n"]].tolist() == [4, 4]
    assert cache.sick_gpus == {}


def test_sick_gpus_of_a_node_not_known_yet_apply_when_it_appears() -> None:
    cache = ClusterCache()
    cache.set_sick_gpus("late", {0: "XID 48"})
    cache.add_or_update_node(cluster(make_node("late")).nodes["late"])
    assert cache.free_per_domain[cache.row_of["late"]].tolist() == [3, 4]


def test_the_filter_rejects_a_node_without_enough_healthy_gpus_and_names_them() -> None:
    snapshot = Snapshot(sick_cache())
    message = "node(s) had unhealthy GPUs (1 GPU unhealthy: GPU 3 XID 79)"
    assert rejected(GpuHealth(), pod_info(gpus=8), snapshot) == {message: {"n"}}
    assert rejected(GpuHealth(), pod_info(gpus=7), snapshot) == {}
    assert rejected(GpuHealth(), pod_info(gpus=0), snapshot) == {}


def test_a_sick_gpu_a_pod_already_holds_is_not_subtracted_twice() -> None:
    cache = sick_cache(make_pod("holder", gpus=1, node="n", gpu_indices="3"))
    assert cache.gpus_of("default/holder") == (3,)
    assert rejected(GpuHealth(), pod_info(gpus=7), Snapshot(cache)) == {}


def test_nodes_with_the_same_sick_gpus_share_one_reason() -> None:
    cache = sick_cache()
    cache.set_sick_gpus("m", {3: "XID 79"})
    found = rejected(GpuHealth(), pod_info(gpus=8), Snapshot(cache))
    assert list(found.values()) == [{"n", "m"}]


# -- DRA --------------------------------------------------------------------------------------


def dra_cache() -> ClusterCache:
    cache = cluster(make_node("node-a", gpus=0))
    cache.dra.put_slice(parse_slice(resource_slice("slice-a")))
    return cache


def parse_slice(obj: dict[str, Any]) -> Any:
    from scheduler.model.devices import parse_resource_slice

    return parse_resource_slice(obj)


def taints_of(cache: ClusterCache, device: str) -> list[tuple[str, str, str]]:
    pools = cache.dra.pools_for("node-a", {})
    return [
        (t.key, t.value, t.effect)
        for pool in pools
        for entry in pool.devices
        if entry.device.name == device
        for t in entry.device.taints
    ]


def test_the_device_with_the_sick_uuid_is_tainted_no_schedule_in_memory() -> None:
    cache = dra_cache()
    devices = devices_of_gpu(cache.dra, "node-a", gpu_uuid(3))
    assert devices == [(DRIVER, "node-a", "gpu-3")]
    assert devices_of_gpu(cache.dra, "node-b", gpu_uuid(3)) == []
    assert apply_device_taints(cache.dra, {devices[0]: "xid_79"})
    assert taints_of(cache, "gpu-3") == [(UNHEALTHY_TAINT_KEY, "xid_79", "NoSchedule")]
    assert taints_of(cache, "gpu-2") == []
    assert not apply_device_taints(cache.dra, {devices[0]: "xid_79"})
    assert apply_device_taints(cache.dra, {})
    assert taints_of(cache, "gpu-3") == []


def test_pods_holding_a_dra_device_are_found_through_their_claims() -> None:
    cache = dra_cache()
    status = allocated(result("gpus", "gpu-3"), reserved_for=[pod_ref("p", "uid-p")])
    from scheduler.model.claims import parse_resource_claim

    cache.dra.put_claim(parse_resource_claim(resource_claim("c", status=status)))
    cache.add_pod(parse_pod(make_pod("p", gpus=0, node="node-a")))
    holders = pods_on_devices(cache, [(DRIVER, "node-a", "gpu-3")])
    assert [pod.key for pod in holders] == ["default/p"]
    assert pods_on_devices(cache, [(DRIVER, "node-a", "gpu-2")]) == []


# -- the monitor ------------------------------------------------------------------------------


class Source:
    def __init__(self) -> None:
        self.verdicts: dict[GpuRef, Sickness] = {}
        self.fail = False

    async def sick_gpus(self) -> dict[GpuRef, Sickness]:
        if self.fail:
            raise PrometheusUnavailable("http://prometheus", "down")
        return dict(self.verdicts)


class Queue:
    def __init__(self) -> None:
        self.moves: list[str] = []

    def move_all_to_active_or_backoff(self, event: str) -> int:
        self.moves.append(event)
        return 0


def monitor(
    cache: ClusterCache, leader: bool = True, **health: Any
) -> tuple[GpuHealthMonitor, Source, Recorder, Queue]:
    recorder, source, queue = Recorder(), Source(), Queue()
    settings = config_from_data({"health": health}) if health else None
    context = make_context(cache, settings=settings, recorder=recorder, is_leader=lambda: leader)  # type: ignore[arg-type]
    return GpuHealthMonitor(context, queue, source), source, recorder, queue  # type: ignore[arg-type]


GPU3 = GpuRef("n", 3, "GPU-n-3")


def test_the_monitor_marks_sick_gpus_and_reports_each_change_once() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("holder", gpus=1, node="n", gpu_indices="3")])
    watcher, source, recorder, queue = monitor(cache)
    source.verdicts = {GPU3: Sickness(xid=79)}
    assert asyncio.run(watcher.refresh())
    assert cache.sick_gpus == {"n": {3: "XID 79"}}
    assert queue.moves == ["GPUHealthChange"]
    assert recorder.reasons("n") == ["GPUUnhealthy"]
    assert recorder.reasons("holder") == ["GPUUnhealthy"]
    assert "GPU 3 of node n (GPU-n-3)" in recorder.notes("GPUUnhealthy")[0]
    assert "XID 79" in recorder.notes("GPUUnhealthy")[0]
    assert watcher.unhealthy_counts() == {("n", "xid_79"): 1}

    assert not asyncio.run(watcher.refresh())  # same verdict: nothing new
    assert len(recorder.events) == 2

    source.verdicts = {GPU3: Sickness(xid=79, dbe_errors=1)}  # changed reason: reported again
    asyncio.run(watcher.refresh())
    assert recorder.reasons("n") == ["GPUUnhealthy", "GPUUnhealthy"]

    source.verdicts = {}
    assert asyncio.run(watcher.refresh())
    assert cache.sick_gpus == {}
    assert recorder.reasons("n")[-1] == "GPURecovered"
    assert watcher.unhealthy_counts() == {}


def test_prometheus_trouble_keeps_the_previous_verdicts() -> None:
    cache = cluster(make_node("n"))
    watcher, source, _, _ = monitor(cache)
    source.verdicts = {GPU3: Sickness(xid=79)}
    asyncio.run(watcher.refresh())
    source.fail = True
    assert not asyncio.run(watcher.refresh())
    assert cache.sick_gpus == {"n": {3: "XID 79"}}
    assert watcher.failures == 1


def test_a_follower_applies_verdicts_but_reports_nothing() -> None:
    cache = cluster(make_node("n"))
    watcher, source, recorder, _ = monitor(cache, leader=False)
    source.verdicts = {GPU3: Sickness(xid=79)}
    asyncio.run(watcher.refresh())
    assert cache.sick_gpus == {"n": {3: "XID 79"}}
    assert recorder.events == []


def dra_monitor(
    monkeypatch: pytest.MonkeyPatch, write: bool
) -> tuple[GpuHealthMonitor, Source, list[str]]:
    calls: list[str] = []

    async def create(api_client: Any, body: dict[str, Any], timeout: float) -> bool:
        calls.append(f"create {body['metadata']['name']} {body['spec']['taint']['value']}")
        return True

    async def delete(api_client: Any, name: str, timeout: float) -> bool:
        calls.append(f"delete {name}")
        return True

    monkeypatch.setattr(health_task, "create_rule", create)
    monkeypatch.setattr(health_task, "delete_rule", delete)
    watcher, source, _, _ = monitor(dra_cache(), writeDeviceTaintRules=write)
    source.verdicts = {GpuRef("node-a", 3, gpu_uuid(3)): Sickness(xid=79)}
    return watcher, source, calls


def test_dra_sick_gpu_rules_are_written_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    watcher, _, calls = dra_monitor(monkeypatch, write=False)
    asyncio.run(watcher.refresh())
    assert taints_of(watcher.context.cache, "gpu-3")  # in memory regardless
    assert calls == []


def test_dra_sick_gpu_rule_is_created_then_deleted_on_recovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watcher, source, calls = dra_monitor(monkeypatch, write=True)
    name = health_rule_name(DRIVER, "node-a", "gpu-3")
    asyncio.run(watcher.refresh())
    assert calls == [f"create {name} xid_79"]
    # The informer delivers the written rule; the next period finds it and writes nothing.
    from scheduler.kube.device_taint_rules import health_rule_body
    from scheduler.model.device_classes import parse_device_taint_rule

    rule = parse_device_taint_rule(health_rule_body(DRIVER, "node-a", "gpu-3", "xid_79", "gs"))
    watcher.context.cache.dra.put_taint_rule(name, rule)
    asyncio.run(watcher.refresh())
    assert calls == [f"create {name} xid_79"]
    source.verdicts = {}
    asyncio.run(watcher.refresh())
    assert calls[-1] == f"delete {name}"
    assert taints_of(watcher.context.cache, "gpu-3") != []  # the API rule stays until deleted


def test_explain_names_the_sick_gpu() -> None:
    from scheduler.config import SchedulerConfig
    from scheduler.core.profile import default_framework

    objects = [{**make_node("n"), "kind": "Node"}, {**make_node("m", gpus=4), "kind": "Node"}]
    rows = explain(
        make_pod("want", gpus=8),
        objects,
        default_framework(SchedulerConfig()),
        {GPU3: Sickness(xid=79)},
    )
    by_node = {row["node"]: row for row in rows}
    assert by_node["n"]["feasible"] is False
    assert by_node["n"]["unhealthy_gpus"] == {"3": "XID 79"}
    assert any("GPU 3 XID 79" in reason for reason in by_node["n"]["reasons"])
    assert "unhealthy_gpus" not in by_node["m"]


def test_record_verdicts_clears_nodes_no_longer_named() -> None:
    cache = cluster(make_node("n"), make_node("m"))
    record_verdicts(cache, {GPU3: Sickness(xid=79), GpuRef("m", 0): Sickness(dbe_errors=1)})
    assert set(cache.sick_gpus) == {"n", "m"}
    changed, _ = record_verdicts(cache, {GPU3: Sickness(xid=79)})
    assert changed and set(cache.sick_gpus) == {"n"}


def test_nothing_is_reported_before_the_caches_are_synced() -> None:
    cache = cluster(make_node("n"))
    watcher, source, recorder, _ = monitor(cache)
    synced = False
    watcher.synced = lambda: synced
    source.verdicts = {GPU3: Sickness(xid=79)}
    asyncio.run(watcher.refresh())
    assert cache.sick_gpus and recorder.events == []
    synced = True
    asyncio.run(watcher.refresh())
    assert recorder.reasons("n") == ["GPUUnhealthy"]


def test_rule_names_are_stable_dns_names_and_values_label_values() -> None:
    import re

    from scheduler.kube.device_taint_rules import taint_value

    name = health_rule_name(DRIVER, "node-a", "gpu-3")
    assert name == health_rule_name(DRIVER, "node-a", "gpu-3")
    assert name != health_rule_name(DRIVER, "node-a", "gpu-2")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63
    assert taint_value(("xid_79", "ecc_dbe")) == "xid_79.ecc_dbe"
    long = taint_value(tuple(f"xid_{i}" for i in range(100, 130)))
    assert len(long) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", long)


def test_explain_reads_no_health_without_a_prometheus() -> None:
    from scheduler.config import SchedulerConfig
    from scheduler.tools.explain_health import read_sick_gpus

    assert asyncio.run(read_sick_gpus(SchedulerConfig())) == {}
