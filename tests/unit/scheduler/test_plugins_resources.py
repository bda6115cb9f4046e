"""NodeResourcesFit: one rejection per short resource, kube-scheduler's reasons."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.framework.interface import CycleState
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_pod
from scheduler.plugins.resources import NodeResourcesFit, insufficient_reason
from tests.unit.scheduler.builders import (
    cluster,
    make_node,
    make_pod,
    pod_info,
    rejected,
    snapshot_of,
)

MIG_1G = "nvidia.com/mig-1g.10gb"


def verdict(
    pod: dict[str, Any], *nodes: dict[str, Any], pods: Sequence[dict[str, Any]] = ()
) -> dict[str, set[str]]:
    return rejected(NodeResourcesFit(), parse_pod(pod), snapshot_of(*nodes, pods=pods))


@pytest.mark.parametrize(
    ("resource", "reason"),
    [
        ("cpu", "Insufficient cpu"),
        ("memory", "Insufficient memory"),
        ("ephemeral-storage", "Insufficient ephemeral-storage"),
        ("nvidia.com/gpu", "Insufficient nvidia.com/gpu"),
        ("pods", "Too many pods"),
        (MIG_1G, f"Insufficient {MIG_1G}"),
    ],
)
def test_reason_text(resource: str, reason: str) -> None:
    assert insufficient_reason(resource) == reason


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(make_pod(gpus=1, cpu="1"), {}, id="fits-both"),
        pytest.param(
            make_pod(gpus=2, cpu="1"), {"Insufficient nvidia.com/gpu": {"small"}}, id="gpus"
        ),
        pytest.param(
            make_pod(gpus=3, cpu="1"),
            {"Insufficient nvidia.com/gpu": {"small", "big"}},
            id="gpus-none-free-enough",
        ),
        pytest.param(make_pod(gpus=1, cpu="7"), {"Insufficient cpu": {"small"}}, id="cpu"),
        pytest.param(
            make_pod(gpus=1, cpu="3", memory="16Gi"),
            {"Insufficient cpu": {"small"}, "Insufficient memory": {"small", "big"}},
            id="cpu-and-memory",
        ),
        pytest.param(make_pod(gpus=0, cpu="0"), {}, id="nothing-requested"),
    ],
)
def test_rejections_by_resource(pod: dict[str, Any], expected: dict[str, set[str]]) -> None:
    nodes = (
        make_node("small", gpus=2, domains="0-1", cpu="4", memory="8Gi"),
        make_node("big", gpus=8, cpu="64", memory="8Gi"),
    )
    used = [make_pod("u1", gpus=6, cpu="1", node="big"), make_pod("u2", cpu="2", node="small")]
    assert verdict(pod, *nodes, pods=used) == expected


def test_exact_fit_passes_and_one_more_fails() -> None:
    nodes = (make_node("n", gpus=4, domains="0-3", cpu="2"),)
    used = [make_pod("u", gpus=3, cpu="1500m", node="n")]
    assert verdict(make_pod(gpus=1, cpu="500m"), *nodes, pods=used) == {}
    assert verdict(make_pod(gpus=1, cpu="501m"), *nodes, pods=used) == {"Insufficient cpu": {"n"}}
    assert verdict(make_pod(gpus=2, cpu="1m"), *nodes, pods=used) == {
        "Insufficient nvidia.com/gpu": {"n"}
    }


def test_too_many_pods() -> None:
    nodes = (make_node("full", pods=2), make_node("roomy", pods=3))
    used = [make_pod("a", gpus=0, node="full"), make_pod("b", gpus=0, node="full")]
    used += [make_pod("c", gpus=0, node="roomy")]
    assert verdict(make_pod(gpus=0), *nodes, pods=used) == {"Too many pods": {"full"}}


def test_node_without_gpus_rejects_gpu_pods() -> None:
    assert verdict(make_pod(gpus=1), make_node("cpu", gpus=0)) == {
        "Insufficient nvidia.com/gpu": {"cpu"}
    }


def test_overcommitted_node_rejects_more_gpu_pods() -> None:
    used = [make_pod("a", gpus=2, node="n"), make_pod("b", gpus=1, node="n")]
    assert verdict(make_pod(gpus=1), make_node("n", gpus=2, domains="0-1"), pods=used) == {
        "Insufficient nvidia.com/gpu": {"n"}
    }


def test_rejections_are_resolvable_and_named() -> None:
    snapshot = snapshot_of(make_node("n", gpus=1, domains="0"))
    rejections = NodeResourcesFit().filter(pod_info(gpus=2), snapshot, CycleState())
    gpu = [r for r in rejections if r.reason == "Insufficient nvidia.com/gpu"]
    assert len(gpu) == 1
    assert gpu[0].resolvable
    assert gpu[0].plugin == "NodeResourcesFit"
    assert all(r.resolvable for r in rejections)


def test_deleted_node_rows_are_ignored() -> None:
    cache = cluster(make_node("gone", gpus=0), make_node("here"))
    cache.remove_node("gone")
    assert rejected(NodeResourcesFit(), pod_info(gpus=1), Snapshot(cache)) == {}


def test_reason_for_an_overlong_resource_name_is_bounded() -> None:
    name = "example.com/" + "x" * 1000
    reason = insufficient_reason(name)
    assert reason.startswith("Insufficient example.com/xxx")
    assert "(1012 characters)" in reason
    assert len(reason) < 400
    assert insufficient_reason("example.com/" + "x" * 63) == "Insufficient example.com/" + "x" * 63
