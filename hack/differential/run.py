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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from kubernetes_asyncio import client

from hack.differential.compare import Outcome
from hack.differential.generate import (
    RUNTIME_CLASS,
    Candidate,
    JsonObject,
    Scenario,
    runtime_class,
)
from hack.differential.ours import build_cache, framework, verdict
from hack.differential.reference import (
    SCHEDULER_NAME,
    BoundCounts,
    ReferenceScheduler,
    parse_bound,
    parse_scored,
)
from hack.localcluster.nodes import wait_nodes_ready
from scheduler.kube.apierrors import expect_success

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
OUTCOME_TIMEOUT_S = 30.0
STATE_CHANGED = "the cluster state changed while the pod was judged"
POLL_S = 0.02


async def _raw(call: Any) -> Any:
    """The JSON body of a `_preload_content=False` call; APIError on a non-2xx status."""
    return json.loads(await expect_success(await call))


async def install(core: client.CoreV1Api, scenario: Scenario, concurrency: int = 16) -> None:
    """Create the scenario's objects; wait until its nodes are Ready and cordoned ones tainted."""
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
    await wait_service_accounts(core, scenario.namespace_names)
    await asyncio.gather(
        *(
            create(core.create_namespaced_pod(p["metadata"]["namespace"], cast(Any, p)))
            for p in scenario.existing
        )
    )
    await wait_running(core, scenario.existing)
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


async def wait_running(core: client.CoreV1Api, existing: Sequence[JsonObject]) -> None:
    """Wait (at most 120 s) until kwok reports every pod of `existing` Running, so no phase
    changes under the comparison."""
    wanted = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in existing}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120.0
    while wanted and loop.time() < deadline:
        pods = await _raw(core.list_pod_for_all_namespaces(_preload_content=False))
        running = {
            (p["metadata"]["namespace"], p["metadata"]["name"])
            for p in pods["items"]
            if p.get("status", {}).get("phase") == "Running"
        }
        if wanted <= running:
            return
        await asyncio.sleep(0.5)


async def wait_service_accounts(core: client.CoreV1Api, namespaces: Sequence[str]) -> None:
    """Wait (at most 60 s) until each namespace has its default ServiceAccount (pods are
    refused before)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60.0
    for namespace in namespaces:
        while loop.time() < deadline:
            accounts = await core.list_namespaced_service_account(namespace)
            if any(a.metadata.name == "default" for a in accounts.items):
                break
            await asyncio.sleep(0.2)


async def uninstall(core: client.CoreV1Api, scenario: Scenario) -> None:
    """Delete the scenario's namespaces (with their pods) and nodes."""
    for namespace in scenario.namespace_names:
        try:
            await core.delete_namespace(namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
    try:
        await client.NodeV1Api(cast(Any, core).api_client).delete_runtime_class(RUNTIME_CLASS)
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


def fingerprint(
    nodes: list[JsonObject], pods: list[JsonObject], namespaces: list[JsonObject], skip: str
) -> tuple[tuple[object, ...], ...]:
    """What either scheduler's filters read of the cluster, minus the pod keyed `skip`: the
    nodes' labels, taints, cordon and allocatable, the bound pods (node, uid, terminating or
    not, phase) and the namespaces' labels. Heartbeats and status conditions are left out."""

    def pod_key(p: JsonObject) -> str:
        return f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}"

    return (
        tuple(
            sorted(
                json.dumps(
                    [
                        n["metadata"]["name"],
                        n["metadata"].get("labels"),
                        n["spec"].get("taints"),
                        n["spec"].get("unschedulable"),
                        n.get("status", {}).get("allocatable"),
                    ],
                    sort_keys=True,
                )
                for n in nodes
            )
        ),
        tuple(
            sorted(
                (
                    pod_key(p),
                    str(p["metadata"].get("uid")),
                    str(p["spec"].get("nodeName")),
                    bool(p["metadata"].get("deletionTimestamp")),
                    str(p.get("status", {}).get("phase")),
                )
                for p in pods
                if p["spec"].get("nodeName") and pod_key(p) != skip
            )
        ),
        tuple(
            sorted(
                json.dumps([ns["metadata"]["name"], ns["metadata"].get("labels")], sort_keys=True)
                for ns in namespaces
            )
        ),
    )


FINGERPRINT_PARTS = ("node", "bound pod", "namespace")
SHOWN_CHANGES = 3
SHOWN_CHARS = 240
QUIET_TIMEOUT_S = 120.0


def describe_change(
    before: Sequence[Sequence[object]],
    after: Sequence[Sequence[object]],
    parts: Sequence[str] = FINGERPRINT_PARTS,
) -> str:
    """What differs between two fingerprints made of the parts named `parts` (each a sorted
    tuple of items): per part, at most SHOWN_CHANGES items gone and new, each cut to
    SHOWN_CHARS characters; "" when they are equal."""

    def shown(items: set[object]) -> str:
        listed = sorted(repr(item)[:SHOWN_CHARS] for item in items)
        more = len(listed) - SHOWN_CHANGES
        return "; ".join(listed[:SHOWN_CHANGES]) + (f"; and {more} more" if more > 0 else "")

    changes: list[str] = []
    for name, old, new in zip(parts, before, after, strict=True):
        gone, added = set(old) - set(new), set(new) - set(old)
        if gone:
            changes.append(f"{name} gone: {shown(gone)}")
        if added:
            changes.append(f"{name} new: {shown(added)}")
    return " | ".join(changes)


def terminating(objects: Sequence[JsonObject]) -> list[str]:
    """The names (namespace/name for namespaced objects) of `objects` being deleted."""
    return [
        "/".join(filter(None, (o["metadata"].get("namespace"), o["metadata"]["name"])))
        for o in objects
        if o["metadata"].get("deletionTimestamp")
    ]


async def wait_quiet(core: client.CoreV1Api, timeout: float = QUIET_TIMEOUT_S) -> list[str]:
    """Wait until no namespace and no pod of the cluster is being deleted (an earlier test's
    clean-up, which would change the state while a pod is judged), at most `timeout` seconds;
    returns what is still being deleted then ([] once quiet)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        _, pods, namespaces = await _state(core)
        busy = terminating(namespaces) + terminating(pods)
        if not busy or loop.time() > deadline:
            return busy
        await asyncio.sleep(0.5)


async def compare_one(
    core: client.CoreV1Api,
    reference: ReferenceScheduler,
    candidate: Candidate,
    attempts: int = 3,
) -> Outcome:
    """Both verdicts for one candidate (see the module docstring). When the cluster state
    changed while the pod was judged (something outside the run acted), the pod is judged
    again, at most `attempts` times in all; after that the outcome carries an error."""
    outcome = await _compare_once(core, reference, candidate)
    for attempt in range(2, attempts + 1):
        if not outcome.error.startswith(STATE_CHANGED):
            break
        await wait_quiet(core)
        outcome = await _compare_once(core, reference, candidate)
        outcome.attempts = attempt
    return outcome


async def _compare_once(
    core: client.CoreV1Api, reference: ReferenceScheduler, candidate: Candidate
) -> Outcome:
    namespace, name = candidate.namespace, candidate.name
    key = f"{namespace}/{name}"
    nodes, pods, namespaces = await _state(core)
    before = fingerprint(nodes, pods, namespaces, key)
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
        after = fingerprint(*(await _state(core)), key)
    finally:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    if after != before:
        error = f"{STATE_CHANGED}: {describe_change(before, after)}"
        return Outcome(key, candidate.features, frozenset(), ours.feasible, error=error)
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
    return Outcome(
        key, candidate.features, kube, ours.feasible, ours.first_failure, node_count=len(nodes)
    )


async def compare_pods(
    core: client.CoreV1Api,
    reference: ReferenceScheduler,
    candidates: Sequence[Candidate],
    progress: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    await wait_quiet(core)
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


def check_counts(outcomes: Sequence[Outcome], bound: Mapping[str, BoundCounts]) -> None:
    """Mark as an error every bound pod whose feasible set size differs from the count
    kube-scheduler logged on binding (a log line missed or misread), or for which it evaluated
    fewer than the nodes the cluster held (a shortcut cycle: its feasible set is unknown)."""
    for outcome in outcomes:
        counts = bound.get(outcome.pod)
        if outcome.error or counts is None:
            continue
        if counts.evaluated < outcome.node_count:
            outcome.error = (
                f"kube-scheduler evaluated {counts.evaluated} of {outcome.node_count} nodes "
                "(a batched or nominated-node cycle), so its feasible set is unknown"
            )
        elif counts.feasible != len(outcome.kube):
            outcome.error = (
                f"kube-scheduler logged {counts.feasible} feasible nodes, the log parser found "
                f"{len(outcome.kube)}"
            )
