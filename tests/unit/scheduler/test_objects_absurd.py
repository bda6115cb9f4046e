"""Absurd pods and nodes: each gets a bounded error naming the field, never a crash or a
model sized by the absurd value."""

from __future__ import annotations

import numpy as np

from scheduler.model.fields import MAX_ERRORS_TEXT, FieldError, sorted_errors
from scheduler.model.objects import MAX_NODE_GPUS, MAX_NODE_MIG_PROFILES, parse_node, parse_pod
from scheduler.model.resources import GPU, GPU_RESOURCE
from scheduler.state.cache import ClusterCache
from tests.unit.scheduler.builders import make_container, make_node, make_pod
from topology.domains import NVLINK_DOMAINS_ANNOTATION
from topology.occupancy import GPUS_ANNOTATION

BOUND = 1024
BIG_ANNOTATION = ",".join(str(i % 8) for i in range(40_000))  # 80 KB


def test_node_with_a_billion_gpus_offers_none_and_says_why() -> None:
    node = parse_node(make_node("huge", gpus="1000000000"))
    assert node.allocatable[GPU] == 0
    assert node.topology.gpu_count == 0
    (error,) = node.errors
    assert error.field == "status.allocatable.nvidia.com/gpu"
    assert "1000000000 GPUs exceed" in error.message and str(MAX_NODE_GPUS) in error.message
    cache = ClusterCache()
    cache.add_or_update_node(node)
    cache.add_or_update_node(parse_node(make_node("normal", gpus=8)))
    assert cache.gpu_domain.shape[1] <= MAX_NODE_GPUS  # no column per claimed GPU


def test_80kb_nvlink_annotation_falls_back_with_a_bounded_error() -> None:
    node = parse_node(make_node("n", gpus=8, domains=BIG_ANNOTATION))
    assert node.topology.domains == ((0, 1, 2, 3), (4, 5, 6, 7))  # the default layout
    (error,) = node.errors
    assert error.field == f"metadata.annotations[{NVLINK_DOMAINS_ANNOTATION}]"
    assert len(str(error)) <= BOUND
    assert "(79999 characters)" in error.message  # says how long the value was
    assert len(sorted_errors(node.errors)) <= BOUND


def test_huge_resource_key_and_value_are_echoed_cut() -> None:
    key = "example.com/" + "k" * 100_000
    pod = parse_pod(make_pod(containers=[make_container(requests={key: "x" * 100_000})]))
    (error,) = pod.errors
    assert len(error.field) <= BOUND and len(error.message) <= BOUND
    node = parse_node(make_node("n", mig={"nvidia.com/mig-" + "9" * 100_000: "1"}))
    assert node.errors and all(len(str(e)) <= BOUND for e in node.errors)


def test_quantity_of_thousands_of_digits_is_an_error_not_a_crash() -> None:
    pod = parse_pod(make_pod(containers=[make_container(requests={GPU_RESOURCE: 10**5000})]))
    (error,) = pod.errors
    assert error.field == "spec.containers[0].resources.requests.nvidia.com/gpu"
    assert "out of range" in error.message and len(error.message) <= BOUND
    assert pod.gpus == 0


def test_gpu_request_unequal_to_its_limit_is_an_error() -> None:
    container = make_container(requests={GPU_RESOURCE: "1"}, limits={GPU_RESOURCE: "4"})
    pod = parse_pod(make_pod(containers=[container]))
    (error,) = pod.errors
    assert error.field == "spec.containers[0].resources.requests.nvidia.com/gpu"
    assert "must equal its limit" in error.message
    assert "'1'" in error.message and "'4'" in error.message
    equal = parse_pod(
        make_pod(
            containers=[make_container(requests={GPU_RESOURCE: 2}, limits={GPU_RESOURCE: "2"})]
        )
    )
    assert equal.errors == () and equal.gpus == 2
    cpu = make_container(requests={"cpu": "1"}, limits={"cpu": "4"})  # native: may differ
    assert parse_pod(make_pod(containers=[cpu])).errors == ()


def test_resource_names_that_are_not_strings_are_reported() -> None:
    # YAML dumps (explain --cluster) can carry integer keys; JSON from the API cannot.
    pod = parse_pod(make_pod(containers=[make_container(requests={4: "1", "cpu": "1"})]))
    (error,) = pod.errors
    assert error.field == "spec.containers[0].resources.requests"
    assert "resource name 4 is not a string" in error.message
    node = parse_node(make_node("n", mig={7: "1"}))  # type: ignore[dict-item]
    assert [e.field for e in node.errors] == ["status.allocatable"]


def test_gpus_of_many_containers_add_up() -> None:
    containers = [make_container(f"c{i}", gpus=1) for i in range(100)]
    pod = parse_pod(make_pod(containers=containers))
    assert pod.errors == () and pod.gpus == 100
    overflow = [make_container(f"c{i}", gpus=2**61) for i in range(4)]
    pod = parse_pod(make_pod(containers=overflow))
    assert pod.gpus == 0
    assert [e.message for e in pod.errors] == ["total is too large"]


def test_init_container_gpus_count_as_the_max_not_the_sum() -> None:
    # kube-scheduler: max(sum of containers, largest init container), per resource.
    pod = parse_pod(
        make_pod(
            containers=[make_container("a", gpus=1), make_container("b", gpus=1)],
            init_containers=[make_container("i1", gpus=3), make_container("i2", gpus=1)],
        )
    )
    assert pod.errors == () and pod.gpus == 3
    pod = parse_pod(
        make_pod(
            containers=[make_container("a", gpus=2), make_container("b", gpus=2)],
            init_containers=[make_container("i1", gpus=3)],
        )
    )
    assert pod.gpus == 4


def test_gpus_annotation_with_every_index_parses_in_linear_time() -> None:
    value = ",".join(str(i) for i in range(1 << 16))  # 350 KB; quadratic would take minutes
    pod = parse_pod(make_pod(gpu_indices=value))
    assert pod.errors == ()
    assert pod.gpu_indices is not None and len(pod.gpu_indices) == 1 << 16
    bad = parse_pod(make_pod(gpu_indices=value + ",x" * 40_000))
    (error,) = bad.errors
    assert error.field == f"metadata.annotations[{GPUS_ANNOTATION}]"
    assert len(error.message) <= BOUND


def test_too_many_mig_profiles_are_left_out_with_an_error() -> None:
    mig = {f"nvidia.com/mig-1g.{size}gb": "1" for size in range(1, 101)}
    node = parse_node(make_node("n", mig=mig))
    assert len(node.mig) == MAX_NODE_MIG_PROFILES
    assert len(node.errors) == 100 - MAX_NODE_MIG_PROFILES
    assert len(sorted_errors(node.errors)) <= MAX_ERRORS_TEXT


def test_sorted_errors_is_bounded_and_counts_the_rest() -> None:
    errors = [FieldError(f"spec.containers[{i}].cpu", "invalid") for i in range(10_000)]
    text = sorted_errors(errors)
    assert len(text) <= MAX_ERRORS_TEXT
    assert text.startswith("spec.containers[0].cpu: invalid; ")
    assert text.endswith(" more)")
    shown = text.count(": invalid")
    assert f"({10_000 - shown} more)" in text
    one = sorted_errors([FieldError("f", "x" * 100_000)])
    assert len(one) <= MAX_ERRORS_TEXT and one.startswith("f: xxx")
    assert sorted_errors([FieldError("a", "b"), FieldError("c", "d")]) == "a: b; c: d"


def test_allocatable_arrays_stay_int64() -> None:
    node = parse_node(make_node("n", gpus=8, cpu=str(2**40)))
    assert node.allocatable.dtype == np.int64


def test_priority_outside_int32_is_an_error() -> None:
    for raw in (2**31, -(2**31) - 1, 10**5000):
        pod = parse_pod(make_pod(priority=raw))
        assert pod.priority == 0
        (error,) = pod.errors
        assert error.field == "spec.priority" and len(error.message) <= BOUND
    assert parse_pod(make_pod(priority=2**31 - 1)).priority == 2**31 - 1
    assert parse_pod(make_pod(priority=True)).priority == 0


def test_names_of_any_type_become_bounded_strings() -> None:
    node = parse_node({"metadata": {"name": 10**5000}})
    assert node.name.startswith("<an integer of") and len(node.name) <= BOUND
    pod = parse_pod({"metadata": {"name": 7, "namespace": ["a"]}})
    assert pod.key == "['a']/7"
