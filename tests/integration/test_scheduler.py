"""The scheduler against the real local control plane: placement, events, conditions, isolation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1, G2, G2_EXPANSION, LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    TEST_LABEL,
    gpus_of,
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

H200_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "nvidia.com/gpu.product",
                            "operator": "In",
                            "values": ["NVIDIA-H200"],
                        }
                    ]
                }
            ]
        }
    }
}


def _count(reason: str, message: str) -> int:
    """How many nodes a FailedScheduling message counts under `reason` (0 if absent)."""
    found = re.search(rf"(\d+) {re.escape(reason)}", message)
    return int(found.group(1)) if found else 0


def _explain(cluster: LocalCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "explain",
            "--pod",
            f"{namespace}/{pod}",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-o",
            "json",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


async def test_seed_worked_example_and_the_8_gpu_node_kept_for_an_8_gpu_pod(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    small_node, big_node = await make_nodes(
        core_api, [isolated(G1, namespace), isolated(G2_EXPANSION, namespace)]
    )
    # A pod bound by someone else holds one of the 2-GPU node's GPUs.
    await core_api.create_namespaced_pod(namespace, gpu_pod("other", 1, scheduler_name="other"))
    await bind(core_api, namespace, "other", small_node)
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "small", 1))

    rows = {row["node"]: row for row in _explain(cluster, namespace, "small")}
    assert rows[small_node]["raw"] == 250 and rows[small_node]["normalized"] == 92
    assert rows[big_node]["raw"] == 40 and rows[big_node]["normalized"] == 31
    assert rows[small_node]["components"] == {
        "base": 50,
        "domain_integrity": 50,
        "node_matching": 80,
        "domain_completion": 40,
        "efficiency": 30,
    }
    order = [row["node"] for row in _explain(cluster, namespace, "small")]
    assert order.index(small_node) < order.index(big_node)

    async with running_daemon(cluster, settings_for(namespace)):
        small = await wait_bound(core_api, namespace, "small")
        assert small["spec"]["nodeName"] == small_node
        assert gpus_of(small) == [1]  # GPU 0 was taken by the other scheduler's pod
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, "whole-node", 8))
        whole = await wait_bound(core_api, namespace, "whole-node")
        assert whole["spec"]["nodeName"] == big_node
        assert gpus_of(whole) == list(range(8))

        async def scheduled_notes() -> list[str] | None:
            events = await pod_events(core_api.api_client, namespace, "whole-node")
            found = [e["note"] for e in events if e["reason"] == "Scheduled"]
            return found or None  # events are written in the background, after the binding

        notes = await eventually(scheduled_notes, what="the Scheduled event")
    assert notes[0].startswith(f"Successfully assigned {namespace}/whole-node to {big_node};")
    assert "GPUs 0,1,2,3,4,5,6,7 across NVLink domains" in notes[0]


async def test_only_our_pods_are_scheduled_and_others_gpus_are_counted(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=2)])  # 8 GPUs in all
    selector = {TEST_LABEL: namespace}
    for i in range(2):  # kube-scheduler places these: 4 GPUs
        await core_api.create_namespaced_pod(
            namespace,
            gpu_pod(f"baseline-{i}", 2, scheduler_name="default-scheduler", node_selector=selector),
        )
    for i in range(2):
        await wait_bound(core_api, namespace, f"baseline-{i}")
    await core_api.create_namespaced_pod(
        namespace, gpu_pod("someone-elses", 1, scheduler_name="nobody", node_selector=selector)
    )
    for i in range(4):  # room for 2 of these
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, f"ours-{i}", 2))

    async with running_daemon(cluster, settings_for(namespace)) as daemon:

        async def settled() -> bool:
            return daemon.scheduler.bound == 2 and daemon.queue.pools()["unschedulable"] == 2

        await eventually(settled, what="2 pods bound, 2 unschedulable")
        pods = await core_api.list_namespaced_pod(namespace)
    used: dict[str, int] = defaultdict(int)
    for pod in pods.items:
        if pod.spec.node_name:
            used[pod.spec.node_name] += int(
                pod.spec.containers[0].resources.limits["nvidia.com/gpu"]
            )
    assert set(used) <= set(nodes)
    assert all(count <= 4 for count in used.values()), used
    assert sum(used.values()) == 8
    by_name = {pod.metadata.name: pod for pod in pods.items}
    assert by_name["someone-elses"].spec.node_name is None
    pending = [
        p for p in by_name.values() if p.metadata.name.startswith("ours") and not p.spec.node_name
    ]
    assert len(pending) == 2
    condition = pending[0].status.conditions[0]
    assert (condition.type, condition.status, condition.reason) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    # Every node of this test lacks GPUs (other tests' nodes fail the selector instead).
    assert re.fullmatch(r"0/\d+ nodes are available: .*\.", condition.message)
    assert _count("Insufficient nvidia.com/gpu", condition.message) >= 2


async def test_multi_gpu_pods_land_inside_one_nvlink_domain(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    g2, g2e = await make_nodes(
        core_api, [isolated(G2, namespace), isolated(G2_EXPANSION, namespace)]
    )
    domains = {g2: [{0, 1}, {2, 3}], g2e: [{0, 1, 2, 3}, {4, 5, 6, 7}]}
    sizes = {"four-a": 4, "two-a": 2, "two-b": 2, "four-b": 4}  # exactly the 12 GPUs
    for name, gpus in sizes.items():
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, name, gpus))
    async with running_daemon(cluster, settings_for(namespace)):
        placed = {name: await wait_bound(core_api, namespace, name) for name in sizes}
    taken: dict[str, set[int]] = defaultdict(set)
    for name, pod in placed.items():
        node, gpus = pod["spec"]["nodeName"], set(gpus_of(pod))
        assert len(gpus) == sizes[name]
        assert any(gpus <= domain for domain in domains[node]), (name, node, gpus)
        assert not gpus & taken[node], f"{name} double-books {gpus & taken[node]} on {node}"
        taken[node] |= gpus
        assert pod["metadata"]["annotations"]["gpu-scheduler.io/nvlink-domain"] != "-1"


async def test_taints_tolerations_and_affinity(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    tainted = isolated(G1, namespace)
    tainted = replace(
        tainted, taints=({"key": "dedicated", "value": "infra", "effect": "NoSchedule"},)
    )
    tainted_node, h200_node = await make_nodes(
        core_api, [tainted, isolated(G2_EXPANSION, namespace)]
    )
    toleration = [
        {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
    ]
    pod = our_pod(namespace, "needs-h200", 1)
    pod["spec"]["affinity"] = H200_AFFINITY
    await core_api.create_namespaced_pod(namespace, pod)
    tolerant = our_pod(namespace, "tolerant", 2)
    tolerant["spec"]["tolerations"] = toleration
    tolerant["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"] = tainted.type_name
    await core_api.create_namespaced_pod(namespace, tolerant)
    intolerant = our_pod(namespace, "intolerant", 1)
    intolerant["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"] = tainted.type_name
    await core_api.create_namespaced_pod(namespace, intolerant)
    async with running_daemon(cluster, settings_for(namespace)):
        assert (await wait_bound(core_api, namespace, "needs-h200"))["spec"][
            "nodeName"
        ] == h200_node
        assert (await wait_bound(core_api, namespace, "tolerant"))["spec"][
            "nodeName"
        ] == tainted_node

        async def condition() -> dict[str, Any] | None:
            conditions = (await pod_json(core_api, namespace, "intolerant"))["status"].get(
                "conditions"
            )
            return conditions[0] if conditions else None

        unschedulable = await eventually(condition, what="PodScheduled condition")
        assert unschedulable["reason"] == "Unschedulable"
        assert "node(s) had untolerated taint {dedicated: infra}" in unschedulable["message"]

        async def failed_scheduling() -> bool:
            events = await pod_events(core_api.api_client, namespace, "intolerant")
            return any(
                e["reason"] == "FailedScheduling"
                and e["type"] == "Warning"
                and e["reportingController"] == namespace
                and "untolerated taint" in e["note"]
                for e in events
            )

        await eventually(failed_scheduling, what="the FailedScheduling event")
        assert (await pod_json(core_api, namespace, "intolerant"))["spec"].get("nodeName") is None


async def test_unschedulable_pod_is_scheduled_when_room_appears(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    await make_nodes(core_api, [isolated(G1, namespace)])
    await core_api.create_namespaced_pod(namespace, our_pod(namespace, "four", 4))
    async with running_daemon(cluster, settings_for(namespace)) as daemon:

        async def parked() -> bool:
            return daemon.queue.pools()["unschedulable"] == 1

        await eventually(parked, what="the 4-GPU pod parked as unschedulable")

        async def condition_message() -> str | None:
            # The PodScheduled patch goes out in the background after the pod is parked.
            status = (await pod_json(core_api, namespace, "four"))["status"]
            conditions = status.get("conditions") or ()
            return str(conditions[0]["message"]) if conditions else None

        message = await eventually(condition_message, what="PodScheduled=False written")
        # Alone in the cluster, the 2-GPU node is the largest: the message says so instead.
        assert _count("Insufficient nvidia.com/gpu", message) >= 1 or message.endswith(
            "requests 4 nvidia.com/gpu (spec.containers[*].resources.limits) and the largest "
            "node has 2."
        )
        (g2,) = await make_nodes(core_api, [isolated(G2, namespace)])
        placed = await wait_bound(core_api, namespace, "four")
        assert placed["spec"]["nodeName"] == g2
