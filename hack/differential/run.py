"""Drive one differential run against a started local cluster (see hack/differential/__init__.py).

`install(core, scenario)` creates the scenario's namespaces, nodes and existing pods and waits
until the nodes are Ready and settled. `compare_pods(core, reference, candidates)` then takes the
candidates one at a time: the cluster state is read, the pod is created for the reference
kube-scheduler, gpu-scheduler's filters judge the created object (as the API server returned it,
admission defaults included) against that state, the reference's outcome is awaited, and the pod
is deleted (grace period 0) before the next one, so every pod meets the same state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from kubernetes_asyncio import client

from hack.differential.compare import Outcome
from hack.differential.generate import (
    HOLD_FINALIZER,
    Candidate,
    JsonObject,
    Scenario,
    runtime_class,
)
from hack.differential.ours import build_cache, framework, verdict
from hack.differential.reference import (
    SCHEDULER_NAME,
    ReferenceScheduler,
    parse_bound,
    parse_scored,
)
from hack.localcluster.nodes import wait_nodes_ready
from scheduler.kube.apierrors import expect_success

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
OUTCOME_TIMEOUT_S = 30.0
POLL_S = 0.02


async def _raw(call: Any) -> Any:
    """The JSON body of a `_preload_content=False` call; APIError on a non-2xx status."""
    return json.loads(await expect_success(await call))


async def install(core: client.CoreV1Api, scenario: Scenario, concurrency: int = 16) -> int:
    """Create the scenario's objects; wait until its nodes are Ready and cordoned ones tainted.
    Returns how many existing pods are terminating (deleted, held by a finalizer)."""
    gate = asyncio.Semaphore(concurrency)

    async def create(call: Awaitable[Any]) -> None:
        async with gate:  # the coroutine starts only when awaited, inside the gate
            try:
                await call
            except client.ApiException as error:
                if error.status != 409:
                    raise

    for namespace in scenario.namespaces:
        await create(core.create_namespace(cast(Any, namespace)))
    await create(
        client.NodeV1Api(cast(Any, core).api_client).create_runtime_class(
            cast(Any, runtime_class())
        )
    )
    await asyncio.gather(*(create(core.create_node(cast(Any, n))) for n in scenario.nodes))
    names = [str(n["metadata"]["name"]) for n in scenario.nodes]
    await wait_nodes_ready(core, names, timeout=300.0)
    await _wait_service_accounts(core, scenario.namespace_names)
    await asyncio.gather(
        *(
            create(core.create_namespaced_pod(p["metadata"]["namespace"], cast(Any, p)))
            for p in scenario.existing
        )
    )
    await asyncio.gather(
        *(
            create(core.delete_namespaced_pod(p["metadata"]["name"], p["metadata"]["namespace"]))
            for p in scenario.existing
            if HOLD_FINALIZER in p["metadata"].get("finalizers", ())
        )
    )
    cordoned = {
        str(n["metadata"]["name"]) for n in scenario.nodes if n["spec"].get("unschedulable")
    }
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120.0
    while cordoned and loop.time() < deadline:
        nodes = await _raw(core.list_node(_preload_content=False))
        tainted = {
            n["metadata"]["name"]
            for n in nodes["items"]
            if any(t.get("key") == UNSCHEDULABLE_TAINT for t in n["spec"].get("taints") or [])
        }
        if cordoned <= tainted:
            break
        await asyncio.sleep(0.5)
    pods = await _raw(core.list_pod_for_all_namespaces(_preload_content=False))
    return sum(
        1
        for p in pods["items"]
        if p["metadata"]["namespace"] in scenario.namespace_names
        and p["metadata"].get("deletionTimestamp")
    )


async def _wait_service_accounts(core: client.CoreV1Api, namespaces: Sequence[str]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60.0
    for namespace in namespaces:
        while loop.time() < deadline:
            accounts = await core.list_namespaced_service_account(namespace)
            if any(a.metadata.name == "default" for a in accounts.items):
                break
            await asyncio.sleep(0.2)


async def uninstall(core: client.CoreV1Api, scenario: Scenario) -> None:
    """Release the held pods; delete the scenario's namespaces (with their pods) and nodes."""
    for pod in scenario.existing:
        if HOLD_FINALIZER in pod["metadata"].get("finalizers", ()):
            try:
                await core.patch_namespaced_pod(
                    pod["metadata"]["name"],
                    pod["metadata"]["namespace"],
                    [{"op": "remove", "path": "/metadata/finalizers"}],
                )
            except client.ApiException as error:
                if error.status != 404:
                    raise
    for namespace in scenario.namespace_names:
        try:
            await core.delete_namespace(namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
    for node in scenario.nodes:
        try:
            await core.delete_node(node["metadata"]["name"])
        except client.ApiException as error:
            if error.status != 404:
                raise


async def _state(
    core: client.CoreV1Api,
) -> tuple[list[JsonObject], list[JsonObject], list[JsonObject]]:
    nodes, pods, namespaces = await asyncio.gather(
        _raw(core.list_node(_preload_content=False)),
        _raw(core.list_pod_for_all_namespaces(_preload_content=False)),
        _raw(core.list_namespace(_preload_content=False)),
    )
    return nodes["items"], pods["items"], namespaces["items"]


def _unschedulable(pod: JsonObject) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in conditions
    )


async def _outcome(core: client.CoreV1Api, namespace: str, name: str) -> JsonObject | None:
    """The pod once bound or marked Unschedulable; None after OUTCOME_TIMEOUT_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTCOME_TIMEOUT_S
    while loop.time() < deadline:
        pod: JsonObject = await _raw(
            core.read_namespaced_pod(name, namespace, _preload_content=False)
        )
        if pod["spec"].get("nodeName") or _unschedulable(pod):
            return pod
        await asyncio.sleep(POLL_S)
    return None


async def compare_one(
    core: client.CoreV1Api, reference: ReferenceScheduler, candidate: Candidate
) -> Outcome:
    """Both verdicts for one candidate (see the module docstring)."""
    namespace, name = candidate.namespace, candidate.name
    key = f"{namespace}/{name}"
    nodes, pods, namespaces = await _state(core)
    cache = build_cache(nodes, pods, namespaces, skip=key)
    manifest = json.loads(json.dumps(candidate.manifest))
    manifest["spec"]["schedulerName"] = SCHEDULER_NAME
    created: JsonObject = await _raw(
        core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    )
    try:
        ours = verdict(created, cache, framework())
        done = await _outcome(core, namespace, name)
        scored = parse_scored(reference.read_new()).get(key, set())
    finally:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    if done is None:
        return Outcome(
            key,
            candidate.features,
            frozenset(),
            ours.feasible,
            ours.first_failure,
            error=f"kube-scheduler gave no outcome within {OUTCOME_TIMEOUT_S:.0f} s",
        )
    bound = done["spec"].get("nodeName")
    if bound and not scored:
        kube = frozenset({bound})
    elif bound and bound not in scored:
        return Outcome(
            key,
            candidate.features,
            frozenset(scored),
            ours.feasible,
            ours.first_failure,
            error=f"kube-scheduler bound to {bound}, which it did not log as scored",
        )
    else:
        kube = frozenset(scored)
    return Outcome(key, candidate.features, kube, ours.feasible, ours.first_failure)


async def compare_pods(
    core: client.CoreV1Api,
    reference: ReferenceScheduler,
    candidates: Sequence[Candidate],
    progress: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for index, candidate in enumerate(candidates):
        if not reference.alive():
            raise RuntimeError("the reference kube-scheduler exited; see its log")
        outcome = await compare_one(core, reference, candidate)
        outcomes.append(outcome)
        if progress is not None:
            progress(index, outcome)
    check_counts(outcomes, parse_bound(reference.whole_log()))
    return outcomes


def check_counts(outcomes: Sequence[Outcome], bound: dict[str, int]) -> None:
    """Mark as an error every bound pod whose feasible set size differs from the count
    kube-scheduler logged on binding (a log line missed or misread)."""
    for outcome in outcomes:
        count = bound.get(outcome.pod)
        if not outcome.error and count is not None and count != len(outcome.kube):
            outcome.error = (
                f"kube-scheduler logged {count} feasible nodes, the log parser found "
                f"{len(outcome.kube)}"
            )
