"""Small helpers for tests that talk to the real API server: builders and polling."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from kubernetes_asyncio import client

T = TypeVar("T")
POLL_INTERVAL_S = 0.25


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout: float = 60.0, what: str = "condition"
) -> T:
    """Await `probe` until it returns something other than None/False; TimeoutError otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: T | None = None
    while loop.time() < deadline:
        last = await probe()
        if last is not None and last is not False:
            return last
        await asyncio.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"{what} not reached within {timeout:.0f} s (last: {last!r})")


def namespace_name(test_name: str) -> str:
    """A valid, unique-per-test namespace name derived from the test's name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha1(test_name.encode()).hexdigest()[:6]
    return f"t-{slug}-{digest}"


async def make_namespace(core_api: client.CoreV1Api, test_name: str) -> str:
    """Create the namespace and wait for its `default` ServiceAccount (pods need it)."""
    name = namespace_name(test_name)
    await core_api.create_namespace({"metadata": {"name": name}})

    async def default_sa() -> bool:
        accounts = await core_api.list_namespaced_service_account(name)
        return any(sa.metadata.name == "default" for sa in accounts.items)

    await eventually(default_sa, what=f"ServiceAccount {name}/default")
    return name


def gpu_pod(
    name: str,
    gpus: int = 1,
    scheduler_name: str = "gpu-scheduler",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    priority_class: str | None = None,
    grace_seconds: int = 0,
) -> dict[str, Any]:
    """A pod manifest asking for `gpus` whole GPUs (limits, as the device plugin requires)."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    resources["limits"] = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": grace_seconds,
        "containers": [
            {"name": "main", "image": "example.invalid/cuda-job:1", "resources": resources}
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


async def bind(
    core_api: client.CoreV1Api,
    namespace: str,
    pod: str,
    node: str,
    annotations: Mapping[str, str] | None = None,
) -> None:
    """POST pods/{pod}/binding, the call a scheduler makes."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "annotations": dict(annotations or {})},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    # The generated client cannot decode the Status the API answers a binding with, so the raw
    # response is read here; without decoding the client does not raise on errors either.
    response = await core_api.create_namespaced_pod_binding(
        pod, namespace, body, _preload_content=False
    )
    try:
        if not 200 <= response.status <= 299:
            error = client.ApiException(status=response.status, reason=response.reason)
            error.body = await response.read()
            raise error
    finally:
        response.release()


async def pod_phase(core_api: client.CoreV1Api, namespace: str, pod: str) -> str | None:
    found = await core_api.read_namespaced_pod(pod, namespace)
    return str(found.status.phase) if found.status and found.status.phase else None


async def pod_gone(core_api: client.CoreV1Api, namespace: str, pod: str) -> bool:
    try:
        await core_api.read_namespaced_pod(pod, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False
