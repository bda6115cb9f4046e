"""parse_pod: effective requests, GPUs, MIG, scheduling constraints, and field errors by path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from scheduler.model.fields import NodeSelectorTerm, SelectorRequirement, Toleration
from scheduler.model.objects import parse_pod
from scheduler.model.resources import CPU, EPHEMERAL, GPU, MEMORY, PODS
from tests.unit.scheduler.builders import (
    PREFERRED,
    REQUIRED,
    expr,
    make_container,
    make_pod,
    node_affinity,
    term,
    toleration,
)

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def requests_of(**kwargs: Any) -> list[int]:
    pod = parse_pod(make_pod(**kwargs))
    assert pod.errors == ()
    return [int(x) for x in pod.requests]


# -- effective requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "init_containers", "overhead", "expected"),
    [
        pytest.param(
            [make_container(cpu="100m", memory="1Gi")], None, None, [100, 2**30, 0, 1, 0], id="one"
        ),
        pytest.param(
            [make_container("a", cpu="100m", memory="1Gi"), make_container("b", cpu="1.5")],
            None,
            None,
            [1600, 2**30, 0, 1, 0],
            id="containers-sum",
        ),
        pytest.param(
            [make_container("a", cpu="100m"), make_container("b", cpu="200m")],
            [make_container("init", cpu="250m", memory="64Mi")],
            None,
            [300, 64 * 2**20, 0, 1, 0],
            id="init-smaller-cpu-larger-memory",
        ),
        pytest.param(
            [make_container("a", cpu="100m")],
            [make_container("i1", cpu="2"), make_container("i2", cpu="500m")],
            None,
            [2000, 0, 0, 1, 0],
            id="largest-init-wins-not-sum",
        ),
        pytest.param(
            [make_container("a", cpu="100m", gpus=1)],
            [make_container("init", gpus=2)],
            None,
            [100, 0, 0, 1, 2],
            id="init-gpus-max",
        ),
        pytest.param(
            [make_container("a", cpu="1")],
            [make_container("init", cpu="3")],
            {"cpu": "250m", "memory": "10Mi"},
            [3250, 10 * 2**20, 0, 1, 0],
            id="overhead-added-after-max",
        ),
        pytest.param(
            [make_container(requests={"ephemeral-storage": "2Gi"})],
            None,
            None,
            [0, 0, 2 * 2**30, 1, 0],
            id="ephemeral",
        ),
        pytest.param([], None, None, [0, 0, 0, 1, 0], id="no-containers-still-one-pod"),
    ],
)
def test_effective_requests(
    containers: list[dict[str, Any]],
    init_containers: list[dict[str, Any]] | None,
    overhead: dict[str, str] | None,
    expected: list[int],
) -> None:
    got = requests_of(containers=containers, init_containers=init_containers, overhead=overhead)
    assert got == expected


def test_requests_vector_is_int64_in_resource_order() -> None:
    pod = parse_pod(make_pod(cpu="2", memory="1Mi", gpus=3))
    assert pod.requests.dtype == np.int64
    assert (pod.requests[CPU], pod.requests[MEMORY], pod.requests[EPHEMERAL]) == (2000, 2**20, 0)
    assert (pod.requests[PODS], pod.requests[GPU]) == (1, 3)


@pytest.mark.parametrize(
    ("resources", "gpus"),
    [
        pytest.param({"limits": {"nvidia.com/gpu": "2"}}, 2, id="limit-only"),
        pytest.param({"requests": {"nvidia.com/gpu": 3}}, 3, id="request-only-int"),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": 2}},
            2,
            id="request-equals-limit",
        ),
        pytest.param({"limits": {"cpu": "1", "memory": "1Gi"}}, 0, id="cpu-limit-no-gpu"),
    ],
)
def test_extended_resources_default_requests_to_limits(
    resources: dict[str, Any], gpus: int
) -> None:
    pod = parse_pod(make_pod(containers=[{"name": "c", "resources": resources}]))
    assert pod.errors == ()
    assert pod.gpus == gpus
    assert pod.requests[GPU] == gpus


def test_cpu_and_memory_limits_do_not_become_requests() -> None:
    resources = {"limits": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "1Gi"}}
    pod = parse_pod(make_pod(containers=[{"name": "c", "resources": resources}]))
    assert [int(x) for x in pod.requests] == [0, 0, 0, 1, 0]


def test_gpus_sum_over_containers() -> None:
    pod = parse_pod(make_pod(containers=[make_container("a", gpus=2), make_container("b", gpus=3)]))
    assert pod.gpus == 5


def test_mig_requests_are_collected_by_profile() -> None:
    containers = [
        make_container("a", limits={MIG_1G: "2"}),
        make_container("b", requests={MIG_1G: "1", MIG_3G: "1"}),
    ]
    pod = parse_pod(make_pod(containers=containers))
    assert pod.errors == ()
    assert dict(pod.mig) == {MIG_1G: 3, MIG_3G: 1}
    assert pod.gpus == 0


def test_mig_request_of_zero_is_left_out() -> None:
    pod = parse_pod(make_pod(containers=[make_container(requests={MIG_1G: "0"})]))
    assert dict(pod.mig) == {}


def test_other_extended_resources_do_not_count_as_gpus_or_mig() -> None:
    pod = parse_pod(make_pod(gpus=0, containers=[make_container(limits={"example.com/fpga": 1})]))
    assert pod.errors == ()
    assert (pod.gpus, dict(pod.mig)) == (0, {})


# -- metadata, priority, constraints -----------------------------------------------------------


def test_identity_and_status_fields() -> None:
    raw = make_pod("web", namespace="team", node="n1", phase="Running", priority=7)
    raw["metadata"]["deletionTimestamp"] = "2024-05-01T10:05:00Z"
    raw["spec"]["priorityClassName"] = "high"
    pod = parse_pod(raw)
    assert (pod.key, pod.namespace, pod.name, pod.uid) == ("team/web", "team", "web", "uid-web")
    assert (pod.node_name, pod.phase, pod.priority, pod.priority_class) == (
        "n1",
        "Running",
        7,
        "high",
    )
    assert pod.scheduler_name == "gpu-scheduler"
    assert pod.created == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert pod.terminating
    assert pod.bound and pod.holds_resources and not pod.finished


@pytest.mark.parametrize(
    ("phase", "node", "holds"),
    [
        (None, None, False),
        ("Pending", "n1", True),
        ("Running", "n1", True),
        ("Succeeded", "n1", False),
        ("Failed", "n1", False),
        ("Unknown", "n1", True),
    ],
)
def test_holds_resources(phase: str | None, node: str | None, holds: bool) -> None:
    pod = parse_pod(make_pod(phase=phase, node=node))
    assert pod.holds_resources is holds
    assert pod.phase == (phase or "Pending")


@pytest.mark.parametrize(("raw", "priority"), [(None, 0), (1000, 1000), (-5, -5), ("10", 0)])
def test_priority_defaults_to_zero(raw: object, priority: int) -> None:
    assert parse_pod(make_pod(priority=raw)).priority == priority


def test_defaults_for_an_empty_object() -> None:
    pod = parse_pod({})
    assert pod.errors == ()
    assert (pod.key, pod.scheduler_name, pod.phase) == ("/", "default-scheduler", "Pending")
    assert (pod.gpus, pod.gpu_indices, pod.nvlink_policy, pod.created) == (
        0,
        None,
        "preferred",
        None,
    )
    assert [int(x) for x in pod.requests] == [0, 0, 0, 1, 0]


def test_tolerations_are_parsed_with_defaults() -> None:
    pod = parse_pod(
        make_pod(
            tolerations=[
                toleration("dedicated", "gpu", "NoSchedule"),
                toleration("maintenance", operator="Exists"),
                toleration(operator="Exists"),
                "not-a-mapping",  # type: ignore[list-item]
            ]
        )
    )
    assert pod.tolerations == (
        Toleration("dedicated", "Equal", "gpu", "NoSchedule"),
        Toleration("maintenance", "Exists", "", ""),
        Toleration("", "Exists", "", ""),
    )


def test_node_selector_is_a_string_map() -> None:
    pod = parse_pod(make_pod(node_selector={"gpu": "a100", "zone": "b"}))
    assert dict(pod.node_selector) == {"gpu": "a100", "zone": "b"}


def test_gpu_indices_annotation_is_parsed_sorted() -> None:
    pod = parse_pod(make_pod(gpus=2, gpu_indices="5, 4"))
    assert pod.gpu_indices == (4, 5)
    assert pod.errors == ()


@pytest.mark.parametrize("policy", ["preferred", "required"])
def test_nvlink_policy(policy: str) -> None:
    assert parse_pod(make_pod(nvlink_policy=policy)).nvlink_policy == policy


def test_required_and_preferred_affinity() -> None:
    affinity = node_affinity(
        required=[
            term(expr("gpu", "In", "a100", "h100"), expr("spot", "DoesNotExist")),
            term(fields=[expr("metadata.name", "In", "n1")]),
        ],
        preferred=[(30, term(expr("rack", "Gt", "4"))), (70, term(expr("zone", "NotIn", "x")))],
    )
    pod = parse_pod(make_pod(affinity=affinity))
    assert pod.errors == ()
    assert pod.required_terms == (
        NodeSelectorTerm(
            (
                SelectorRequirement("gpu", "In", ("a100", "h100")),
                SelectorRequirement("spot", "DoesNotExist", ()),
            ),
            (),
        ),
        NodeSelectorTerm((), (SelectorRequirement("metadata.name", "In", ("n1",)),)),
    )
    assert pod.preferred_terms == (
        (30, NodeSelectorTerm((SelectorRequirement("rack", "Gt", ("4",)),), ())),
        (70, NodeSelectorTerm((SelectorRequirement("zone", "NotIn", ("x",)),), ())),
    )


# -- field errors --------------------------------------------------------------------------------


def bad_request(where: str, name: str, value: object) -> dict[str, Any]:
    container = make_container(**{where: {name: value}})  # type: ignore[arg-type]
    return make_pod(containers=[make_container("ok", cpu="1"), container])


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param(
            make_pod(containers=[make_container(cpu="lots")]),
            "spec.containers[0].resources.requests.cpu",
            id="cpu",
        ),
        pytest.param(
            bad_request("requests", "memory", "1GB"),
            "spec.containers[1].resources.requests.memory",
            id="memory-second-container",
        ),
        pytest.param(
            bad_request("limits", "nvidia.com/gpu", "one"),
            "spec.containers[1].resources.limits.nvidia.com/gpu",
            id="gpu-limit",
        ),
        pytest.param(
            bad_request("requests", "nvidia.com/gpu", "-1"),
            "spec.containers[1].resources.requests.nvidia.com/gpu",
            id="negative-gpus",
        ),
        pytest.param(
            make_pod(init_containers=[make_container(), make_container(cpu=[1])]),  # type: ignore[arg-type]
            "spec.initContainers[1].resources.requests.cpu",
            id="init-cpu",
        ),
        pytest.param(
            make_pod(overhead={"memory": "x"}),
            "spec.overhead.memory",
            id="overhead",
        ),
        pytest.param(
            make_pod(gpus=2, gpu_indices="0,zero"),
            "metadata.annotations[gpu-scheduler.io/gpus]",
            id="gpus-annotation",
        ),
        pytest.param(
            make_pod(gpus=2, gpu_indices="1,1"),
            "metadata.annotations[gpu-scheduler.io/gpus]",
            id="gpus-annotation-repeated",
        ),
        pytest.param(
            make_pod(nvlink_policy="always"),
            "metadata.annotations[gpu-scheduler.io/nvlink-policy]",
            id="nvlink-policy",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(required=[term(expr("a", "In", "x")), term({})])),
            f"{REQUIRED}[1].matchExpressions[0]",
            id="requirement-without-key",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(required=[term(expr("a", "Near", "x"))])),
            f"{REQUIRED}[0].matchExpressions[0].operator",
            id="unknown-operator",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(required=[term(expr("a", "Gt", "1", "2"))])),
            f"{REQUIRED}[0].matchExpressions[0].values",
            id="gt-two-values",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(required=[term(expr("a", "Lt", "ten"))])),
            f"{REQUIRED}[0].matchExpressions[0].values",
            id="lt-not-integer",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(required=[term(expr("a", "Lt"))])),
            f"{REQUIRED}[0].matchExpressions[0].values",
            id="lt-no-value",
        ),
        pytest.param(
            make_pod(
                affinity=node_affinity(
                    required=[term(fields=[expr("metadata.name", "In", "a"), "x"])]  # type: ignore[list-item]
                )
            ),
            f"{REQUIRED}[0].matchFields[1]",
            id="match-fields-item",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(preferred=[(10, term()), (0, term())])),
            f"{PREFERRED}[1].weight",
            id="weight-zero",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(preferred=[(101, term())])),
            f"{PREFERRED}[0].weight",
            id="weight-too-large",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(preferred=[("50", term())])),
            f"{PREFERRED}[0].weight",
            id="weight-string",
        ),
        pytest.param(
            make_pod(
                affinity={
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["x"]}
                }
            ),
            f"{PREFERRED}[0].weight",
            id="preferred-item-not-mapping",
        ),
        pytest.param(
            make_pod(affinity=node_affinity(preferred=[(5, term(expr("a", "Exist")))])),
            f"{PREFERRED}[0].preference.matchExpressions[0].operator",
            id="preference-operator",
        ),
    ],
)
def test_bad_field_is_reported_by_its_path(raw: dict[str, Any], field: str) -> None:
    pod = parse_pod(raw)
    assert [error.field for error in pod.errors] == [field]
    assert str(pod.errors[0]).startswith(f"{field}: ")


def test_bad_quantity_counts_as_zero_and_others_still_count() -> None:
    pod = parse_pod(make_pod(containers=[make_container(cpu="x", memory="1Ki", gpus=2)]))
    assert [int(x) for x in pod.requests] == [0, 1024, 0, 1, 2]


def test_invalid_policy_falls_back_to_preferred() -> None:
    pod = parse_pod(make_pod(nvlink_policy="Required"))
    assert pod.nvlink_policy == "preferred"
    assert "got 'Required'" in pod.errors[0].message


def test_invalid_gpus_annotation_leaves_no_indices() -> None:
    assert parse_pod(make_pod(gpu_indices="a")).gpu_indices is None


def test_every_error_is_collected() -> None:
    pod = parse_pod(
        make_pod(
            containers=[make_container(cpu="x", memory="y")],
            nvlink_policy="no",
            affinity=node_affinity(preferred=[(0, term())]),
        )
    )
    assert [error.field for error in pod.errors] == [
        "spec.containers[0].resources.requests.cpu",
        "spec.containers[0].resources.requests.memory",
        "metadata.annotations[gpu-scheduler.io/nvlink-policy]",
        f"{PREFERRED}[0].weight",
    ]


def test_bad_requirement_is_dropped_and_good_ones_kept() -> None:
    affinity = node_affinity(required=[term(expr("a", "Near", "x"), expr("b", "Exists"))])
    pod = parse_pod(make_pod(affinity=affinity))
    assert pod.required_terms == (NodeSelectorTerm((SelectorRequirement("b", "Exists", ()),), ()),)
