"""Pod affinity and anti-affinity against the real local control plane."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import numpy as np
from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from scheduler.framework.interface import CycleState
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import parse_node, parse_pod
from scheduler.plugins.inter_pod_affinity import InterPodAffinity
from scheduler.plugins.node_affinity import NodeAffinity
from scheduler.state.cache import ClusterCache
from tests.kube import bind, eventually, gpu_pod
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    our_pod,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def with_affinity(
    pod: dict[str, Any], kind: str, key: str, labels: dict[str, str]
) -> dict[str, Any]:
    """`pod` with one required `kind` (podAffinity / podAntiAffinity) term on `key`."""
    term = {"topologyKey": key, "labelSelector": {"matchLabels": labels}}
    pod["spec"]["affinity"] = {kind: {REQUIRED: [term]}}
    return pod


async def unschedulable_message(core: client.CoreV1Api, namespace: str, name: str) -> str:
    async def message() -> str | None:
        pod = await pod_json(core, namespace, name)
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                return str(condition.get("message") or "") or None
        return None

    return await eventually(message, what=f"{namespace}/{name} reported unschedulable")


async def test_required_anti_affinity_on_hostname_spreads_one_pod_per_node(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=3)])
    spread = {"app": "spread"}
    for i in range(4):
        pod = our_pod(namespace, f"spread-{i}", 1, labels=spread)
        await core_api.create_namespaced_pod(
            namespace, with_affinity(pod, "podAntiAffinity", HOST, spread)
        )
    async with running_daemon(cluster, settings_for(namespace)):
        await eventually(lambda: _placed(core_api, namespace, 3), what="3 pods bound")
        pending = [
            name
            for name, node in (await _placed_by_name(core_api, namespace)).items()
            if node is None
        ]
        assert len(pending) == 1
        message = await unschedulable_message(core_api, namespace, pending[0])
        placed = [node for node in (await _placed_by_name(core_api, namespace)).values() if node]
    assert sorted(placed) == sorted(nodes)
    assert "3 node(s) didn't match pod anti-affinity rules" in message


async def _placed_by_name(core: client.CoreV1Api, namespace: str) -> dict[str, str | None]:
    pods = await core.list_namespaced_pod(namespace)
    return {pod.metadata.name: pod.spec.node_name for pod in pods.items}


async def _placed(core: client.CoreV1Api, namespace: str, count: int) -> bool:
    return sum(1 for node in (await _placed_by_name(core, namespace)).values() if node) >= count


async def test_required_zone_affinity_follows_the_labelled_pod(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    zone_a = isolated(replace(G2, type_name="za", labels={ZONE: "a"}), namespace, count=2)
    zone_b = isolated(replace(G2, type_name="zb", labels={ZONE: "b"}), namespace, count=2)
    nodes_a = await make_nodes(core_api, [zone_a])
    nodes_b = await make_nodes(core_api, [zone_b])
    anchor = our_pod(namespace, "anchor", 1, labels={"app": "db"}, node_selector={ZONE: "b"})
    await core_api.create_namespaced_pod(namespace, anchor)
    async with running_daemon(cluster, settings_for(namespace)):
        assert (await wait_bound(core_api, namespace, "anchor"))["spec"]["nodeName"] in nodes_b
        for i in range(4):
            pod = our_pod(namespace, f"follower-{i}", 1)
            await core_api.create_namespaced_pod(
                namespace, with_affinity(pod, "podAffinity", ZONE, {"app": "db"})
            )
        followers = [
            (await wait_bound(core_api, namespace, f"follower-{i}"))["spec"]["nodeName"]
            for i in range(4)
        ]
    assert set(followers) <= set(nodes_b), (followers, nodes_a)


async def test_existing_pods_anti_affinity_keeps_a_newcomer_off_its_node(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    first, second = await make_nodes(core_api, [isolated(G2, namespace, count=2)])
    loner = our_pod(namespace, "loner", 1, node_selector={HOST: first})
    await core_api.create_namespaced_pod(
        namespace, with_affinity(loner, "podAntiAffinity", HOST, {"app": "web"})
    )
    async with running_daemon(cluster, settings_for(namespace)):
        assert (await wait_bound(core_api, namespace, "loner"))["spec"]["nodeName"] == first
        for i in range(3):
            await core_api.create_namespaced_pod(
                namespace, our_pod(namespace, f"web-{i}", 1, labels={"app": "web"})
            )
        webs = [
            (await wait_bound(core_api, namespace, f"web-{i}"))["spec"]["nodeName"]
            for i in range(3)
        ]
        pinned = our_pod(namespace, "pinned", 1, labels={"app": "web"}, node_selector={HOST: first})
        await core_api.create_namespaced_pod(namespace, pinned)
        message = await unschedulable_message(core_api, namespace, "pinned")
    assert webs == [second] * 3
    assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in message


async def _kube_scheduler_verdict(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """The node kube-scheduler bound the pod to, or "" when it reported it unschedulable."""

    async def verdict() -> str | None:
        pod = await pod_json(core, namespace, name)
        if pod["spec"].get("nodeName"):
            return str(pod["spec"]["nodeName"])
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return ""
        return None

    return await eventually(verdict, what=f"kube-scheduler's verdict on {namespace}/{name}")


async def _our_feasible(
    core: client.CoreV1Api, namespace: str, incoming: dict[str, Any]
) -> set[str]:
    """The nodes our NodeAffinity and InterPodAffinity filters accept for `incoming`, on a cache
    built from the API's current nodes and this namespace's pods."""
    cache = ClusterCache()
    nodes = await core.list_node(_preload_content=False)
    for node in json.loads(await nodes.read())["items"]:
        cache.add_or_update_node(parse_node(node))
    pods = await core.list_namespaced_pod(namespace, _preload_content=False)
    for pod in json.loads(await pods.read())["items"]:
        cache.add_pod(parse_pod(pod))
    framework = Framework(filters=[NodeAffinity(), InterPodAffinity()], scores=[])
    snapshot = Snapshot(cache)
    diagnosis = framework.run_filters(parse_pod(incoming), snapshot, CycleState())
    return {snapshot.names[row] for row in np.flatnonzero(diagnosis.feasible)}


def _random_term(rng: random.Random) -> dict[str, Any]:
    return {
        "topologyKey": rng.choice((HOST, ZONE)),
        "labelSelector": {"matchLabels": {"app": rng.choice("ab")}},
    }


async def test_feasibility_agrees_with_kube_scheduler_on_seeded_random_cases(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """Existing pods (some with required anti-affinity) bound at random, then a pod with random
    required (anti-)affinity for kube-scheduler: the node it picks must be one our filters
    accept, and it must find none exactly when our filters accept none."""
    zone_a = isolated(replace(G2, type_name="ka", labels={ZONE: "a"}), namespace, count=2)
    zone_b = isolated(replace(G2, type_name="kb", labels={ZONE: "b"}), namespace, count=2)
    nodes = await make_nodes(core_api, [zone_a, zone_b])
    selector = {TEST_LABEL: namespace}
    outcomes: list[bool] = []
    for seed in range(10):
        rng = random.Random(seed)
        for i in range(rng.randint(2, 4)):
            name = f"s{seed}-existing-{i}"
            pod = gpu_pod(name, 0, scheduler_name="nobody", labels={"app": rng.choice("ab")})
            if rng.random() < 0.4:
                pod["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [_random_term(rng)]}}
            await core_api.create_namespaced_pod(namespace, pod)
            await bind(core_api, namespace, name, rng.choice(nodes))
        name = f"s{seed}-incoming"
        incoming = gpu_pod(
            name,
            0,
            scheduler_name="default-scheduler",
            labels={"app": rng.choice("ab")},
            node_selector=selector,
        )
        affinity: dict[str, Any] = {}
        if rng.random() < 0.6:
            affinity["podAffinity"] = {REQUIRED: [_random_term(rng)]}
        if rng.random() < 0.6:
            affinity["podAntiAffinity"] = {REQUIRED: [_random_term(rng)]}
        incoming["spec"]["affinity"] = affinity
        incoming["metadata"]["namespace"] = namespace
        ours = await _our_feasible(core_api, namespace, incoming)
        # The pod watch delivers the bindings above to kube-scheduler before this pod.
        await core_api.create_namespaced_pod(namespace, incoming)
        chosen = await _kube_scheduler_verdict(core_api, namespace, name)
        if chosen:
            assert chosen in ours, (seed, chosen, ours, affinity)
        else:
            assert ours == set(), (seed, ours, affinity)
        outcomes.append(bool(chosen))
        await core_api.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        await eventually(
            lambda: _gone(core_api, namespace), what=f"{namespace} pods deleted after case {seed}"
        )
    assert any(outcomes) and not all(outcomes), outcomes  # the cases cover both verdicts


async def _gone(core: client.CoreV1Api, namespace: str) -> bool:
    return not (await core.list_namespaced_pod(namespace)).items


async def test_a_pod_waiting_for_its_affinity_partner_is_woken_when_the_partner_is_bound(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    nodes = await make_nodes(core_api, [isolated(G2, namespace, count=2)])
    follower = our_pod(namespace, "follower", 1)
    await core_api.create_namespaced_pod(
        namespace, with_affinity(follower, "podAffinity", HOST, {"app": "partner"})
    )
    # No periodic retry within the test: only the partner's arrival can wake the follower.
    settings = settings_for(namespace, queue={"unschedulableFlushSeconds": 3600})
    async with running_daemon(cluster, settings) as daemon:
        message = await unschedulable_message(core_api, namespace, "follower")
        assert "didn't match pod affinity rules" in message
        await eventually(
            lambda: _in_pool(daemon.queue.where(f"{namespace}/follower"), "unschedulable"),
            what="the follower in the unschedulable pool",
        )
        partner = gpu_pod(
            "partner",
            0,
            scheduler_name="default-scheduler",
            labels={"app": "partner"},
            node_selector={HOST: nodes[1]},
        )
        await core_api.create_namespaced_pod(namespace, partner)
        placed = await wait_bound(core_api, namespace, "follower")
    assert placed["spec"]["nodeName"] == nodes[1]


async def _in_pool(pool: str | None, wanted: str) -> bool:
    return pool == wanted
