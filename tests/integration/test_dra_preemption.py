"""Priority preemption and idle reclaim of pods whose GPUs come from ResourceClaims, single
pods and gangs, on the real API server, kube-controller-manager, Prometheus and fake
dcgm-exporter: the what-if frees the devices of the victims' claims, the preemptor is
nominated, the resourceclaim controller deallocates the victim's claim once the pod is gone,
and the preemptor gets those devices. kube-scheduler 1.37 does not do this: its
DynamicResources rejections are UnschedulableAndUnresolvable, so its preemption never frees
devices."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import D4, LocalCluster
from tests.dra_objects import claim_template
from tests.integration.test_dra_allocation import (
    allocated_devices,
    dra_pod,
    gpus,
    template_claim_name,
)
from tests.integration.test_gangs import create_group
from tests.integration.test_preemption import classes  # noqa: F401  (the fixture)
from tests.integration.test_reclaim import notes, reclaim_settings, samples_for
from tests.kube import eventually, pod_gone
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for, wait_bound

Json = dict[str, Any]


def template_pod(namespace: str, name: str, template: str, priority_class: str) -> Json:
    pod = dra_pod(namespace, name, [{"name": "gpus", "resourceClaimTemplateName": template}])
    pod["spec"]["priorityClassName"] = priority_class
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


async def claim_gone_or_free(api: client.ApiClient, namespace: str, name: str) -> bool:
    """The claim was deleted, or is no longer allocated."""
    try:
        response = await client.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace)
    except client.ApiException as error:
        return error.status == 404
    return response.status is None or response.status.allocation is None


async def node_with_template(core: client.CoreV1Api, namespace: str) -> str:
    """This test's 4-GPU DRA node and the template "two" (2 GPUs); the node's name."""
    [node] = await make_nodes(core, [isolated(D4, namespace)])
    await client.ResourceV1Api(core.api_client).create_namespaced_resource_claim_template(
        namespace, claim_template("two", namespace, gpus(2))
    )
    return node


async def place_holder(
    core: client.CoreV1Api, namespace: str, name: str, priority_class: str, usage: str = ""
) -> list[str]:
    """A pod of template "two" (with scripted GPU usage if given), bound by the running
    scheduler; the devices its claim was allocated."""
    pod = template_pod(namespace, name, "two", priority_class)
    if usage:
        pod["metadata"]["annotations"] = {"fake-dcgm.gpu-scheduler.io/usage": usage}
    await core.create_namespaced_pod(namespace, pod)
    await wait_bound(core, namespace, name)
    claim = await template_claim_name(core, namespace, name)
    return await allocated_devices(core.api_client, namespace, claim)


async def place_gang(
    core: client.CoreV1Api, namespace: str, priority_class: str
) -> tuple[list[Json], list[str]]:
    """A minCount-2 gang "pg" of two template pods w0, w1, once both are bound: the bound
    pods and the devices their claims were allocated."""
    await create_group(core.api_client, namespace, "pg", 2)
    for name in ("w0", "w1"):
        pod = template_pod(namespace, name, "two", priority_class)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "pg"}
        await core.create_namespaced_pod(namespace, pod)
    bound = [await wait_bound(core, namespace, n) for n in ("w0", "w1")]
    got: list[str] = []
    for name in ("w0", "w1"):
        claim = await template_claim_name(core, namespace, name)
        got += await allocated_devices(core.api_client, namespace, claim)
    return bound, got


async def test_a_lower_priority_pod_is_preempted_for_the_devices_of_its_claim(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    api = core_api.api_client
    node = await node_with_template(core_api, namespace)
    settings = settings_for(
        namespace, reclaim={"mode": "off"}, queue={"unschedulableFlushSeconds": 1}
    )
    async with running_daemon(cluster, settings) as daemon:
        held = {
            name: await place_holder(core_api, namespace, name, classes[klass])
            for name, klass in (("low", "plain-low"), ("mid", "plain-mid"))
        }
        low_claim = await template_claim_name(core_api, namespace, "low")
        preemptor = await core_api.create_namespaced_pod(
            namespace, template_pod(namespace, "preemptor", "two", classes["urgent"])
        )
        bound = await wait_bound(core_api, namespace, "preemptor")
        mine = await allocated_devices(
            api, namespace, await template_claim_name(core_api, namespace, "preemptor")
        )
        victim_notes = await eventually(
            lambda: notes(core_api, namespace, "low", "Preempted"), what="victim event"
        )
        outcomes = dict(daemon.reclaimer.preemption.outcomes)
    assert bound["spec"]["nodeName"] == node
    assert await pod_gone(core_api, namespace, "low")
    assert not await pod_gone(core_api, namespace, "mid")
    assert await claim_gone_or_free(api, namespace, low_claim)
    assert mine == held["low"]  # the devices the victim's claim gave back
    assert victim_notes == [f"Preempted by pod {preemptor.metadata.uid} on node {node}"]
    assert outcomes.get("planned", 0) >= 1


async def test_a_gang_with_claims_preempts_for_every_member_or_nobody(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    """Two 2-GPU members of a minCount-2 gang on a 4-GPU node held by two lower-priority
    template pods: the gang's what-if frees both victims' devices, both go, both members
    are bound with the devices they gave back."""
    node = await node_with_template(core_api, namespace)
    settings = settings_for(
        namespace, reclaim={"mode": "off"}, queue={"unschedulableFlushSeconds": 1}
    )
    async with running_daemon(cluster, settings) as daemon:
        held: set[str] = set()
        for name in ("low0", "low1"):
            held.update(await place_holder(core_api, namespace, name, classes["plain-low"]))
        bound, got = await place_gang(core_api, namespace, classes["urgent"])
        outcomes = dict(daemon.gang_reclaimer.outcomes)
    assert {p["spec"]["nodeName"] for p in bound} == {node}
    assert await pod_gone(core_api, namespace, "low0")
    assert await pod_gone(core_api, namespace, "low1")
    assert sorted(got) == sorted(held) and len(set(got)) == 4
    assert outcomes.get("evicted") == 1, outcomes


async def test_idle_reclaim_evicts_only_the_idle_holder_of_a_claim(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    """Two template pods of a reclaimable class fill a 4-GPU node, one at 0 % on both of its
    devices, one at 70 %: the fake exporter attributes each claim's devices to its pod, so the
    idle verdict takes the idle one only, and the preemptor gets its two devices."""
    api = core_api.api_client
    node = await node_with_template(core_api, namespace)
    settings = reclaim_settings(cluster, namespace)
    async with running_daemon(cluster, settings) as daemon:
        held = {
            name: await place_holder(core_api, namespace, name, classes["low"], usage)
            for name, usage in (("idle", "constant:util=0"), ("busy", "constant:util=70"))
        }
        await samples_for(cluster.prometheus_url or "", namespace, ["idle", "busy"])
        await core_api.create_namespaced_pod(
            namespace, template_pod(namespace, "preemptor", "two", classes["idle-ok"])
        )
        bound = await wait_bound(core_api, namespace, "preemptor")
        mine = await allocated_devices(
            api, namespace, await template_claim_name(core_api, namespace, "preemptor")
        )
        evicted = dict(daemon.reclaimer.stats.evictions)
    assert bound["spec"]["nodeName"] == node
    assert await pod_gone(core_api, namespace, "idle")
    assert not await pod_gone(core_api, namespace, "busy")
    assert mine == held["idle"]
    assert sum(evicted.values()) == 1, evicted


async def test_idle_reclaim_frees_the_devices_of_idle_pods_for_a_whole_gang(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    classes: dict[str, str],  # noqa: F811
) -> None:
    """Two idle template pods fill a 4-GPU node: the gang's idle step evicts both (it needs
    both pairs of devices) and its two members get exactly those devices."""
    node = await node_with_template(core_api, namespace)
    async with running_daemon(cluster, reclaim_settings(cluster, namespace)) as daemon:
        held: set[str] = set()
        for name in ("idle0", "idle1"):
            idle = "constant:util=0"
            held.update(await place_holder(core_api, namespace, name, classes["low"], idle))
        await samples_for(cluster.prometheus_url or "", namespace, ["idle0", "idle1"])
        bound, got = await place_gang(core_api, namespace, classes["idle-ok"])
        outcomes = dict(daemon.gang_reclaimer.outcomes)
    assert {p["spec"]["nodeName"] for p in bound} == {node}
    assert await pod_gone(core_api, namespace, "idle0")
    assert await pod_gone(core_api, namespace, "idle1")
    assert sorted(got) == sorted(held) and len(set(got)) == 4
    assert outcomes.get("evicted") == 1, outcomes
    assert daemon.reclaimer.preemption.outcomes.get("gang", 0) == 0  # the idle step did it
