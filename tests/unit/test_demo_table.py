"""The demo's pod tables: one row per pod under POD NODE GPUS DOMAIN STATUS WHY; a pod whose GPUs
span NVLink domains reads `spans` (its annotation stays -1), a missing value `<none>`."""

from __future__ import annotations

from typing import Any

from hack.demo import NONE_CELL, SPANS, domain_cell, pod_row, pod_table


def pod(
    name: str, node: str | None = None, gpus: str | None = None, domain: str | None = None
) -> dict[str, Any]:
    annotations = {}
    if gpus is not None:
        annotations["gpu-scheduler.io/gpus"] = gpus
    if domain is not None:
        annotations["gpu-scheduler.io/nvlink-domain"] = domain
    scheduled = {"type": "PodScheduled", "status": "True"}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running" if node else "Pending", "conditions": [scheduled]},
    }


def test_a_pod_spanning_domains_reads_spans_not_minus_one() -> None:
    row = pod_row(pod("gang-0", "n1", "0,1,2,3,4,5,6,7", "-1"))
    assert row == ("gang-0", "n1", "0,1,2,3,4,5,6,7", SPANS, "Running", NONE_CELL)
    assert SPANS == "spans"


def test_domain_cells() -> None:
    assert domain_cell("0") == "0"
    assert domain_cell("3") == "3"
    assert domain_cell("-1") == "spans"
    assert domain_cell(None) == domain_cell("") == "<none>"


def test_an_unplaced_pod_shows_none_and_its_reason() -> None:
    pending = pod("too-big")
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "message": "0/7 nodes are available: ..."}
    ]
    assert pod_row(pending) == (
        "too-big",
        *[NONE_CELL] * 3,
        "Pending",
        "0/7 nodes are available: ...",
    )


def test_the_table_is_aligned_sorted_and_headed() -> None:
    table = pod_table([pod("b-pod", "g1-0", "0", "0"), pod("a", "demo-gang-1", "0,1", "-1")])
    assert table.splitlines() == [
        "POD     NODE          GPUS   DOMAIN   STATUS    WHY",
        "a       demo-gang-1   0,1    spans    Running   <none>",
        "b-pod   g1-0          0      0        Running   <none>",
    ]
