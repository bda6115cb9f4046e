"""GpuFragmentation: expected free GPU left without enough cpu or memory, learned from the GPU
pods and shares seen, computed per resource state (NodeResources); the room on shared GPUs
counts as free GPU, and CPU-only pods are steered to nodes without free GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import ConfigError, config_from_data
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.model.resources import CPU, GPU, MEMORY
from scheduler.plugins.gpu_fragmentation import (
    GRID,
    NEUTRAL_POINTS,
    POINTS_PER_GPU,
    STEER_SHARE,
    GpuFragmentation,
    IntArray,
    NodeResources,
    host_share,
    waste_table,
)
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info

GI = 2**30


def score(plugin: GpuFragmentation, pod: PodInfo, cache: ClusterCache) -> object:
    snapshot = Snapshot(cache)
    feasible = snapshot.valid.copy()
    return plugin.score(pod, snapshot, CycleState(), feasible)


def points_by_node(plugin: GpuFragmentation, pod: PodInfo, cache: ClusterCache) -> dict[str, float]:
    points = score(plugin, pod, cache)
    assert isinstance(points, np.ndarray)
    return {name: float(points[row]) for row, name in enumerate(cache.names)}


def trained(*pods: PodInfo) -> GpuFragmentation:
    plugin = GpuFragmentation()
    for pod in pods:
        plugin.learn(pod)
    return plugin


# The GPU pods seen: 11 cores and 44 GiB per GPU; the 8-GPU nodes below have 12 and 48.
TYPICAL = pod_info("typical", gpus=1, cpu="11", memory="44Gi")


# -- the waste table ---------------------------------------------------------------------------


def test_table_is_one_without_cpu_and_zero_with_enough() -> None:
    demand = np.array([[12_000.0, 48.0 * GI]])
    table, step_c, step_m = waste_table(demand, np.ones(1))
    phi = table.reshape(GRID, GRID)
    assert phi[0, 0] == 1.0  # no cpu, no memory per free GPU: every free GPU wasted
    assert phi[GRID - 1, GRID - 1] == 0.0  # the whole demand per free GPU: none wasted
    assert phi[GRID - 1, 0] == 1.0  # enough cpu, no memory: still wasted
    half = round(6_000 / step_c)
    assert phi[half, GRID - 1] == pytest.approx(0.5, abs=0.02)  # half the cpu: half wasted
    assert step_m == pytest.approx(48.0 * GI / (GRID - 1))


def test_table_weights_the_demands_by_frequency() -> None:
    demand = np.array([[4_000.0, 1.0 * GI], [16_000.0, 1.0 * GI]])
    table, step_c, _ = waste_table(demand, np.array([3.0, 1.0]))
    phi = table.reshape(GRID, GRID)
    eight_cores = round(8_000 / step_c)
    # 8 cores per GPU serve the 4-core pods (3 of 4) and half of a 16-core pod's need.
    assert phi[eight_cores, GRID - 1] == pytest.approx(0.25 * 0.5, abs=0.01)


# -- GpuFragmentation --------------------------------------------------------------------------


def test_abstains_until_it_has_seen_a_gpu_pod() -> None:
    cache = cluster(make_node("a"), make_node("b", gpus=0))
    plugin = GpuFragmentation()
    assert score(plugin, pod_info("cpu-only", gpus=0, cpu="8", memory="8Gi"), cache) is None


def test_abstains_when_every_node_keeps_its_gpus_usable() -> None:
    cache = cluster(
        make_node("a", cpu="96", memory="384Gi"),
        make_node("b", gpus=2, domains="0-1", cpu="104", memory="512Gi"),
    )
    plugin = trained(TYPICAL)
    assert score(plugin, pod_info("small", gpus=1, cpu="1", memory="1Gi"), cache) is None


def gpu_cpu_full(cpu: str, memory: str) -> ClusterCache:
    """ "gpu" with 8 free GPUs, "cpu" without GPUs, "full" with its 8 GPUs taken; each with
    `cpu` and `memory`."""
    return cluster(
        make_node("gpu", cpu=cpu, memory=memory),
        make_node("cpu", gpus=0, cpu=cpu, memory=memory),
        make_node("full", cpu=cpu, memory=memory),
        pods=[make_pod("hog", gpus=8, cpu="8", memory="8Gi", node="full")],
    )


def test_cpu_only_pod_goes_where_it_strands_no_gpu() -> None:
    # "gpu" has exactly the cpu its 8 GPUs need; "full" has cpu to spare
    cache = gpu_cpu_full("96", "384Gi")
    plugin = trained(TYPICAL)
    points = points_by_node(plugin, pod_info("cpu-only", gpus=0, cpu="24", memory="8Gi"), cache)
    assert points["cpu"] == points["full"] == NEUTRAL_POINTS
    # 72 cores left for 8 GPUs, 9 each of the 11 a GPU pod needs: 8 * 2/11 GPUs short; and
    # the steering: a quarter of the free cpu beside 8 free GPUs is 2 GPUs' cpu.
    short = 8 * 2 / 11 + STEER_SHARE * 2
    assert points["gpu"] == pytest.approx(NEUTRAL_POINTS - short * POINTS_PER_GPU, abs=1.0)


def test_cpu_only_pods_are_steered_off_free_gpus_where_nothing_is_stranded() -> None:
    cache = gpu_cpu_full("192", "768Gi")  # cpu and memory to spare: nothing stranded anywhere
    plugin = trained(TYPICAL)
    small = pod_info("small", gpus=0, cpu="12", memory="8Gi")
    points = points_by_node(plugin, small, cache)
    assert points["cpu"] == points["full"] == NEUTRAL_POINTS
    # 12 of 192 cores beside 8 free GPUs: half a GPU's cpu, a quarter of it counted
    steer = STEER_SHARE * 8 * 12 / 192
    assert points["gpu"] == pytest.approx(NEUTRAL_POINTS - steer * POINTS_PER_GPU, abs=0.01)
    unsteered = GpuFragmentation(steer_cpu_only=False)
    unsteered.learn(TYPICAL)
    assert score(unsteered, small, cache) is None  # no waste anywhere: no preference
    # a GPU pod is not steered
    assert score(plugin, pod_info("gpu-pod", gpus=1, cpu="1", memory="1Gi"), cache) is None


def test_host_share_counts_the_gpus_whose_cpu_or_memory_a_pod_takes() -> None:
    free = np.array([[8, 0, 2.5], [64_000, 64_000, 0], [512.0, 64.0, 100.0]], dtype=np.float32)
    request = np.array([0, 16_000, 32.0], dtype=np.float32)
    # 8 GPUs, a quarter of the cpu; no GPU; no cpu left at all (the pod does not fit): capped
    assert host_share(free, request).tolist() == pytest.approx([2.0, 0.0, 2.5])


def test_cpu_heavy_gpu_pod_goes_where_cpu_is_left_over() -> None:
    # "dense": 8 GPUs with 12 cores each; "roomy": 2 GPUs with 52 cores each. Pods need 11.
    cache = cluster(
        make_node("dense", cpu="96", memory="384Gi"),
        make_node("roomy", gpus=2, domains="0-1", cpu="104", memory="512Gi"),
    )
    plugin = trained(TYPICAL)
    heavy = pod_info("heavy", gpus=1, cpu="24", memory="48Gi")
    points = points_by_node(plugin, heavy, cache)
    assert points["roomy"] == NEUTRAL_POINTS  # the other GPU keeps 80 cores
    # 72 cores for 7 GPUs, 10.3 each: short for the 11-core pods and for the 24-core pod
    # itself (the pod being scored is learned too).
    assert points["dense"] < NEUTRAL_POINTS - 0.25 * POINTS_PER_GPU


def test_taking_gpus_that_were_short_of_cpu_scores_above_neutral() -> None:
    cache = cluster(
        make_node("starved", cpu="96", memory="384Gi"),
        make_node("fresh", cpu="96", memory="384Gi"),
        pods=[make_pod("cpu-hog", gpus=0, cpu="84", memory="8Gi", node="starved")],
    )
    plugin = trained(TYPICAL)
    light = pod_info("light", gpus=1, cpu="1", memory="1Gi")
    points = points_by_node(plugin, light, cache)
    assert points["starved"] > NEUTRAL_POINTS > points["fresh"] - 1e-9


def test_learning_is_deterministic() -> None:
    cache = cluster(
        make_node("a", cpu="96", memory="384Gi"),
        make_node("b", gpus=2, domains="0-1", cpu="104", memory="512Gi"),
    )
    pods = [
        pod_info(f"p{i}", gpus=1 + i % 2, cpu=str(4 + 3 * i), memory=f"{8 * i + 8}Gi")
        for i in range(12)
    ]
    first, second = GpuFragmentation(), GpuFragmentation()
    for pod in pods:
        one, two = score(first, pod, cache), score(second, pod, cache)
        if one is None:
            assert two is None
        else:
            assert isinstance(two, np.ndarray)
            assert list(two) == list(one)


def direct_waste(plugin: GpuFragmentation, cache: ClusterCache) -> np.ndarray:
    """The waste of every row computed from the cache's arrays, without states."""
    free = Snapshot(cache).free
    columns = np.stack([free[:, GPU], free[:, CPU], free[:, MEMORY]]).astype(np.float32)
    return plugin.waste(columns)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 40)), max_size=25))
def test_states_follow_the_cache(placements: list[tuple[int, int, int]]) -> None:
    """After any sequence of placements, the waste kept per state and gathered to the rows
    equals the waste computed row by row from the cache."""
    cache = cluster(
        make_node("n0", cpu="96", memory="384Gi"),
        make_node("n1", gpus=2, domains="0-1", cpu="104", memory="512Gi"),
        make_node("n2", gpus=0, cpu="32", memory="128Gi"),
        make_node("n3", gpus=4, domains="0-1,2-3", cpu="32", memory="128Gi"),
    )
    plugin = trained(TYPICAL)
    for index, (row, gpus, cpu) in enumerate(placements):
        snapshot = Snapshot(cache)
        node = cache.names[row]
        if snapshot.free[row, GPU] < gpus or snapshot.free[row, CPU] < cpu * 1000:
            continue
        plugin.nodes.refresh(snapshot, CycleState())
        assert plugin.current_waste_by_row().tolist() == direct_waste(plugin, cache).tolist()
        pod = pod_info(f"p{index}", gpus=gpus, cpu=str(cpu), memory="2Gi")
        cache.assume(pod, node, tuple(np.flatnonzero(~cache.node_gpus_used(node))[:gpus].tolist()))


def test_states_are_rebuilt_when_old_ones_pile_up() -> None:
    cache = cluster(make_node("a", gpus=0, cpu="64", memory="64Gi"))
    nodes = NodeResources()
    nodes.refresh(Snapshot(cache), CycleState())
    generation = nodes.generation
    for index in range(3):
        cache.assume(pod_info(f"p{index}", gpus=0, cpu="1", memory="1Gi"), "a", ())
        nodes.refresh(Snapshot(cache), CycleState())
    assert nodes.generation > generation  # 4 states for 1 row: started over
    assert nodes.count <= 2
    assert nodes.free[1, nodes.state_of_row[0]] == 61_000  # free cpu: 64 - 3 cores


# -- shared GPUs --------------------------------------------------------------------------------


class FixedShares:
    """`SharedGpus` of plain data: a room per row, one share for every pod."""

    def __init__(self, room: list[int], share: int = 0) -> None:
        self.rooms: IntArray = np.array(room, dtype=np.int64)
        self.milli = share

    def room(self, snapshot: Snapshot) -> IntArray:
        return self.rooms

    def share(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> int:
        return self.milli


def test_room_on_shared_gpus_counts_as_free_gpu() -> None:
    # both nodes have all 8 GPUs taken by pods holding shares; "shared" has 4 GPUs' worth of
    # room left on them, "cpu" has no GPU at all: to the whole-GPU score they looked alike
    cache = cluster(
        make_node("shared", cpu="96", memory="384Gi"),
        make_node("cpu", gpus=0, cpu="96", memory="384Gi"),
        pods=[make_pod("sharers", gpus=8, cpu="8", memory="8Gi", node="shared")],
    )
    cpu_only = pod_info("cpu-only", gpus=0, cpu="64", memory="8Gi")
    whole_only = GpuFragmentation(steer_cpu_only=False)
    whole_only.learn(TYPICAL)
    assert score(whole_only, cpu_only, cache) is None
    plugin = GpuFragmentation(shared=FixedShares([4000, 0]), steer_cpu_only=False)
    plugin.learn(TYPICAL)
    points = points_by_node(plugin, cpu_only, cache)
    # 88 cores beside 4 GPUs' room, 22 each; after the pod 24 cores, 6 each of the 11 needed
    assert points["cpu"] == NEUTRAL_POINTS
    assert points["shared"] == pytest.approx(NEUTRAL_POINTS - 4 * 5 / 11 * POINTS_PER_GPU, abs=1)


def test_a_share_takes_its_thousandths_and_is_learned_per_gpus_worth() -> None:
    cache = cluster(
        make_node("a", gpus=1, domains="0", cpu="8", memory="64Gi"),
        make_node("b", gpus=1, domains="0", cpu="8", memory="64Gi"),
        pods=[make_pod("sharer", gpus=1, cpu="2", memory="8Gi", node="b")],
    )
    shares = FixedShares([0, 500], share=250)
    plugin = GpuFragmentation(shared=shares)
    share_pod = pod_info("share", gpus=0, cpu="2", memory="8Gi")
    # learned from a share alone (2 cores for a quarter GPU: 8 per GPU's worth), then scored:
    # a: 1 GPU and 8 cores -> 0.75 GPU and 6 cores, 8 per GPU: nothing stranded either way;
    # b: half a GPU and 6 cores (12 per GPU) -> a quarter and 4 cores (16 per GPU): neither
    assert score(plugin, share_pod, cache) is None
    assert plugin.ready
    shares.milli = 0
    plugin.learn(pod_info("whole", gpus=1, cpu="8", memory="8Gi"))  # 8 per GPU as well
    thin = pod_info("thin", gpus=0, cpu="4", memory="1Gi")
    plugin.steer_cpu_only = False
    points = points_by_node(plugin, thin, cache)
    # a: 1 GPU, 8 -> 4 cores, 4 per GPU: half of it short; b: half a GPU's room, 6 -> 2
    # cores, 4 per GPU: half of the half short
    assert points["a"] == pytest.approx(NEUTRAL_POINTS - 0.5 * POINTS_PER_GPU, abs=0.5)
    assert points["b"] == pytest.approx(NEUTRAL_POINTS - 0.25 * POINTS_PER_GPU, abs=0.5)


def test_the_room_is_part_of_the_state() -> None:
    cache = cluster(make_node("a", gpus=2, domains="0-1", cpu="64", memory="64Gi"))
    nodes = NodeResources()
    nodes.refresh(Snapshot(cache), CycleState(), np.array([250], dtype=np.int64))
    assert nodes.free[0, nodes.state_of_row[0]] == pytest.approx(2.25)
    nodes.refresh(Snapshot(cache), CycleState(), np.array([750], dtype=np.int64))
    assert nodes.free[0, nodes.state_of_row[0]] == pytest.approx(2.75)
    nodes.refresh(Snapshot(cache), CycleState())  # no room anywhere any more
    assert nodes.free[0, nodes.state_of_row[0]] == 2


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, True, "10", float("nan")])
def test_weight_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="fragmentationWeight"):
        config_from_data({"scoring": {"fragmentationWeight": value}})


def test_weight_zero_leaves_the_score_out() -> None:
    settings = config_from_data({"scoring": {"fragmentationWeight": 0}})
    names = [p.name for p in default_framework(settings).scores]
    assert names[:3] == ["NVLink", "DynamicResources", "NodeAffinity"]
    assert "GpuFragmentation" not in names
    weighted = default_framework(config_from_data({"scoring": {"fragmentationWeight": 2.5}}))
    assert {p.name: p.weight for p in weighted.scores}["GpuFragmentation"] == 2.5
