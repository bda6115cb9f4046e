"""kwok's pod lifecycle on the fake nodes (hack/localcluster/kwok_stages.py): a pod annotated
until-deleted terminates like a kubelet's when deleted (containers killed, phase Failed, its
finalizers left to their owners); any other pod goes at once, finalizers stripped, as before."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from hack.localcluster import G1
from hack.localcluster.kwok_stages import RUN_ANNOTATION, UNTIL_DELETED
from tests.kube import bind, eventually, pod_gone
from tests.scheduling import isolated, make_nodes, our_pod, pod_json

FINALIZER = "example.com/hold"


async def _running_pod(
    core: client.CoreV1Api, namespace: str, node: str, name: str, annotations: dict[str, str]
) -> dict[str, Any]:
    pod = our_pod(namespace, name, 1, scheduler_name="nobody", annotations=annotations)
    pod["metadata"]["finalizers"] = [FINALIZER]
    pod["spec"]["initContainers"] = [
        {"name": "setup", "image": "example.invalid/setup:1"},
        {"name": "sidecar", "image": "example.invalid/sidecar:1", "restartPolicy": "Always"},
    ]
    await core.create_namespaced_pod(namespace, pod)
    await bind(core, namespace, name, node)

    async def running() -> dict[str, Any] | None:
        found = await pod_json(core, namespace, name)
        return found if found["status"].get("phase") == "Running" else None

    return await eventually(running, what=f"{name} Running")


async def test_an_until_deleted_pod_terminates_like_a_kubelets_and_keeps_its_finalizers(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G1, namespace)])
    pod = await _running_pod(core_api, namespace, node, "job-pod", {RUN_ANNOTATION: UNTIL_DELETED})
    init = {s["name"]: s["state"] for s in pod["status"]["initContainerStatuses"]}
    assert set(init["setup"]) == {"terminated"} and set(init["sidecar"]) == {"running"}, init

    await core_api.delete_namespaced_pod("job-pod", namespace)

    async def killed() -> dict[str, Any] | None:
        found = await pod_json(core_api, namespace, "job-pod")
        return found if found["status"].get("phase") == "Failed" else None

    pod = await eventually(killed, what="job-pod Failed")
    assert pod["metadata"]["finalizers"] == [FINALIZER]
    (state,) = [s["state"] for s in pod["status"]["containerStatuses"]]
    assert state["terminated"]["exitCode"] == 137, state

    await core_api.patch_namespaced_pod("job-pod", namespace, {"metadata": {"finalizers": None}})
    await eventually(lambda: pod_gone(core_api, namespace, "job-pod"), what="job-pod gone")


async def test_any_other_pod_is_removed_at_once_finalizers_stripped(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G1, namespace)])
    await _running_pod(core_api, namespace, node, "plain", {})
    await core_api.delete_namespaced_pod("plain", namespace)
    await eventually(lambda: pod_gone(core_api, namespace, "plain"), what="plain gone")
