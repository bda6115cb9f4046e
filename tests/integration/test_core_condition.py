"""The PodScheduled=False patch against the real API server: its answer is checked, and with the
pod's UID it never lands on a pod re-created under the same name."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from scheduler.kube.apierrors import APIError, APINotFoundError
from scheduler.kube.binding import set_unschedulable
from tests.scheduling import our_pod, pod_json


async def test_condition_patch_is_checked_and_bound_to_the_uid(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    created = await core_api.create_namespaced_pod(namespace, our_pod(namespace, "waiting"))
    uid = created.metadata.uid

    with pytest.raises(APINotFoundError):
        await set_unschedulable(core_api, namespace, "absent", "0/1 nodes are available.")
    with pytest.raises(APIError) as refused:  # the UID of a predecessor of the same name
        await set_unschedulable(
            core_api, namespace, "waiting", "0/1 nodes are available.", uid="not-" + uid
        )
    assert refused.value.status == 422
    await set_unschedulable(
        core_api, namespace, "waiting", "0/3 nodes are available: 3 r.", uid=uid
    )

    pod = await pod_json(core_api, namespace, "waiting")
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == "0/3 nodes are available: 3 r."
