"""DeviceTaintRules the scheduler writes for GPUs dcgm-exporter reports sick (resource.k8s.io/v1,
cluster-scoped, GA in Kubernetes 1.37; newer than the generated client, so written through the
custom objects API).

A rule taints exactly one device (`deviceSelector` with driver, pool and device) with
`gpu-scheduler.io/unhealthy=<reason>:NoSchedule`: kube-scheduler's allocator, and this
scheduler's, then skip the device for every claim that does not tolerate the taint
(NoSchedule does not evict pods already using it; the DeviceTaintRule API,
k8s.io/api@v0.37.2 resource/v1/types.go). Rules are named `HEALTH_RULE_PREFIX` + a digest of
(driver, pool, device), so a name always maps to the same device and the scheduler recognizes
the rules it owns by their name; they carry the label `app.kubernetes.io/managed-by`.

Writes go through the fenced client: only the leader's leave this process
(`scheduler.kube.fence`). A create that finds the rule there (409) and a delete that finds it
gone (404) count as done.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, api_call, expect_success

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "devicetaintrules"
HEALTH_RULE_PREFIX = "gpu-scheduler-unhealthy-"
UNHEALTHY_TAINT_KEY = "gpu-scheduler.io/unhealthy"
MANAGED_BY = "app.kubernetes.io/managed-by"
TAINT_VALUE_MAX = 63


def health_rule_name(driver: str, pool: str, device: str) -> str:
    """The name of the rule for one device: the prefix and 16 hex digits of its identity."""
    digest = hashlib.sha256(f"{driver}/{pool}/{device}".encode()).hexdigest()[:16]
    return HEALTH_RULE_PREFIX + digest


def taint_value(kinds: tuple[str, ...]) -> str:
    """A label value naming the reasons ("xid_79.ecc_dbe"), at most 63 characters."""
    value = ".".join(kinds)[:TAINT_VALUE_MAX]
    return value.strip("._-") or "unhealthy"


def health_rule_body(
    driver: str, pool: str, device: str, value: str, manager: str
) -> dict[str, Any]:
    """The DeviceTaintRule for one sick device."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": health_rule_name(driver, pool, device),
            "labels": {MANAGED_BY: manager},
        },
        "spec": {
            "deviceSelector": {"driver": driver, "pool": pool, "device": device},
            "taint": {"key": UNHEALTHY_TAINT_KEY, "value": value, "effect": "NoSchedule"},
        },
    }


async def create_rule(api_client: client.ApiClient, body: dict[str, Any], timeout: float) -> bool:
    """Create the rule; False when it exists already. Raises APIError otherwise."""
    custom = client.CustomObjectsApi(api_client)
    what = f"creating devicetaintrule {body['metadata']['name']}"
    try:
        async with api_call(what):
            response = await custom.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, body, _preload_content=False, _request_timeout=timeout
            )
        await expect_success(response, what)
    except APIError as error:
        if error.conflict:
            return False
        raise
    return True


async def delete_rule(api_client: client.ApiClient, name: str, timeout: float) -> bool:
    """Delete the rule; False when it is gone already. Raises APIError otherwise."""
    custom = client.CustomObjectsApi(api_client)
    what = f"deleting devicetaintrule {name}"
    try:
        async with api_call(what):
            response = await custom.delete_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, _preload_content=False, _request_timeout=timeout
            )
        await expect_success(response, what)
    except APIError as error:
        if error.not_found:
            return False
        raise
    return True
