"""Informer stores keep trimmed objects, a deleted pod is read by `pod_ref`, and quantity strings
are memoised: the scheduler must see the same pods and nodes as from the whole objects."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from typing import Any

import numpy as np

from scheduler.core.handlers import NodeHandler, PodHandler
from scheduler.core.queue import SchedulingQueue
from scheduler.gangs.tracker import GangTracker, gang_key
from scheduler.kube.informer import Informer, InformerOptions
from scheduler.model.objects import (
    COSCHEDULING_LABEL,
    NodeInfo,
    PodInfo,
    parse_node,
    parse_pod,
    pod_ref,
)
from scheduler.model.stored import trim_node, trim_pod
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import make_node, make_pod
from tests.unit.scheduler.context import make_context
from tests.unit.scheduler.test_core_cache import Answer

Json = dict[str, Any]

MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]


def rich_pod(name: str = "rich", **changes: Any) -> Json:
    """A pod using most of what `parse_pod` reads, plus the bulk the stores drop."""
    pod = make_pod(
        name,
        gpus=2,
        node="n1",
        phase="Running",
        gpu_indices="0,1",
        nvlink_policy="required",
        node_selector={"type": "kwok"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}
                ]
            }
        },
        priority=7,
    )
    pod["metadata"]["labels"] = {"app": "x", COSCHEDULING_LABEL: "team"}
    pod["metadata"]["managedFields"] = copy.deepcopy(MANAGED)
    pod["metadata"]["deletionTimestamp"] = "2024-05-01T10:05:00Z"
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    pod["spec"]["schedulingGates"] = [{"name": "wait"}]
    pod["status"].update(
        {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2024-05-01T10:01:00Z",
                }
            ],
            "startTime": "2024-05-01T10:02:00Z",
            "nominatedNodeName": "n2",
            "containerStatuses": [{"name": "main", "ready": True, "image": "x" * 200}],
            "podIP": "10.0.0.1",
            "qosClass": "Burstable",
        }
    )
    for key, value in changes.items():
        pod["spec"][key] = value
    return pod


def same_pod(a: PodInfo, b: PodInfo) -> bool:
    return all(
        np.array_equal(getattr(a, f.name), getattr(b, f.name))
        if f.name == "requests"
        else getattr(a, f.name) == getattr(b, f.name)
        for f in dataclasses.fields(PodInfo)
    )


def same_node(a: NodeInfo, b: NodeInfo) -> bool:
    return all(
        np.array_equal(getattr(a, f.name), getattr(b, f.name))
        if f.name == "allocatable"
        else getattr(a, f.name) == getattr(b, f.name)
        for f in dataclasses.fields(NodeInfo)
    )


def test_trim_pod_drops_the_bulk_and_parse_pod_sees_the_same_pod() -> None:
    whole = rich_pod()
    trimmed = trim_pod(copy.deepcopy(whole))
    assert "managedFields" not in trimmed["metadata"]
    assert set(trimmed["status"]) == {"phase", "conditions", "startTime", "nominatedNodeName"}
    before, after = parse_pod(whole), parse_pod(trimmed)
    assert before.scheduled_at is not None and before.pod_group and before.pod_affinity
    assert same_pod(before, after)


def test_trim_node_drops_the_bulk_and_parse_node_sees_the_same_node() -> None:
    whole = make_node(
        "n1", gpus=8, domains="0-3,4-7", taints=[{"key": "k", "effect": "NoSchedule"}]
    )
    whole["metadata"]["managedFields"] = copy.deepcopy(MANAGED)
    whole["status"].update(
        {
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["x" * 100], "sizeBytes": 1}],
            "capacity": {"cpu": "64"},
        }
    )
    trimmed = trim_node(copy.deepcopy(whole))
    assert "managedFields" not in trimmed["metadata"]
    assert set(trimmed["status"]) == {"allocatable"}
    assert same_node(parse_node(whole), parse_node(trimmed))


def test_pod_ref_agrees_with_parse_pod() -> None:
    labelled = rich_pod("labelled")
    grouped = rich_pod("grouped", schedulingGroup={"podGroupName": "pg"})
    plain = make_pod("plain", namespace="team-a")
    kueue = make_pod("kueue-member")
    kueue["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "trainers"}
    broken = {"metadata": "not an object", "spec": []}
    assert pod_ref(kueue).pod_group.endswith("trainers")
    for obj in (labelled, grouped, plain, kueue, broken):
        ref, info = pod_ref(obj), parse_pod(obj)
        assert (ref.key, ref.namespace, ref.name, ref.uid, ref.pod_group) == (
            info.key,
            info.namespace,
            info.name,
            info.uid,
            info.pod_group,
        )
    assert pod_ref(grouped).pod_group == "pg"
    assert pod_ref(labelled).pod_group == "scheduling.x-k8s.io/team"


def test_memoised_quantities_keep_errors_and_units_apart() -> None:
    bad = make_pod("bad", cpu="lots")
    for _ in range(2):  # the second parse must report it again, not reuse a cached value
        assert [e.field for e in parse_pod(bad).errors] == [
            "spec.containers[0].resources.requests.cpu"
        ]
    one_cpu = parse_pod(make_pod("c", cpu="1", gpus=1))
    assert int(one_cpu.requests[0]) == 1000 and one_cpu.gpus == 1  # "1": millicores vs units


def test_deleting_a_gang_member_tells_the_tracker_its_gang() -> None:
    cache = ClusterCache()
    queue: SchedulingQueue[PodInfo] = SchedulingQueue()
    gangs = GangTracker()
    gone: list[tuple[str, str]] = []
    handler = PodHandler(make_context(cache), queue, gangs=gangs)
    member = make_pod("m", namespace="team-a")
    member["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
    handler.on_add(member)
    original = gangs.pod_gone

    def recording(key: str, gang: str = "") -> None:
        gone.append((key, gang))
        original(key, gang)

    gangs.pod_gone = recording  # type: ignore[method-assign]
    handler.on_delete(member)
    assert gone == [("team-a/m", gang_key(parse_pod(member)))] == [("team-a/m", "team-a/pg")]
    assert "team-a/m" not in queue and "team-a/m" not in gangs.held


class WatchBody:
    """A watch response: the given events as JSON lines, then the end of the stream."""

    def __init__(self, events: list[Json]) -> None:
        self.status, self.reason = 200, "OK"
        self.content = self
        self._chunks = [b"".join(json.dumps(e).encode() + b"\n" for e in events), b""]

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def release(self) -> None:
        pass


class Source:
    """One list, then one watch carrying `events`; later watches wait forever."""

    def __init__(self, items: list[Json], events: list[Json]) -> None:
        self.items, self.events = items, events
        self.watches = 0
        self.done = asyncio.Event()
        self.never = asyncio.Event()

    async def __call__(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            body = {"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": self.items}
            return Answer(200, copy.deepcopy(body))
        self.watches += 1
        if self.watches == 1:
            return WatchBody(self.events)
        self.done.set()
        await self.never.wait()
        raise AssertionError("unreachable")


async def run_until_watched(informer: Informer, source: Source) -> None:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(source.done.wait(), 30)
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_pod_store_is_trimmed_and_updates_that_matter_reach_the_cache() -> None:
    cache = ClusterCache()
    cache.add_or_update_node(parse_node(make_node("n1", gpus=8)))
    queue: SchedulingQueue[PodInfo] = SchedulingQueue()
    handler = PodHandler(make_context(cache), queue)
    pending = make_pod("a", gpus=2)
    pending["metadata"]["managedFields"] = copy.deepcopy(MANAGED)
    bound = make_pod("a", gpus=2, node="n1", phase="Running")
    bound["metadata"]["resourceVersion"] = "2"
    bound["status"]["containerStatuses"] = [{"name": "main"}]
    status_only = copy.deepcopy(bound)
    status_only["metadata"]["resourceVersion"] = "3"
    status_only["status"]["podIP"] = "10.0.0.9"
    other = make_pod("b", gpus=1, node="n1", phase="Running")
    other["metadata"]["resourceVersion"] = "4"
    source = Source(
        [pending, other],
        [
            {"type": "MODIFIED", "object": bound},
            {"type": "MODIFIED", "object": status_only},
            {"type": "DELETED", "object": other},
        ],
    )
    informer = Informer("pods", source, handler, InformerOptions(trim=trim_pod))
    await run_until_watched(informer, source)
    stored = informer.get("default/a")
    assert stored is not None and stored["metadata"]["resourceVersion"] == "3"
    assert "managedFields" not in stored["metadata"]
    assert set(stored["status"]) <= {"phase", "conditions", "startTime", "nominatedNodeName"}
    assert "default/a" in cache.pods and "default/a" not in queue  # the bind was applied
    assert int(cache.node_gpus_used("n1").sum()) == 2
    assert "default/b" not in cache.pods and informer.get("default/b") is None


async def test_node_store_is_trimmed_and_a_change_of_allocatable_reaches_the_cache() -> None:
    cache = ClusterCache()
    queue: SchedulingQueue[PodInfo] = SchedulingQueue()
    node = make_node("n1", gpus=8)
    node["metadata"]["resourceVersion"] = "1"
    node["metadata"]["managedFields"] = copy.deepcopy(MANAGED)
    node["status"]["images"] = [{"names": ["img"], "sizeBytes": 1}]
    fewer = make_node("n1", gpus=4)
    fewer["metadata"]["resourceVersion"] = "2"
    source = Source([node], [{"type": "MODIFIED", "object": fewer}])
    informer = Informer(
        "nodes", source, NodeHandler(cache, queue, None), InformerOptions(trim=trim_node)
    )
    await run_until_watched(informer, source)
    stored = informer.get("n1")
    assert stored is not None and set(stored["status"]) == {"allocatable"}
    assert "managedFields" not in stored["metadata"]
    assert cache.nodes["n1"].allocatable[4] == 4


async def test_the_default_trim_drops_managed_fields_only() -> None:
    class Keep:
        def __init__(self) -> None:
            self.seen: list[Json] = []

        def on_add(self, obj: Json) -> None:
            self.seen.append(obj)

        def on_update(self, old: Json, new: Json) -> None:
            self.seen.append(new)

        def on_delete(self, obj: Json) -> None:
            pass

    item = {
        "metadata": {"name": "x", "resourceVersion": "1", "managedFields": MANAGED},
        "status": {"anything": 1},
    }
    changed = copy.deepcopy(item)
    changed["metadata"]["resourceVersion"] = "2"
    source = Source([item], [{"type": "MODIFIED", "object": changed}])
    handler = Keep()
    await run_until_watched(Informer("things", source, handler), source)
    assert len(handler.seen) == 2
    for obj in handler.seen:  # the handler sees what the store keeps
        assert "managedFields" not in obj["metadata"] and obj["status"] == {"anything": 1}
