"""Regression tests: contracts that earlier versions of the parsers, the cache and the NVLink
plugin broke (wrong-typed fields, huge quantities, MIG columns, overcommit, GPU-count changes,
annotated GPUs taken by the fill order, multi-GPU pods split across domains)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.config import SchedulerConfig
from scheduler.core.placement import place
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_node, parse_pod
from scheduler.model.quantity import cpu_millis, parse_quantity
from scheduler.plugins.node_affinity import NodeAffinity
from scheduler.plugins.resources import NodeResourcesFit
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import (
    PREFERRED,
    REQUIRED,
    cluster,
    expr,
    make_container,
    make_node,
    make_pod,
    node_affinity,
    node_info,
    pod_info,
    rejected,
    snapshot_of,
    term,
)
from tests.unit.scheduler.cache_model import Op, apply, check_consistent, ops
from tests.unit.scheduler.test_framework import clusters, single_domain_possible
from topology.occupancy import NO_DOMAIN

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


# -- objects: parse_pod / parse_node must never raise ------------------------------------------


def with_spec(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param({"metadata": "p"}, "metadata", id="metadata-string"),
        pytest.param({"spec": ["x"]}, "spec", id="spec-list"),
        pytest.param(with_spec(containers=["main"]), "spec.containers[0]", id="container-string"),
        pytest.param(
            with_spec(containers=[{"resources": "big"}]),
            "spec.containers[0].resources",
            id="resources-string",
        ),
        pytest.param(
            with_spec(containers=[{"resources": {"requests": ["cpu"]}}]),
            "spec.containers[0].resources.requests",
            id="requests-list",
        ),
        pytest.param(
            with_spec(containers=[{"resources": {"limits": "1"}}]),
            "spec.containers[0].resources.limits",
            id="limits-string",
        ),
        pytest.param(with_spec(overhead=["cpu"]), "spec.overhead", id="overhead-list"),
        pytest.param(with_spec(affinity=["x"]), "spec.affinity", id="affinity-list"),
        pytest.param(
            with_spec(affinity={"nodeAffinity": "x"}),
            "spec.affinity.nodeAffinity",
            id="node-affinity",
        ),
        pytest.param(
            with_spec(
                affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [1]}}
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            id="required-list",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(preferred=[(10, ["x"])])),  # type: ignore[list-item]
            f"{PREFERRED}[0].preference",
            id="preference-list",
        ),
    ],
)
def test_parse_pod_reports_wrongly_typed_fields(raw: dict[str, Any], field: str) -> None:
    pod = parse_pod(raw)
    assert any(error.field.startswith(field) for error in pod.errors), pod.errors


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param(
            make_pod(memory="10E"), "spec.containers[0].resources.requests.memory", id="memory-10E"
        ),
        pytest.param(
            make_pod(containers=[make_container(requests={"nvidia.com/gpu": "1e30"})]),
            "spec.containers[0].resources.requests.nvidia.com/gpu",
            id="gpus-1e30",
        ),
        pytest.param(
            make_pod(containers=[make_container(cpu=10**20)]),  # type: ignore[arg-type]
            "spec.containers[0].resources.requests.cpu",
            id="cpu-int-beyond-int64",
        ),
    ],
)
def test_parse_pod_reports_quantities_beyond_int64(raw: dict[str, Any], field: str) -> None:
    pod = parse_pod(raw)
    assert [error.field for error in pod.errors] == [field]


def test_parse_pod_survives_requests_summing_beyond_int64() -> None:
    containers = [make_container("a", memory="5E"), make_container("b", memory="5E")]
    pod = parse_pod(make_pod(containers=containers))
    assert pod.errors


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param(make_node(memory="100E"), "status.allocatable.memory", id="memory-100E"),
        pytest.param({"status": {"allocatable": ["cpu"]}}, "status.allocatable", id="list"),
        pytest.param({"metadata": "n"}, "metadata", id="metadata-string"),
        pytest.param({"status": "Ready"}, "status", id="status-string"),
    ],
)
def test_parse_node_reports_bad_fields(raw: dict[str, Any], field: str) -> None:
    node = parse_node(raw)
    assert any(error.field.startswith(field) for error in node.errors), node.errors


def test_invalid_mig_profile_in_pod_is_reported_at_its_exact_path() -> None:
    containers = [
        make_container("a", cpu="1"),
        make_container("b", requests={"nvidia.com/mig-5g.1gb": 1}),
    ]
    pod = parse_pod(make_pod(containers=containers))
    assert [error.field for error in pod.errors] == [
        "spec.containers[1].resources.requests.nvidia.com/mig-5g.1gb"
    ]


def test_boolean_weight_is_rejected() -> None:
    pod = parse_pod(make_pod(affinity=node_affinity(preferred=[(True, term(expr("a", "Exists")))])))
    assert [error.field for error in pod.errors] == [f"{PREFERRED}[0].weight"]


@pytest.mark.parametrize("value", ["--1", "1²"])
def test_gt_value_that_is_not_an_integer_is_reported(value: str) -> None:
    pod = parse_pod(make_pod(affinity=node_affinity(required=[term(expr("rack", "Gt", value))])))
    assert [error.field for error in pod.errors] == [f"{REQUIRED}[0].matchExpressions[0].values"]


@pytest.mark.parametrize("value", ["--1", "1²"])
def test_node_affinity_filter_does_not_raise_on_a_parsed_pod(value: str) -> None:
    pod = pod_info(affinity=node_affinity(required=[term(expr("rack", "Lt", value))]))
    snapshot = snapshot_of(make_node("n", labels={"rack": "3"}))
    NodeAffinity().filter(pod, snapshot, CycleState())


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
keys = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "containers",
        "initContainers",
        "resources",
        "requests",
        "limits",
        "overhead",
        "annotations",
        "affinity",
        "nodeAffinity",
        "tolerations",
        "nodeSelector",
        "priority",
        "nodeName",
        "allocatable",
        "taints",
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "weight",
        "preference",
        "matchExpressions",
        "nodeSelectorTerms",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "preferredDuringSchedulingIgnoredDuringExecution",
        "key",
        "operator",
        "values",
    ]
)
shaped_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(keys | st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=40,
)
objects = st.dictionaries(keys, shaped_values, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(objects, st.dictionaries(st.text(max_size=8), json_values, max_size=4)))
def test_parse_pod_and_parse_node_never_raise_on_arbitrary_json(raw: dict[str, Any]) -> None:
    parse_pod(raw)
    parse_node(raw)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


VALID_POD = make_pod(
    "full",
    gpus=2,
    cpu="1",
    memory="1Gi",
    node="n",
    gpu_indices="0,1",
    nvlink_policy="required",
    tolerations=[{"key": "k", "operator": "Exists"}],
    node_selector={"a": "b"},
    affinity=node_affinity(
        required=[term(expr("x", "In", "y"), fields=[expr("metadata.name", "In", "n")])],
        preferred=[(5, term(expr("z", "Gt", "1")))],
    ),
    init_containers=[make_container("init", cpu="2")],
    overhead={"cpu": "10m"},
)
VALID_NODE = make_node("n", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([VALID_POD, VALID_NODE]), json_values)
def test_mutated_valid_objects_never_raise(data: st.DataObject, valid: Any, value: Any) -> None:
    raw = copy.deepcopy(valid)
    path = data.draw(st.sampled_from(paths(raw)[1:]))
    parent = raw
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    parse_pod(raw)
    parse_node(raw)


# -- quantity ------------------------------------------------------------------------------------


def test_long_quantities_keep_their_exact_value() -> None:
    assert parse_quantity("123456789012345678901234567890") == 123456789012345678901234567890


def test_cpu_millis_rounds_up_a_tiny_fraction() -> None:
    assert cpu_millis("1.0000000000000000000000000001") == 1001


# -- cache ----------------------------------------------------------------------------------------


def test_node_with_a_new_mig_profile_can_be_added() -> None:
    cache = cluster(make_node("mig", gpus=0, mig={MIG_1G: "7"}))
    assert Snapshot(cache).mig_profiles == [MIG_1G]
    assert int(Snapshot(cache).mig_free[0, 0]) == 7


def test_pod_with_a_new_mig_profile_can_be_added() -> None:
    cache = cluster(make_node("n"))
    cache.add_pod(pod_info("m", gpus=0, node="n", containers=[make_container(limits={MIG_3G: 1})]))
    assert Snapshot(cache).mig_profiles == [MIG_3G]
    assert int(Snapshot(cache).mig_free[0, 0]) == -1


def test_mig_profiles_filter() -> None:
    nodes = (
        make_node("mig", gpus=0, mig={MIG_1G: "2", MIG_3G: "1"}),
        make_node("mig-used", gpus=0, mig={MIG_1G: "2"}),
        make_node("plain", gpus=8),
    )
    used = [make_pod("u", gpus=0, containers=[make_container(limits={MIG_1G: 2})], node="mig-used")]
    snapshot = snapshot_of(*nodes, pods=used)
    both = pod_info(gpus=0, containers=[make_container(limits={MIG_1G: 2, MIG_3G: 1})])
    assert rejected(NodeResourcesFit(), both, snapshot) == {
        f"Insufficient {MIG_1G}": {"mig-used", "plain"},
        f"Insufficient {MIG_3G}": {"mig-used", "plain"},
    }


def test_overcommitted_pod_takes_gpus_freed_later() -> None:
    cache = cluster(make_node("n", gpus=2, domains="0-1"))
    cache.add_pod(pod_info("old", gpus=2, node="n"))
    cache.add_pod(pod_info("new", gpus=2, node="n"))  # seen before the old pod's deletion
    cache.remove_pod("default/old")
    snapshot = Snapshot(cache)
    assert int(snapshot.gpu_used[0]) == 2
    assert int(snapshot.free_per_domain[0].sum()) == 0
    assert cache.gpus_of("default/new") == (0, 1)


def test_pod_update_with_another_gpu_count_recounts_its_gpus() -> None:
    cache = cluster(make_node("n"), pods=[make_pod("p", gpus=0, node="n")])
    recreated = make_pod("p", gpus=2, node="n")
    recreated["metadata"]["uid"] = "uid-p-2"
    cache.update_pod(parse_pod(recreated))
    assert int(Snapshot(cache).requested[0, 4]) == 2
    assert int(cache.node_gpus_used("n").sum()) == 2
    assert int(Snapshot(cache).free_per_domain[0].sum()) == 6


def test_annotated_gpus_win_over_guessed_ones_when_the_node_arrives() -> None:
    cache = ClusterCache()
    cache.add_pod(pod_info("a-unannotated", gpus=1, node="n"))
    cache.add_pod(pod_info("b-annotated", gpus=1, node="n", gpu_indices="0"))
    cache.add_or_update_node(node_info("n"))
    assert cache.gpus_of("default/b-annotated") == (0,)


def test_overcommit_sequence_stays_consistent() -> None:
    cache = ClusterCache()
    for op in [
        Op("add_node", node="n2"),
        Op("add_pod", pod="p0", node="n2", gpus=2),
        Op("add_pod", pod="p1", node="n2", gpus=2),
        Op("remove_pod", pod="p0"),
    ]:
        apply(cache, op, overcommit=True)
    check_consistent(cache)


@settings(max_examples=1000, deadline=None)
@given(ops())
@example(
    [
        Op("add_node", node="n2"),
        Op("add_pod", pod="p0", node="n2", gpus=0),
        Op("add_pod", pod="p0", node="n2", gpus=1),
    ]
)
@example(
    [
        Op("add_node", node="n2"),
        Op("add_pod", pod="p0", node="n2", gpus=2),
        Op("add_pod", pod="p1", node="n2", gpus=2),
        Op("remove_pod", pod="p0"),
    ]
)
def test_random_operations_match_a_recount(sequence: list[Op]) -> None:
    cache = ClusterCache()
    for op in sequence:
        apply(cache, op, overcommit=True)
    check_consistent(cache)


# -- placement --------------------------------------------------------------------------------


def test_two_gpu_pod_prefers_one_domain_over_a_fragmented_node() -> None:
    cache = cluster(
        make_node("fragmented", gpus=4, domains="0-1,2-3"),
        make_node("empty", gpus=8, domains="0-3,4-7"),
        pods=[
            make_pod("a", gpus=1, node="fragmented", gpu_indices="1"),
            make_pod("b", gpus=1, node="fragmented", gpu_indices="3"),
        ],
    )
    pod = pod_info("two", gpus=2)
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache))
    placement = place(cache, pod, evaluation)
    assert placement.domain != NO_DOMAIN, placement


def test_required_two_gpu_pod_prefers_one_domain_over_single_gpu_domains() -> None:
    cache = cluster(
        make_node("singles", gpus=2, domains="0,1"),
        make_node("empty", gpus=8, domains="0-3,4-7"),
    )
    pod = pod_info("two", gpus=2, nvlink_policy="required")
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache))
    placement = place(cache, pod, evaluation)
    assert placement.domain != NO_DOMAIN, placement


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from(["preferred", "required"]))
def test_two_gpu_pod_lands_in_one_domain_when_some_node_allows(
    cache: ClusterCache, policy: str
) -> None:
    if not single_domain_possible(cache, 2):
        return
    pod = pod_info("two", gpus=2, nvlink_policy=policy)
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache))
    placement = place(cache, pod, evaluation)
    assert placement.domain != NO_DOMAIN
    assert np.isfinite(placement.score)


def test_a_reservation_dropped_inside_released_stays_dropped() -> None:
    """The preemptor's own cycle releases its reservation, places the pod and drops it: the room
    must not come back as a phantom reservation when the block ends."""
    cache = ClusterCache()
    cache.add_or_update_node(parse_node(make_node("n", gpus=2, domains="0-1")))
    pod = pod_info("preemptor", gpus=2)
    cache.reserve(pod, "n", (0, 1), now=0.0)
    with cache.released(pod.key):
        assert cache.reservation(pod.key) is None
        cache.drop_reservation(pod.key)
    assert cache.reservation(pod.key) is None
    assert int(cache.free_per_domain[cache.row_of["n"]].sum()) == 2
    with cache.released("someone-else"):
        pass
    cache.reserve(pod, "n", (0, 1), now=0.0)
    with cache.released(pod.key):
        pass
    assert cache.reservation(pod.key) is not None  # not dropped: restored
