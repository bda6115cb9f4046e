"""Helpers of the tests that run DRA pods on the local cluster's real node
(`tests/integration/test_real_node_dra.py` with gpu-scheduler in the test's process,
`tests/integration/test_in_cluster.py` with it as the Deployment): claims for the real node's
DRA test driver (`hack.localcluster.dradriver`), pods of the probe image printing their
environment, and what to read back: the pod, its claims, their allocation, the `claim_*`
variables its container saw, and the devices kubelet prepared (its DRA checkpoint).

Every wait is bounded (`POD_TIMEOUT_S`) and fails naming what it waited for."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from hack.localcluster.dradriver import DEVICE_CLASS, DRIVER_NAME, DraDriver
from hack.localcluster.realnode import PROBE_IMAGE, REAL_NODE_LABEL
from tests.dra_objects import claim_spec, exact, request
from tests.kube import eventually

Json = dict[str, Any]
POD_TIMEOUT_S = 120.0


def devices(count: int, name: str = "devices") -> Json:
    """A claim spec of one request for `count` devices of the driver's class."""
    return claim_spec(request(name, exact(DEVICE_CLASS, count=count)))


def env_pod(
    namespace: str,
    name: str,
    claims: list[Json],
    *,
    node: str | None = None,
    scheduler: str | None = None,
) -> Json:
    """A pod running the probe image's `-env` mode with `claims` (spec.resourceClaims entries),
    its container using each: scheduled onto the real node by the gpu-scheduler named
    `scheduler` (a test's own, named after `namespace`, when not given), or bound to `node`
    directly when given."""
    spec: Json = {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": PROBE_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["-env"],
                "resources": {"claims": [{"name": c["name"]} for c in claims]},
            }
        ],
        "resourceClaims": claims,
    }
    if node is None:
        spec |= {
            "schedulerName": scheduler or namespace,
            "nodeSelector": {REAL_NODE_LABEL: "true"},
        }
    else:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


async def pod_json(api: client.ApiClient, namespace: str, name: str) -> Json:
    response: Any = await client.CoreV1Api(api).read_namespaced_pod(
        name, namespace, _preload_content=False
    )
    body: Json = json.loads(await response.read())
    return body


async def claim_json(api: client.ApiClient, namespace: str, name: str) -> Json:
    response: Any = await client.ResourceV1Api(api).read_namespaced_resource_claim(
        name, namespace, _preload_content=False
    )
    body: Json = json.loads(await response.read())
    return body


async def running(api: client.ApiClient, namespace: str, name: str) -> Json:
    """The pod once it is Running (fails after POD_TIMEOUT_S, naming its status)."""

    async def probe() -> Json | None:
        pod = await pod_json(api, namespace, name)
        return pod if pod["status"].get("phase") == "Running" else None

    return await eventually(probe, timeout=POD_TIMEOUT_S, what=f"{namespace}/{name} Running")


async def claim_names(api: client.ApiClient, namespace: str, pod: str) -> dict[str, str]:
    """The pod's claim entry name -> the ResourceClaim's name (a template's generated one)."""
    body = await pod_json(api, namespace, pod)
    names = {}
    for entry in body["spec"]["resourceClaims"]:
        if entry.get("resourceClaimName"):
            names[entry["name"]] = entry["resourceClaimName"]
    for status in body["status"].get("resourceClaimStatuses") or ():
        if status.get("resourceClaimName"):
            names[status["name"]] = status["resourceClaimName"]
    return names


async def allocation(api: client.ApiClient, namespace: str, claim: str) -> set[tuple[str, str]]:
    """(pool, device) of every result of the claim's allocation, which gpu-scheduler wrote."""
    body = await claim_json(api, namespace, claim)
    results = body["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == {DRIVER_NAME}
    return {(r["pool"], r["device"]) for r in results}


async def claim_variables(api: client.ApiClient, namespace: str, pod: str) -> set[str]:
    """The `claim_*` lines of the environment the pod's container printed."""

    async def log() -> str | None:
        text = await client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace)
        return str(text) if "PATH=" in str(text) else None

    text = await eventually(log, what=f"{namespace}/{pod} printed its environment")
    return {line for line in text.splitlines() if line.startswith("claim_")}


def prepared(driver: DraDriver, namespace: str, claim: str) -> list[tuple[str, str]]:
    """(pool, device) of each device kubelet prepared for the claim, from its checkpoint."""
    return sorted(
        (d.pool, d.device)
        for d in driver.checkpoint()
        if d.namespace == namespace and d.claim == claim and d.driver == DRIVER_NAME
    )
