"""Framework.evaluate and Diagnosis: the FailedScheduling message, resolvable nodes, seeded
choice, and the worked example through the daemon's plugin list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import SchedulerConfig
from scheduler.config.scoring import ScoringConfig
from scheduler.core.placement import Placement, place
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState, Rejection
from scheduler.framework.runtime import NO_NODE, Diagnosis, Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import (
    cluster,
    make_node,
    make_pod,
    node_info,
    pod_info,
    taint,
)
from topology.occupancy import GPUS_ANNOTATION, NO_DOMAIN


def daemon_framework(seed: int | None = None) -> Framework:
    """The daemon's profile with default settings; `seed` replaces the tie-break generator."""
    framework = default_framework(SchedulerConfig())
    if seed is not None:
        framework.rng = np.random.default_rng(seed)
    return framework


def full(node: str, gpus: int = 8) -> dict[str, Any]:
    return make_pod(f"hog-{node}", gpus=gpus, node=node)


@dataclass
class FixedFilter:
    """A filter rejecting fixed rows for one reason."""

    name: str
    reason: str
    rows: tuple[int, ...]
    resolvable: bool = True

    def filter(self, pod: PodInfo, snapshot: Snapshot, state: CycleState) -> list[Rejection]:
        failed = np.zeros(snapshot.rows, dtype=bool)
        failed[list(self.rows)] = True
        return [Rejection(self.reason, failed, self.resolvable, self.name)]


@dataclass
class FixedScore:
    name: str
    points: tuple[float, ...]
    weight: float = 1.0

    def score(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState, feasible: Any
    ) -> np.ndarray:
        return np.array(self.points, dtype=np.float64)


def evaluate(framework: Framework, cache: ClusterCache, pod: PodInfo) -> Any:
    return framework.evaluate(pod, Snapshot(cache))


# -- the failure message ---------------------------------------------------------------------------


def test_message_counts_and_orders_reasons() -> None:
    nodes = [make_node(f"gpu{i}") for i in range(6)]
    nodes += [make_node(f"infra{i}", taints=[taint("dedicated", "infra")]) for i in range(2)]
    cache = cluster(*nodes, pods=[full(f"gpu{i}") for i in range(6)])
    evaluation = evaluate(daemon_framework(), cache, pod_info(gpus=1))
    assert evaluation.chosen == NO_NODE
    message = evaluation.diagnosis.message(Snapshot(cache).valid)
    assert message == (
        "0/8 nodes are available: 2 node(s) had untolerated taint {dedicated: infra}, "
        "6 Insufficient nvidia.com/gpu."
    )


def test_node_is_counted_under_the_first_plugin_that_rejects_it() -> None:
    cache = cluster(
        make_node("both", taints=[taint("k", "v")], cpu="1"),
        make_node("cpu", cpu="1"),
        make_node("cordoned", unschedulable=True),
        pods=[full("both")],
    )
    pod = pod_info(gpus=1, cpu="2")
    evaluation = evaluate(daemon_framework(), cache, pod)
    message = evaluation.diagnosis.message(Snapshot(cache).valid)
    assert message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}, "
        "1 node(s) were unschedulable."
    )


def test_each_node_takes_the_reason_of_its_first_filter() -> None:
    framework = Framework(
        [
            FixedFilter("Z", "zeta", (0,)),
            FixedFilter("A", "alpha", (1,)),
            FixedFilter("M", "mu", (0, 1, 2)),
        ],
        [],
    )
    cache = cluster(make_node("a"), make_node("b"), make_node("c"))
    evaluation = evaluate(framework, cache, pod_info())
    assert evaluation.diagnosis.message(Snapshot(cache).valid) == (
        "0/3 nodes are available: 1 alpha, 1 mu, 1 zeta."
    )


def test_deleted_node_rows_are_not_counted() -> None:
    cache = cluster(
        make_node("gone"), make_node("full"), make_node("tainted", taints=[taint("a", "b")])
    )
    cache.add_pod(pod_info("hog", gpus=8, node="full"))
    cache.remove_node("gone")
    framework = Framework([FixedFilter("X", "reason x", (0, 1))], [])
    evaluation = evaluate(daemon_framework(), cache, pod_info(gpus=1))
    valid = Snapshot(cache).valid
    assert evaluation.diagnosis.node_count == 2
    assert evaluation.diagnosis.message(valid) == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {a: b}."
    )
    fixed = evaluate(framework, cache, pod_info(gpus=0))
    assert fixed.chosen == 2
    assert fixed.diagnosis.reason_counts(valid) == {"reason x": 1}


def test_message_without_nodes() -> None:
    evaluation = evaluate(daemon_framework(), ClusterCache(), pod_info(gpus=1))
    assert evaluation.chosen == NO_NODE
    assert evaluation.diagnosis.message(Snapshot(ClusterCache()).valid) == (
        "0/0 nodes are available."
    )


def test_same_reason_from_two_plugins_counts_each_node_once() -> None:
    diagnosis = Diagnosis(
        node_count=2,
        feasible=np.array([False, False]),
        rejections=[
            Rejection("r", np.array([True, False]), True, "P"),
            Rejection("r", np.array([True, True]), True, "Q"),
        ],
    )
    assert diagnosis.message(np.array([True, True])) == "0/2 nodes are available: 2 r."


# -- resolvable nodes -----------------------------------------------------------------------------


def test_resolvable_nodes_are_those_rejected_only_for_resolvable_reasons() -> None:
    cache = cluster(
        make_node("full"),
        make_node("full-tainted", taints=[taint("k", "v")]),
        make_node("free"),
        make_node("full-cordoned", unschedulable=True),
        make_node("full-gone"),
        pods=[full("full"), full("full-tainted"), full("full-cordoned"), full("full-gone")],
    )
    cache.remove_node("full-gone")
    snapshot = Snapshot(cache)
    pod = pod_info(gpus=1)
    diagnosis = daemon_framework().run_filters(pod, snapshot, CycleState())
    assert list(diagnosis.feasible) == [False, False, True, False, False]
    assert list(diagnosis.resolvable_nodes(snapshot.valid)) == [True, False, False, False, False]


def test_required_nvlink_rejection_is_resolvable() -> None:
    cache = cluster(
        make_node("split"),
        pods=[
            make_pod("a", node="split", gpu_indices="0"),
            make_pod("b", node="split", gpu_indices="4"),
        ],
    )
    pod = pod_info(gpus=4, nvlink_policy="required")
    snapshot = Snapshot(cache)
    diagnosis = daemon_framework().run_filters(pod, snapshot, CycleState())
    assert diagnosis.message(snapshot.valid) == (
        "0/1 nodes are available: 1 node(s) had no NVLink domain with 4 free GPUs."
    )
    assert list(diagnosis.resolvable_nodes(snapshot.valid)) == [True]


# -- scores and choice -----------------------------------------------------------------------


def test_weighted_scores_add_up_and_best_feasible_wins() -> None:
    framework = Framework(
        [FixedFilter("F", "no", (0,))],
        [FixedScore("A", (100.0, 10.0, 50.0), weight=1.0), FixedScore("B", (0.0, 20.0, 10.0), 3.0)],
    )
    cache = cluster(make_node("a"), make_node("b"), make_node("c"))
    evaluation = evaluate(framework, cache, pod_info())
    assert list(evaluation.total) == [100.0, 70.0, 80.0]
    assert evaluation.chosen == 2
    assert set(evaluation.scores) == {"A", "B"}


def test_choose_false_scores_without_choosing() -> None:
    cache = cluster(make_node("a"), make_node("b"))
    framework = daemon_framework()
    evaluation = framework.evaluate(pod_info(gpus=1), Snapshot(cache), choose=False)
    assert evaluation.chosen == NO_NODE
    assert evaluation.diagnosis.feasible.all()
    assert set(evaluation.scores) == {"NVLink"}  # no preferred terms: NodeAffinity abstains


def choices(seed: int, count: int = 30) -> list[int]:
    framework = Framework(
        [FixedFilter("F", "no", (1,))], [FixedScore("S", (5.0, 9.0, 5.0, 5.0, 1.0))], seed
    )
    cache = cluster(*[make_node(f"n{i}") for i in range(5)])
    return [evaluate(framework, cache, pod_info()).chosen for _ in range(count)]


def test_seeded_tie_breaking_is_deterministic() -> None:
    first = choices(seed=7)
    assert first == choices(seed=7)
    assert set(first) <= {0, 2, 3}
    assert len(set(first)) > 1
    assert any(choices(seed=s) != first for s in range(8, 12))


# -- the worked example through the daemon's profile ------------------------------------------


def seed_cluster() -> ClusterCache:
    return cluster(
        make_node("g1", gpus=2, domains="0-1"),
        make_node("g2-expansion", gpus=8, domains="0-3,4-7"),
        pods=[make_pod("running", gpus=1, node="g1")],
    )


def test_daemon_profile_plugins() -> None:
    framework = daemon_framework()
    assert [p.name for p in framework.filters] == [
        "NodeUnschedulable",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "GPUHealth",
        "NVLink",
        "GpuSharing",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
    ]
    assert [p.name for p in framework.scores] == [
        "NVLink",
        "DynamicResources",
        "NodeAffinity",
        "InterPodAffinity",
        "GpuSharing",
        "GpuFragmentation",
        "PodTopologySpread",
    ]


def test_worked_example_one_gpu_pod_goes_to_the_half_used_small_node() -> None:
    cache = seed_cluster()
    pod = pod_info("one", gpus=1)
    evaluation = evaluate(daemon_framework(), cache, pod)
    nvlink = evaluation.state.data["NVLink"]
    assert list(nvlink.per_row().raw) == [250.0, 40.0]
    assert nvlink.components(0) == {
        "base": 50.0,
        "domain_integrity": 50.0,
        "node_matching": 80.0,
        "domain_completion": 40.0,
        "efficiency": 30.0,
        "raw": 250.0,
    }
    assert nvlink.components(1) == {
        "base": 50.0,
        "domain_integrity": 50.0,
        "node_matching": -40.0,
        "domain_completion": 0.0,
        "efficiency": -20.0,
        "raw": 40.0,
    }
    assert list(evaluation.scores["NVLink"]) == [92.0, 31.0]
    assert "NodeAffinity" not in evaluation.scores  # no preferred terms: it abstains
    # Plenty of cpu and memory beside every free GPU either way: no fragmentation preference.
    assert "GpuFragmentation" not in evaluation.scores
    assert list(evaluation.total) == [92.0, 31.0]
    assert cache.names[evaluation.chosen] == "g1"
    placement = place(cache, pod, evaluation)
    assert placement == Placement("g1", (1,), 0, 92.0)
    assert placement.annotations() == {
        GPUS_ANNOTATION: "1",
        "gpu-scheduler.io/nvlink-domain": "0",
    }


def test_worked_example_eight_gpu_pod_goes_to_the_eight_gpu_node() -> None:
    cache = seed_cluster()
    pod = pod_info("eight", gpus=8)
    evaluation = evaluate(daemon_framework(), cache, pod)
    assert list(evaluation.diagnosis.feasible) == [False, True]
    placement = place(cache, pod, evaluation)
    assert placement.node == "g2-expansion"
    assert placement.gpus == tuple(range(8))
    assert placement.domain == NO_DOMAIN
    assert placement.annotations()["gpu-scheduler.io/nvlink-domain"] == "-1"


def test_worked_example_sequence_with_assume() -> None:
    cache = seed_cluster()
    framework = daemon_framework()
    one = pod_info("one", gpus=1)
    placement = place(cache, one, evaluate(framework, cache, one))
    cache.assume(one, placement.node, placement.gpus)
    eight = pod_info("eight", gpus=8)
    placement = place(cache, eight, evaluate(framework, cache, eight))
    assert placement.node == "g2-expansion"
    cache.assume(eight, placement.node, placement.gpus)
    evaluation = evaluate(framework, cache, pod_info("more", gpus=1))
    assert evaluation.chosen == NO_NODE
    assert evaluation.diagnosis.message(Snapshot(cache).valid) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    )


def test_pod_without_gpus_is_placed_without_gpus() -> None:
    cache = seed_cluster()
    pod = pod_info("cpu-only", gpus=0)
    evaluation = evaluate(daemon_framework(), cache, pod)
    placement = place(cache, pod, evaluation)
    assert placement.gpus == ()
    assert placement.domain == NO_DOMAIN
    assert placement.annotations() == {}


def test_preferred_affinity_breaks_an_nvlink_tie() -> None:
    cache = cluster(make_node("a"), make_node("b", labels={"fast": "yes"}))
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]},
                }
            ]
        }
    }
    for seed in range(5):
        evaluation = evaluate(
            daemon_framework(seed + 1), cache, pod_info(gpus=1, affinity=affinity)
        )
        assert cache.names[evaluation.chosen] == "b"


# -- property: a 2-GPU pod that must stay in one domain does -----------------------------------


PAIRED_LAYOUTS = [(2, "0-1"), (4, "0-1,2-3"), (8, "0-3,4-7"), (8, "0-1,2-3,4-5,6-7"), (6, "0-5")]
"""GPU count and NVLink domains of nodes whose every domain holds at least two GPUs."""
LAYOUTS = [*PAIRED_LAYOUTS, (2, "0,1"), (4, "0,1,2,3"), (1, "0")]


@st.composite
def clusters(draw: st.DrawFn, layouts: list[tuple[int, str]] = LAYOUTS) -> ClusterCache:
    """Random nodes with random GPUs already in use (by annotated pods)."""
    cache = ClusterCache()
    for i in range(draw(st.integers(1, 6))):
        gpus, domains = draw(st.sampled_from(layouts))
        name = f"n{i}"
        cache.add_or_update_node(node_info(name, gpus=gpus, domains=domains))
        taken = draw(st.lists(st.integers(0, gpus - 1), unique=True, max_size=gpus))
        for gpu in taken:
            cache.add_pod(pod_info(f"{name}-g{gpu}", gpus=1, node=name, gpu_indices=str(gpu)))
    return cache


def single_domain_possible(cache: ClusterCache, gpus: int) -> bool:
    snapshot = Snapshot(cache)
    return bool((snapshot.free_per_domain >= gpus).any())


def test_narrow_to_one_domain_setting_keeps_or_drops_the_split_nodes() -> None:
    cache = cluster(
        make_node("pairs", gpus=4, domains="0-1,2-3"),
        make_node("eights", gpus=8, domains="0-3,4-7"),
    )
    pod = pod_info("four", gpus=4)
    narrowing = evaluate(daemon_framework(), cache, pod)
    assert list(narrowing.diagnosis.feasible) == [False, True]
    settings = SchedulerConfig(scoring=ScoringConfig(narrow_to_one_domain=False))
    scored_only = evaluate(default_framework(settings), cache, pod)
    assert list(scored_only.diagnosis.feasible) == [True, True]
    # The NVLink score still prefers one domain when both can take the pod.
    assert cache.names[scored_only.chosen] == "eights"


@settings(max_examples=200, deadline=None)
@given(clusters(PAIRED_LAYOUTS))
def test_two_gpu_pod_with_required_policy_stays_in_one_domain(cache: ClusterCache) -> None:
    pod = pod_info("two", gpus=2, nvlink_policy="required")
    evaluation = evaluate(daemon_framework(), cache, pod)
    if not single_domain_possible(cache, 2):
        assert evaluation.chosen == NO_NODE
        return
    placement = place(cache, pod, evaluation)
    assert placement.domain != NO_DOMAIN
    topology = cache.nodes[placement.node].topology
    assert len({topology.domain_of(g) for g in placement.gpus}) == 1
    assert not cache.node_gpus_used(placement.node)[list(placement.gpus)].any()


def test_required_pod_larger_than_every_domain_takes_whole_domains() -> None:
    cache = cluster(
        make_node("singles", gpus=4, domains="0,1,2,3"),
        make_node("pairs", gpus=4, domains="0-1,2-3"),
        pods=[
            make_pod("a", node="singles", gpu_indices="1"),
            make_pod("b", node="pairs", gpu_indices="1"),
        ],
    )
    pod = pod_info("three", gpus=3, nvlink_policy="required")
    evaluation = evaluate(daemon_framework(), cache, pod)
    assert list(evaluation.diagnosis.feasible) == [True, False]
    placement = place(cache, pod, evaluation)
    assert (placement.node, placement.gpus, placement.domain) == ("singles", (0, 2, 3), NO_DOMAIN)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(1, 8))
def test_placement_takes_free_gpus_on_a_feasible_node(cache: ClusterCache, gpus: int) -> None:
    pod = pod_info("p", gpus=gpus)
    evaluation = evaluate(daemon_framework(), cache, pod)
    free = Snapshot(cache).gpu_total - Snapshot(cache).gpu_used
    if not (free >= gpus).any():
        assert evaluation.chosen == NO_NODE
        return
    assert evaluation.diagnosis.feasible[evaluation.chosen]
    placement = place(cache, pod, evaluation)
    assert len(placement.gpus) == gpus
    assert not cache.node_gpus_used(placement.node)[list(placement.gpus)].any()
    best = evaluation.total[evaluation.diagnosis.feasible].max()
    assert placement.score == best
