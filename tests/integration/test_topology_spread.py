"""PodTopologySpread against the real local control plane, side by side with kube-scheduler.

Three zones of kwok nodes (two nodes each) and one node without a zone label. A Deployment-like
set of pods with a zone constraint (maxSkew 1, DoNotSchedule) is placed by this scheduler and,
under another label, by kube-scheduler: both end with zone counts differing by at most 1. A pod
whose constraint cannot be met (minDomains 4 with three zones) stays pending with the
constraint's reason under both schedulers.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1, G2, LocalCluster, NodeSpec
from scheduler.plugins.topology_spread import REASON_MISSING, REASON_SKEW
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    isolated,
    make_nodes,
    our_pod,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

ZONE = "topology.kubernetes.io/zone"
ZONES = ("a", "b", "c")
REPLICAS = 7


def _count(reason: str, message: str) -> int:
    """Nodes a FailedScheduling message counts under exactly `reason` (0 if absent)."""
    found = re.search(rf"(\d+) {re.escape(reason)}(?:[,.]| \w)", message)
    return int(found.group(1)) if found else 0


def zoned(namespace: str, zone: str, count: int = 1, **changes: Any) -> NodeSpec:
    """`count` nodes of this test in `zone`, named after it."""
    spec = isolated(G2, namespace, count=count)
    return replace(
        spec,
        type_name=f"n{namespace[-6:]}-z{zone}",
        labels={**spec.labels, ZONE: zone},
        **changes,
    )


def spread_pod(
    namespace: str, name: str, app: str, scheduler: str, **constraint: Any
) -> dict[str, Any]:
    pod = our_pod(namespace, name, 0, scheduler_name=scheduler, labels={"app": app})
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
            **constraint,
        }
    ]
    return pod


async def _pending_message(core: client.CoreV1Api, namespace: str, name: str) -> str:
    async def unschedulable() -> str | None:
        pod = await pod_json(core, namespace, name)
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["reason"] == "Unschedulable":
                message: str = condition["message"]
                return message
        return None

    return await eventually(unschedulable, what=f"{name} reported unschedulable")


async def test_zone_spread_matches_kube_scheduler(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    specs = [zoned(namespace, zone, count=2) for zone in ZONES]
    names = await make_nodes(core_api, [*specs, isolated(G1, namespace)])
    zone_of = {
        name: zone
        for spec, zone in zip(specs, ZONES, strict=True)
        for name in names
        if name.startswith(spec.type_name.lower() + "-")
    }
    unlabelled = [name for name in names if name not in zone_of]
    assert len(zone_of) == 6 and len(unlabelled) == 1

    ours = [f"web-{i}" for i in range(REPLICAS)]
    theirs = [f"kube-web-{i}" for i in range(REPLICAS)]
    for name in theirs:
        await core_api.create_namespaced_pod(
            namespace, spread_pod(namespace, name, "kube-web", "default-scheduler")
        )
    for name in ours:
        await core_api.create_namespaced_pod(
            namespace, spread_pod(namespace, name, "web", namespace)
        )

    async with running_daemon(cluster, settings_for(namespace)):
        placed = [await wait_bound(core_api, namespace, name) for name in ours]
        # minDomains 4 with three zones: the global minimum is 0, every zone already has 2+.
        await core_api.create_namespaced_pod(
            namespace, spread_pod(namespace, "stuck", "web", namespace, minDomains=4)
        )
        ours_message = await _pending_message(core_api, namespace, "stuck")
    kube_placed = [await wait_bound(core_api, namespace, name) for name in theirs]
    await core_api.create_namespaced_pod(
        namespace,
        spread_pod(namespace, "kube-stuck", "kube-web", "default-scheduler", minDomains=4),
    )
    kube_message = await _pending_message(core_api, namespace, "kube-stuck")

    ours_zones = Counter(zone_of[pod["spec"]["nodeName"]] for pod in placed)
    kube_zones = Counter(zone_of[pod["spec"]["nodeName"]] for pod in kube_placed)
    assert set(ours_zones) == set(ZONES), ours_zones
    assert max(ours_zones.values()) - min(ours_zones.values()) <= 1, ours_zones
    assert sorted(ours_zones.values()) == sorted(kube_zones.values()) == [2, 2, 3]

    # The six zoned nodes fail the skew, the unlabelled one the label; same verdict as kube's.
    for message in (ours_message, kube_message):
        assert _count(REASON_SKEW, message) == 6, message
        assert _count(REASON_MISSING, message) == 1, message
    stuck = await pod_json(core_api, namespace, "stuck")
    assert not stuck["spec"].get("nodeName")


async def test_taints_policy_verdicts_match_kube_scheduler(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """Zones a and b hold one matching pod each; zone c's only node is tainted. With
    nodeTaintsPolicy Ignore (the default) zone c counts with 0 pods, so a and b are at skew 2
    and c is refused by its taint: pending. With Honor zone c does not count: skew 1, placed."""
    dedicated = ({"key": "dedicated", "value": "x", "effect": "NoSchedule"},)
    nodes = await make_nodes(
        core_api,
        [zoned(namespace, "a"), zoned(namespace, "b"), zoned(namespace, "c", taints=dedicated)],
    )
    for index, node in enumerate(nodes[:2]):
        seed = f"seed-{index}"
        await core_api.create_namespaced_pod(
            namespace, gpu_pod(seed, 0, scheduler_name="nobody", labels={"app": "seed"})
        )
        await bind(core_api, namespace, seed, node)

    async with running_daemon(cluster, settings_for(namespace)):
        for prefix, scheduler in (("ours", namespace), ("kube", "default-scheduler")):
            await core_api.create_namespaced_pod(
                namespace, spread_pod(namespace, f"{prefix}-ignore", "seed", scheduler)
            )
        messages = {
            prefix: await _pending_message(core_api, namespace, f"{prefix}-ignore")
            for prefix in ("ours", "kube")
        }
        for prefix, scheduler in (("ours", namespace), ("kube", "default-scheduler")):
            pod = spread_pod(
                namespace, f"{prefix}-honor", "seed", scheduler, nodeTaintsPolicy="Honor"
            )
            await core_api.create_namespaced_pod(namespace, pod)
            placed = await wait_bound(core_api, namespace, f"{prefix}-honor")
            assert placed["spec"]["nodeName"] in nodes[:2]

    for prefix, message in messages.items():
        assert _count(REASON_SKEW, message) == 2, (prefix, message)
        # kube-scheduler 1.34 words it "untolerated taint(s)", this scheduler names the taint.
        assert re.search(r"\b1 node\(s\) had untolerated taint", message), (prefix, message)
    for prefix in ("ours", "kube"):
        pending = await pod_json(core_api, namespace, f"{prefix}-ignore")
        assert not pending["spec"].get("nodeName"), prefix
