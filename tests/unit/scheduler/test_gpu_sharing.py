"""Time-sliced and MPS GPUs: the node's sharing parsed, replicas counted per physical GPU in the
cache, the GpuSharing filter and score, and the placement packing or spreading replicas."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.config import SchedulerConfig, SharingConfig
from scheduler.core.placement import place
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.gpu_sharing import (
    GPU_RESOURCE,
    MPS,
    SHARED_RESOURCE,
    TIME_SLICING,
    GpuSharing,
    parse_gpu_sharing,
)
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.gpu_sharing import REFUSED_REASON, ReplicaPlacement
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import Json, cluster, make_container, make_node, make_pod
from topology.replicas import PACK, SPREAD


def shared_node(
    name: str = "ts",
    *,
    gpus: int = 8,
    replicas: int = 4,
    strategy: str = TIME_SLICING,
    renamed: bool = False,
    count_label: bool = True,
) -> Json:
    """A node whose device plugin shares `gpus` GPUs `replicas` times, labelled as GPU feature
    discovery labels it."""
    labels = {
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" + ("" if renamed else "-SHARED"),
    }
    if count_label:
        labels["nvidia.com/gpu.count"] = str(gpus)
    node = make_node(name, gpus=0 if renamed else gpus * replicas, labels=labels)
    if renamed:
        for key in ("allocatable", "capacity"):
            node["status"][key][SHARED_RESOURCE] = str(gpus * replicas)
    return node


def shared_pod(name: str, replicas: int = 1, node: str | None = None, **kwargs: Any) -> Json:
    """A pod asking for `replicas` of nvidia.com/gpu.shared."""
    container = make_container(limits={SHARED_RESOURCE: str(replicas)}, cpu="100m")
    return make_pod(name, gpus=0, containers=[container], node=node, **kwargs)


# -- parsing ---------------------------------------------------------------------------------------


def test_time_sliced_node_has_its_physical_gpus_and_replicas() -> None:
    node = parse_node(shared_node())
    assert node.sharing == GpuSharing(TIME_SLICING, 4, 8, GPU_RESOURCE)
    assert node.topology.gpu_count == 8
    assert node.errors == ()


def test_renamed_resource_and_missing_count_label() -> None:
    node = parse_node(shared_node(renamed=True, count_label=False, replicas=10, gpus=3))
    assert node.sharing == GpuSharing(TIME_SLICING, 10, 3, SHARED_RESOURCE)
    assert node.topology.gpu_count == 3


@pytest.mark.parametrize(
    ("labels", "shared"),
    [
        ({"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"}, False),
        ({"nvidia.com/gpu.replicas": "4"}, False),
        ({"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"}, True),
    ],
)
def test_only_a_sharing_strategy_with_replicas_shares(labels: dict[str, str], shared: bool) -> None:
    sharing = parse_gpu_sharing(labels, {GPU_RESOURCE: 32}, [])
    assert (sharing is not None) == shared


def test_bad_replicas_label_is_reported_and_gpus_read_whole() -> None:
    errors: list[Any] = []
    labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "x"}
    assert parse_gpu_sharing(labels, {GPU_RESOURCE: 8}, errors) is None
    assert "nvidia.com/gpu.replicas" in errors[0].field
    errors.clear()
    labels["nvidia.com/gpu.replicas"] = "4"
    labels["nvidia.com/gpu.count"] = "2"
    assert parse_gpu_sharing(labels, {GPU_RESOURCE: 12}, errors) is None
    assert "exceed" in errors[0].message


# -- the cache -------------------------------------------------------------------------------------


def taken(cache: ClusterCache, node: str = "ts") -> list[int]:
    row = cache.row_of[node]
    return [int(t) for t in cache.replicas.taken[row, :8]]


def test_pods_naming_the_same_gpu_share_it_up_to_its_replicas() -> None:
    pods = [make_pod(f"p{i}", gpus=1, node="ts", gpu_indices="0") for i in range(5)]
    cache = cluster(shared_node(), pods=pods)
    # four replicas of GPU 0; the fifth pod cannot have GPU 0 and is counted where the plugin's
    # default (distributed) policy puts it: the emptiest GPU
    assert taken(cache) == [4, 1, 0, 0, 0, 0, 0, 0]
    assert cache.gpus_of("default/p4") == (1,)
    used = cache.node_gpus_used("ts")
    assert used[:2].all() and not used[2:].any()
    cache.remove_pod("default/p0")
    assert taken(cache) == [3, 1, 0, 0, 0, 0, 0, 0]


def test_unannotated_replicas_spread_like_the_device_plugin_default() -> None:
    pods = [shared_pod(f"p{i}", node="ts") for i in range(3)]
    cache = cluster(shared_node(renamed=True), pods=pods)
    assert taken(cache) == [1, 1, 1, 0, 0, 0, 0, 0]


def test_node_update_recounts_replicas() -> None:
    cache = cluster(shared_node(), pods=[make_pod("p", gpus=1, node="ts", gpu_indices="5")])
    cache.add_or_update_node(parse_node(shared_node()))
    assert taken(cache) == [0, 0, 0, 0, 0, 1, 0, 0]
    cache.add_or_update_node(parse_node(make_node("ts", gpus=8)))  # sharing switched off
    assert cache.replicas.per_gpu[cache.row_of["ts"]] == 0
    assert cache.gpus_of("default/p") == (5,)


def test_observed_gpus_of_sharers_are_kept() -> None:
    pods = [make_pod(f"p{i}", gpus=1, node="ts", gpu_indices=str(i)) for i in range(2)]
    cache = cluster(shared_node(), pods=pods)
    changed = cache.correct_node_gpus("ts", {"default/p0": (3,), "default/p1": (3,)})
    assert changed == ["default/p0", "default/p1"]
    assert taken(cache) == [0, 0, 0, 2, 0, 0, 0, 0]


# -- filter and score ------------------------------------------------------------------------------


def test_filter_refuses_multi_replica_pods_on_mps_and_when_configured() -> None:
    cache = cluster(shared_node("ts"), shared_node("mps", strategy=MPS), make_node("whole"))
    snapshot = Snapshot(cache)
    two = parse_pod(make_pod("two", gpus=2))

    def rejected(plugin: ReplicaPlacement) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for rejection in plugin.filter(two, snapshot, CycleState()):
            rows = np.flatnonzero(rejection.failed)
            found[rejection.reason] = {snapshot.names[r] for r in rows}
        return found

    assert rejected(ReplicaPlacement()) == {REFUSED_REASON: {"mps"}}
    assert rejected(ReplicaPlacement(fail_requests_greater_than_one=True)) == {
        REFUSED_REASON: {"mps", "ts"}
    }


def test_filter_needs_as_many_gpus_with_a_free_replica_as_replicas_asked() -> None:
    pods = [make_pod(f"p{i}", gpus=1, node="ts", gpu_indices=str(i // 2)) for i in range(6)]
    cache = cluster(shared_node(gpus=4, replicas=2), pods=pods)  # GPUs 0-2 full, 3 free
    snapshot = Snapshot(cache)
    plugin = ReplicaPlacement()
    one = plugin.filter(parse_pod(make_pod("one", gpus=1)), snapshot, CycleState())
    two = plugin.filter(parse_pod(make_pod("two", gpus=2)), snapshot, CycleState())
    assert one == []
    assert [(r.reason, r.resolvable, bool(r.failed[0])) for r in two] == [
        ("node(s) had fewer than 2 GPUs with a free replica", True, True)
    ]


def test_score_pack_prefers_the_partly_used_node_and_spread_the_empty_one() -> None:
    pods = [make_pod("p", gpus=1, node="used", gpu_indices="0")]
    cache = cluster(shared_node("used"), shared_node("empty"), make_node("whole"), pods=pods)
    snapshot = Snapshot(cache)
    pod = parse_pod(make_pod("new", gpus=1))
    feasible = np.ones(snapshot.rows, dtype=bool)
    pack = ReplicaPlacement(PACK).score(pod, snapshot, CycleState(), feasible)
    spread = ReplicaPlacement(SPREAD).score(pod, snapshot, CycleState(), feasible)
    assert pack is not None and spread is not None
    used, empty, whole = (cache.row_of[n] for n in ("used", "empty", "whole"))
    assert pack[used] > pack[empty] == pack[whole]
    assert spread[empty] == spread[whole] > spread[used]
    assert (
        ReplicaPlacement().score(
            parse_pod(make_pod("cpu", gpus=0)), snapshot, CycleState(), feasible
        )
        is None
    )


@pytest.mark.parametrize("seed", range(5))
def test_pack_and_spread_through_the_whole_cycle(seed: int) -> None:
    """Random sharers already bound; then four one-replica pods: pack keeps every GPU that was
    whole still whole when a partly used GPU has room, spread never stacks a replica on a GPU
    while a less used one is open."""
    rng = np.random.default_rng(seed)
    for policy in (PACK, SPREAD):
        settings = SchedulerConfig(sharing=SharingConfig(time_sliced_placement=policy))
        framework = default_framework(settings)
        bound = [
            make_pod(f"b{i}", gpus=1, node="ts", gpu_indices=str(int(rng.integers(0, 8))))
            for i in range(int(rng.integers(0, 10)))
        ]
        cache = cluster(shared_node(), pods=bound)
        for i in range(4):
            before = np.array(taken(cache))
            pod = parse_pod(make_pod(f"new{i}", gpus=1))
            evaluation = framework.evaluate(pod, Snapshot(cache))
            placement = place(cache, pod, evaluation, policy)
            (gpu,) = placement.gpus
            open_gpus = before < 4
            if policy == PACK:
                assert before[gpu] == before[open_gpus].max()
            else:
                assert before[gpu] == before[open_gpus].min()
            cache.assume(pod, placement.node, placement.gpus)
            assert taken(cache)[gpu] == before[gpu] + 1


@pytest.mark.parametrize("renamed", [False, True])
def test_four_pods_pack_on_one_gpu_or_spread_on_four(renamed: bool) -> None:
    for policy, expected in ((PACK, {(0,)}), (SPREAD, {(0,), (1,), (2,), (3,)})):
        settings = SchedulerConfig(sharing=SharingConfig(time_sliced_placement=policy))
        framework = default_framework(settings)
        cache = cluster(shared_node(renamed=renamed))
        chosen = set()
        for i in range(4):
            raw = shared_pod(f"p{i}") if renamed else make_pod(f"p{i}", gpus=1)
            pod = parse_pod(raw)
            placement = place(cache, pod, framework.evaluate(pod, Snapshot(cache)), policy)
            assert placement.annotations()["gpu-scheduler.io/gpus"] == ",".join(
                map(str, placement.gpus)
            )
            cache.assume(pod, placement.node, placement.gpus)
            chosen.add(placement.gpus)
        assert chosen == expected, policy


def test_a_sharer_holds_its_replicas_also_when_they_are_renamed() -> None:
    from scheduler.state.gpu_holdings import GpuHoldings

    pods = [shared_pod("a", 1, node="ts"), make_pod("b", gpus=1, node="whole")]
    cache = cluster(shared_node(renamed=True), make_node("whole"), pods=pods)
    holdings = GpuHoldings(cache, ())
    assert holdings.of(cache.pods["default/a"].info, "ts") == 1
    assert holdings.of(cache.pods["default/b"].info, "whole") == 1


def test_a_sick_gpu_offers_no_replica() -> None:
    pods = [make_pod("p", gpus=1, node="ts", gpu_indices="0")]
    cache = cluster(shared_node(gpus=2, replicas=4), pods=pods)
    cache.set_sick_gpus("ts", {0: "XID 79"})
    framework = default_framework(SchedulerConfig())
    pod = parse_pod(make_pod("new", gpus=1))
    placement = place(cache, pod, framework.evaluate(pod, Snapshot(cache)), PACK)
    assert placement.gpus == (1,)  # pack would fill GPU 0, but it is sick
    two = parse_pod(make_pod("two", gpus=2))
    rejections = ReplicaPlacement().filter(two, Snapshot(cache), CycleState())
    assert [r.reason for r in rejections] == ["node(s) had fewer than 2 GPUs with a free replica"]
    assert taken(cache)[:2] == [1, 0]  # the pod on the sick GPU still counts
