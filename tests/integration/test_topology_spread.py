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

from hack.localcluster import G1, G2, LocalCluster
from scheduler.plugins.topology_spread import REASON_MISSING, REASON_SKEW
from tests.kube import eventually
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
    specs = [
        replace(
            isolated(G2, namespace, count=2),
            type_name=f"n{namespace[-6:]}-z{zone}",
            labels={**isolated(G2, namespace).labels, ZONE: zone},
        )
        for zone in ZONES
    ]
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
