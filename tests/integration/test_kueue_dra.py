"""Kueue admits a Job whose pods get their GPUs through ResourceClaimTemplates by counting the
claims' devices against quota; gpu-scheduler places the pods inside Kueue's flavor and
allocates their claims there, inside one NVLink domain.

Runs the real Kueue (`kueue` fixture) with the local cluster's Configuration
(hack/localcluster/kueue.py: the `DynamicResourceAllocation` gate, DeviceClass `gpu.nvidia.com`
mapped to `nvidia.com/gpu`), the ClusterQueue of docs/kueue.md's recipe and the template and
Job of its section "Dynamic Resource Allocation (ResourceClaimTemplates)", renamed and sized per
test. The nodes are 8-GPU DRA nodes (`D8`: devices gpu-0..7, NVLink domains gpu-0..3 and
gpu-4..7); the flavor's `nodeLabels` select only some of them.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER
from hack.localcluster.kueue import GPU_QUOTA_RESOURCE, QUEUE_LABEL
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from tests.docs import kueue_dra_recipe
from tests.integration.test_dra_allocation import (
    allocated_devices,
    claim_json,
    dra_pod,
    template_claim_name,
)
from tests.integration.test_kueue import (
    FLAVOR_TOLERATION,
    RECIPE,
    SCHEDULER,
    Scene,
    Team,
    get_custom_object,
    team_queues,
)
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for

pytestmark = pytest.mark.usefixtures("kueue")

Json = dict[str, Any]

FLAVOR_LABEL = "gpu-scheduler.io/kueue-flavor"
"""Node label the test's ResourceFlavor selects (value: the namespace)."""
_, DOCUMENTED = kueue_dra_recipe()
TEMPLATE = DOCUMENTED["ResourceClaimTemplate", "two-gpus"]
JOB = DOCUMENTED["Job", "train-dra"]
NVLINK_DOMAINS = (
    frozenset(f"gpu-{i}" for i in range(4)),
    frozenset(f"gpu-{i}" for i in range(4, 8)),
)


def gpu_template(name: str, namespace: str, gpus: int, *expressions: str) -> Json:
    """The documented template, renamed, asking for `gpus` GPUs (with CEL `expressions`)."""
    template = copy.deepcopy(TEMPLATE)
    template["metadata"] = {"name": name, "namespace": namespace}
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["count"] = gpus
    if expressions:
        request["exactly"]["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return template


def dra_job(name: str, queue: str, pods: int, template: str) -> Json:
    """The documented Job with `pods` parallel pods, each with a claim of `template`, queued in
    `queue`; its pods run on kwok until deleted."""
    job = copy.deepcopy(JOB)
    job["metadata"] = {"name": name, "labels": {QUEUE_LABEL: queue}}
    job["spec"].update(parallelism=pods, completions=pods)
    pod_template = job["spec"]["template"]
    pod_template["metadata"] = {"annotations": {RUN_ANNOTATION: UNTIL_DELETED}}
    pod_template["spec"]["terminationGracePeriodSeconds"] = 0
    (claim,) = pod_template["spec"]["resourceClaims"]
    claim["resourceClaimTemplateName"] = template
    return job


async def bound_dra_pods(scene: Scene, job: str, count: int) -> list[Json]:
    """Wait until Job `job` has exactly `count` pods, each bound and Running; returns them."""

    async def probe() -> list[Json] | None:
        pods = await scene.pods(job)
        ready = [
            p
            for p in pods
            if p["spec"].get("nodeName")
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        return ready if len(ready) == count == len(pods) else None

    return await eventually(probe, what=f"{count} pod(s) of Job {job} bound and Running")


async def admission(scene: Scene, job: str) -> Json:
    """The `status.admission` of Job `job`'s Workload."""
    custom = client.CustomObjectsApi(scene.api_client)
    name = await scene.workload(job)
    assert name is not None
    workload = await get_custom_object(custom, "workloads", scene.namespace, name)
    found: Json = workload["status"]["admission"]
    return found


async def test_a_job_with_claim_templates_is_admitted_by_its_devices_and_placed_in_the_flavor(
    cluster: LocalCluster, core_api: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    api = api_client
    taints = RECIPE["ResourceFlavor", "h200"]["spec"]["nodeTaints"]
    in_flavor = isolated(
        replace(D8, type_name="D8F", taints=taints, labels={FLAVOR_LABEL: namespace}),
        namespace,
        count=2,
    )
    outside = isolated(D8, namespace)
    await make_nodes(core_api, [in_flavor, outside])
    flavor_nodes, (other,) = set(in_flavor.node_names()), outside.node_names()
    resource: Any = client.ResourceV1Api(api)  # the generated stubs want models, not JSON
    for name, gpus in (("two-gpus", 2), ("holder-gpus", 2)):
        await resource.create_namespaced_resource_claim_template(
            namespace, gpu_template(name, namespace, gpus)
        )
    selected = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    await resource.create_namespaced_resource_claim_template(
        namespace, gpu_template("selected-gpus", namespace, 2, selected)
    )
    teams = [Team("team", gpus=4)]
    async with (
        team_queues(api, namespace, teams, node_labels={FLAVOR_LABEL: namespace}),
        running_daemon(cluster, settings_for(namespace, schedulerName=SCHEDULER)),
    ):
        scene = Scene(core_api, api, namespace, other)
        pods_api: Any = core_api
        # Outside Kueue: a pod holding 2 GPUs of the third node leaves it 2 free in one domain,
        # the tightest fit for a 2-GPU claim; a probe pod that may go anywhere (the flavor's
        # toleration, no flavor label) is placed there, so that is where a claim goes unless
        # the flavor's nodeSelector keeps it away.
        for pod_name, selector in (
            ("holder", {"kubernetes.io/hostname": other}),
            ("probe", {}),
        ):
            template = "holder-gpus" if pod_name == "holder" else "two-gpus"
            pod = dra_pod(
                namespace, pod_name, [{"name": "gpus", "resourceClaimTemplateName": template}]
            )
            pod["spec"]["schedulerName"] = SCHEDULER
            pod["spec"]["nodeSelector"].update(selector)
            pod["spec"]["tolerations"] = [FLAVOR_TOLERATION]
            await pods_api.create_namespaced_pod(namespace, pod)

            async def bound(pod_name: str = pod_name) -> str | None:
                body = await core_api.read_namespaced_pod(pod_name, namespace)
                node: str | None = body.spec.node_name
                return node

            assert await eventually(bound, what=f"{pod_name} bound") == other

        batch: Any = client.BatchV1Api(api)
        await batch.create_namespaced_job(namespace, dra_job("first", "team", 2, "two-gpus"))
        await scene.condition("first", "Admitted")
        # Kueue counted the claims' devices: 2 pods x 2 GPUs of class gpu.nvidia.com, as the
        # mapped resource, in the test's flavor.
        (assignment,) = (await admission(scene, "first"))["podSetAssignments"]
        assert assignment["count"] == 2
        assert assignment["resourceUsage"][GPU_QUOTA_RESOURCE] == "4", assignment
        assert assignment["flavors"][GPU_QUOTA_RESOURCE] == namespace, assignment

        pods = await bound_dra_pods(scene, "first", 2)
        taken: set[tuple[str, str]] = set()
        for pod in pods:
            node = pod["spec"]["nodeName"]
            assert node in flavor_nodes, (node, flavor_nodes)
            assert pod["spec"]["nodeSelector"][FLAVOR_LABEL] == namespace  # from the flavor
            assert FLAVOR_TOLERATION in pod["spec"]["tolerations"]  # from the flavor
            claim_name = await template_claim_name(core_api, namespace, pod["metadata"]["name"])
            devices = await allocated_devices(api, namespace, claim_name)
            assert len(devices) == 2
            assert any(set(devices) <= domain for domain in NVLINK_DOMAINS), devices
            claim = await claim_json(api, namespace, claim_name)
            results = claim["status"]["allocation"]["devices"]["results"]
            assert {(r["driver"], r["pool"]) for r in results} == {(DRIVER, node)}
            reserved = claim["status"]["reservedFor"]
            assert [r["uid"] for r in reserved] == [pod["metadata"]["uid"]]
            taken |= {(node, d) for d in devices}
        assert len(taken) == 4  # no device given twice

        # The quota's 4 GPUs are in use: a second Job of 1 x 2 GPUs waits, suspended, with no
        # pods, although the flavor's nodes have 12 GPUs free.
        await batch.create_namespaced_job(namespace, dra_job("second", "team", 1, "two-gpus"))
        pending = await scene.condition("second", "QuotaReserved", status="False")
        assert pending["reason"] == "Pending", pending
        assert GPU_QUOTA_RESOURCE in pending["message"], pending
        assert await scene.suspended("second")
        assert await scene.pods("second") == []

        # A template with a CEL selector is more than Kueue v0.17.0 counts: inadmissible.
        await batch.create_namespaced_job(namespace, dra_job("third", "team", 1, "selected-gpus"))
        refused = await scene.condition("third", "QuotaReserved", status="False")
        assert refused["reason"] == "Inadmissible", refused
        assert "CEL selectors are not supported" in refused["message"], refused
        assert await scene.suspended("third")
        assert await scene.pods("third") == []
        assert len(await scene.pods("first")) == 2
