"""The shipped fencing policy (manifests/fencing-policy.yaml) enforced in one test's namespace.

The policy is the manifest's own. Like in a real deployment, it and one binding are installed once
and never removed: the API server follows the policy's parameter kind (Lease) with an informer that
it stops once no binding uses a policy of that kind, and does not start again for a later binding
(kube-apiserver 1.34 and 1.37, `policy_source.go`; seen here as Leases created afterwards staying
"not found" for minutes). The session's binding is the manifest's with two changes: the Lease is
looked up in the namespace of the pod being bound (`paramRef` without a namespace), and it matches
only namespaces labelled `FENCED_LABEL`, which a test puts on its own namespace.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes_asyncio import client

from scheduler.kube.fence import LEASE_TERM_ANNOTATION
from tests.kube import eventually

POLICY_FILE = Path(__file__).resolve().parents[1] / "manifests" / "fencing-policy.yaml"
FENCED_LABEL = "gpu-scheduler.io/test-fencing-policy"
LEASE = "gpu-scheduler"
"""The name of the Lease the session's binding reads, in each fenced namespace."""


def shipped_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, as the manifest ships them."""
    documents = [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]
    by_kind = {d["kind"]: d for d in documents}
    return (
        by_kind["ValidatingAdmissionPolicy"],
        by_kind["ValidatingAdmissionPolicyBinding"],
    )


async def _create_once(create: Any, body: dict[str, Any]) -> None:
    try:
        await create(cast(Any, body))
    except client.ApiException as error:
        if error.status != 409:  # installed by an earlier test: kept, as in a cluster
            raise


@asynccontextmanager
async def fencing_policy(api_client: client.ApiClient, namespace: str) -> AsyncIterator[None]:
    """Enforce the shipped policy on Bindings and Evictions in `namespace`, whose Lease `LEASE`
    (in `namespace`) must exist already; return once the API server enforces it with that Lease
    loaded. Afterwards the namespace's label is removed (the policy and binding stay)."""
    admission = client.AdmissionregistrationV1Api(api_client)
    core = client.CoreV1Api(api_client)
    policy, binding = (copy.deepcopy(d) for d in shipped_policy())
    policy_name = policy["metadata"]["name"]
    binding["metadata"]["name"] = f"{policy_name}-tests"
    binding["spec"]["paramRef"] = {**binding["spec"]["paramRef"], "name": LEASE}
    del binding["spec"]["paramRef"]["namespace"]
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {FENCED_LABEL: "true"}}
    }
    await _create_once(admission.create_validating_admission_policy, policy)
    await _create_once(admission.create_validating_admission_policy_binding, binding)
    await core.patch_namespace(namespace, {"metadata": {"labels": {FENCED_LABEL: "true"}}})
    try:
        await _wait_enforced(core, namespace, policy_name)
        yield
    finally:
        await core.patch_namespace(namespace, {"metadata": {"labels": {FENCED_LABEL: None}}})


async def _wait_enforced(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Bind throwaway pods with a term that is never current until policy `name` refuses one
    for its term. Right after a policy or its Lease appears, the API server may still allow the
    request, or refuse it for want of the Lease ("no params found"): both mean not yet."""
    attempts = itertools.count()
    seen: list[str] = []

    async def refused() -> bool:
        probe = f"fencing-policy-probe-{next(attempts)}"
        await core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": probe},
                "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "p"}]},
            },
        )
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": probe,
                "annotations": {LEASE_TERM_ANNOTATION: f"{namespace}/{LEASE}/probe/-1"},
            },
            "target": {"kind": "Node", "name": "no-such-node"},
        }
        try:
            response = await core.create_namespaced_pod_binding(
                probe, namespace, cast(Any, body), _preload_content=False
            )
            status, text = response.status, await response.text()
            seen[:] = [f"{status} {text[:300]}"]
        finally:
            await core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
        if status == 403 and name in text and "current term is" in text:
            return True  # refused by this policy, judged on the Lease
        if status // 100 == 2 or (status == 422 and "no params found" in text):
            return False  # not enforced yet, or the Lease not seen by the policy yet
        raise AssertionError(f"probe binding: {status} {text[:300]}")

    try:
        await eventually(refused, what="the fencing policy enforced")
    except TimeoutError as error:
        raise TimeoutError(f"{error}; the last probe got: {seen}") from None
