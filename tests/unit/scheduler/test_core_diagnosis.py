"""The FailedScheduling message counts each node once, under the first filter plugin (in profile
order) that rejected it, and sorts its entries as kube-scheduler's FitError does."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.framework.interface import Rejection
from scheduler.framework.runtime import NO_NODE, Diagnosis
from scheduler.framework.snapshot import Snapshot
from tests.unit.scheduler.builders import cluster, make_node, make_pod, pod_info, taint


def counts_of(message: str) -> dict[str, int]:
    detail = message.split(": ", 1)[1].rstrip(".")
    return {m.group(2): int(m.group(1)) for m in re.finditer(r"(\d+) ([^,]+)", detail)}


def test_ten_nodes_add_up_to_ten() -> None:
    """9 nodes in the wrong zone (and full), 1 in the right zone but full: kube-scheduler says
    9 selector mismatches and 1 Insufficient nvidia.com/gpu, not 10 + 9."""
    nodes = [make_node(f"b{i}", labels={"zone": "b"}) for i in range(9)]
    nodes.append(make_node("a0", labels={"zone": "a"}))
    hogs = [
        make_pod(f"hog-{n['metadata']['name']}", gpus=8, node=n["metadata"]["name"]) for n in nodes
    ]
    cache = cluster(*nodes, pods=hogs)
    pod = pod_info("p", gpus=1, node_selector={"zone": "a"})
    evaluation = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache))
    assert evaluation.chosen == NO_NODE
    message = evaluation.diagnosis.message(Snapshot(cache).valid)
    assert message == (
        "0/10 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "9 node(s) didn't match Pod's node affinity/selector."
    )
    assert sum(counts_of(message).values()) == 10


def test_message_follows_profile_order_and_sorts_as_strings() -> None:
    """6 full nodes, 2 tainted and full: the taint filter runs first, so the tainted nodes count
    only under the taint; entries are sorted as strings ("2 node(s)..." before "6 ...")."""
    nodes = [make_node(f"gpu{i}") for i in range(6)]
    nodes += [make_node(f"infra{i}", taints=[taint("dedicated", "infra")]) for i in range(2)]
    hogs = [
        make_pod(f"hog-{n['metadata']['name']}", gpus=8, node=n["metadata"]["name"]) for n in nodes
    ]
    cache = cluster(*nodes, pods=hogs)
    evaluation = default_framework(SchedulerConfig()).evaluate(pod_info(gpus=1), Snapshot(cache))
    assert evaluation.diagnosis.message(Snapshot(cache).valid) == (
        "0/8 nodes are available: 2 node(s) had untolerated taint {dedicated: infra}, "
        "6 Insufficient nvidia.com/gpu."
    )


def test_reasons_sort_as_kube_scheduler_sorts_them() -> None:
    """kube-scheduler sorts the "<count> <reason>" strings: "10 b" comes before "2 a"."""
    failed_a = np.zeros(12, dtype=bool)
    failed_a[:2] = True
    diagnosis = Diagnosis(
        node_count=12,
        feasible=np.zeros(12, dtype=bool),
        rejections=[
            Rejection("a", failed_a, True, "A"),
            Rejection("b", ~failed_a, True, "B"),
        ],
    )
    assert diagnosis.message(np.ones(12, dtype=bool)) == "0/12 nodes are available: 10 b, 2 a."


def test_one_plugin_may_give_a_node_several_reasons() -> None:
    """As NodeResourcesFit in kube-scheduler: a node short of cpu and GPUs shows under both;
    a later plugin's reason for the same node does not."""
    cache = cluster(make_node("n", cpu="1", taints=[]), pods=[make_pod("hog", gpus=8, node="n")])
    pod = pod_info(gpus=1, cpu="2", node_selector={"zone": "x"})
    diagnosis = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache)).diagnosis
    assert diagnosis.message(Snapshot(cache).valid) == (
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    )
    pod = pod_info(gpus=1, cpu="2")
    diagnosis = default_framework(SchedulerConfig()).evaluate(pod, Snapshot(cache)).diagnosis
    assert diagnosis.message(Snapshot(cache).valid) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=5),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    )
)
def test_each_rejected_node_is_counted_once_under_its_first_plugin(
    case: tuple[int, list[list[bool]], list[bool]],
) -> None:
    rows, masks, valid_list = case
    valid = np.array(valid_list, dtype=bool)  # valid: (rows,)
    rejections = [
        Rejection(f"reason {i % 3}", np.array(mask, dtype=bool), True, f"plugin{i}")
        for i, mask in enumerate(masks)
    ]
    diagnosis = Diagnosis(int(valid.sum()), np.zeros(rows, dtype=bool), rejections)
    expected: dict[str, int] = {}
    for row in range(rows):
        first = next((r for r in rejections if r.failed[row]), None)
        if valid[row] and first is not None:
            expected[first.reason] = expected.get(first.reason, 0) + 1
    assert diagnosis.reason_counts(valid) == expected
    rejected = int((valid & np.any(np.array(masks, dtype=bool), axis=0)).sum())
    assert sum(diagnosis.reason_counts(valid).values()) == rejected
