"""Drive the DRA differential against a started local cluster (hack/differential/__init__.py).

`install_dra(core, scenario)` creates the namespaces, the DeviceClasses, the nodes and their
ResourceSlices (owned by their Node), the DeviceTaintRules and the templates; then each existing
pod with its claim: the claim (with the delete-protection finalizer), the pod bound by
`spec.nodeName`, then the claim's allocation and its reservation for the pod in one status
write, as a scheduler's PreBind does (in that order the resourceclaim controller never sees an
allocated claim reserved for nobody, which it would deallocate).

`compare_dra_pods(core, reference, scenario)` judges the candidates one at a time:

1. wait until the DRA state is the baseline again (no claim but the existing ones, each with
   its allocation and reservation only): the previous pod's claims deallocated and deleted;
2. list the state (fingerprint "before");
3. create the candidate's fresh claims, then the pod for the reference kube-scheduler; wait for
   `status.resourceClaimStatuses` when it uses templates (the resourceclaim controller's);
4. list the state again and let gpu-scheduler judge the pod against it, its own claims as they
   were when created (`dra_ours`);
5. wait for the reference's outcome (bound, or PodScheduled=False Unschedulable or
   SchedulerError), read its feasible set from its log and its message from the condition;
   fingerprint "after" (the candidate's own claims and reservations left out);
6. delete the pod (grace 0) and its fresh claims.

Why the reference sees the same device state as gpu-scheduler: a candidate that allocates
anything has a claim created in step 3, after the previous pod's claims were gone from the API
server (step 1); kube-scheduler's PreEnqueue waits until its claim informer has that claim, and
one informer delivers one resource's events in order, so by then it has also seen the
deallocations and deletions before it. A candidate that only uses already-allocated claims runs
no allocator (only the claims' node selectors count), so in-use devices do not matter to it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from kubernetes_asyncio import client

from hack.differential.compare import Outcome
from hack.differential.dra_generate import DraScenario
from hack.differential.dra_ours import (
    DraState,
    build_dra_cache,
    claim_key,
    dra_verdict,
    made_for,
)
from hack.differential.generate import Candidate, JsonObject
from hack.differential.ours import framework
from hack.differential.reference import (
    SCHEDULER_NAME,
    ReferenceScheduler,
    parse_bound,
    parse_scored,
)
from hack.differential.run import (
    FINGERPRINT_PARTS,
    STATE_CHANGED,
    check_counts,
    describe_change,
    fingerprint,
    wait_quiet,
    wait_running,
    wait_service_accounts,
)
from hack.localcluster.nodes import apply_gpu_device_class, wait_nodes_ready
from scheduler.kube.apierrors import expect_success

GROUP, VERSION, RULES = "resource.k8s.io", "v1", "devicetaintrules"
OUTCOME_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.05


async def _raw(call: Awaitable[Any]) -> Any:
    return json.loads(await expect_success(await call))


def _apis(core: client.CoreV1Api) -> tuple[client.ResourceV1Api, client.CustomObjectsApi]:
    api = cast(Any, core).api_client
    return client.ResourceV1Api(api), client.CustomObjectsApi(api)


async def _tolerate_conflict(call: Awaitable[Any]) -> None:
    try:
        await call
    except client.ApiException as error:
        if error.status != 409:
            raise


async def install_dra(core: client.CoreV1Api, scenario: DraScenario) -> None:
    """Create the scenario's objects (see the module docstring) and wait until they settle."""
    resource, custom = _apis(core)
    for namespace in scenario.namespaces:
        await _tolerate_conflict(core.create_namespace(cast(Any, namespace)))
    await apply_gpu_device_class(resource)
    for device_class in scenario.device_classes:
        await _tolerate_conflict(resource.create_device_class(cast(Any, device_class)))
    uids: dict[str, str] = {}

    async def create_node(node: JsonObject) -> None:
        name = str(node["metadata"]["name"])
        created = await _raw(core.create_node(cast(Any, node), _preload_content=False))
        uids[name] = str(created["metadata"]["uid"])

    await asyncio.gather(*(create_node(n) for n in scenario.nodes))
    for body in scenario.slices:
        body["metadata"]["ownerReferences"][0]["uid"] = uids[body["spec"]["nodeName"]]
    await asyncio.gather(*(resource.create_resource_slice(cast(Any, s)) for s in scenario.slices))
    for rule in scenario.taint_rules:
        await custom.create_cluster_custom_object(GROUP, VERSION, RULES, rule)
    for template in scenario.templates:
        await resource.create_namespaced_resource_claim_template(
            template["metadata"]["namespace"], cast(Any, template)
        )
    await wait_nodes_ready(core, list(uids), timeout=300.0)
    await wait_service_accounts(core, scenario.namespace_names)
    for pod, claim in zip(scenario.existing, scenario.existing_claims, strict=True):
        namespace = claim["metadata"]["namespace"]
        body = {k: v for k, v in claim.items() if k != "status"}
        await resource.create_namespaced_resource_claim(namespace, cast(Any, body))
        created = await _raw(
            core.create_namespaced_pod(namespace, cast(Any, pod), _preload_content=False)
        )
        current = await _raw(
            resource.read_namespaced_resource_claim(
                claim["metadata"]["name"], namespace, _preload_content=False
            )
        )
        reference = {"resource": "pods", "name": pod["metadata"]["name"]}
        reference["uid"] = created["metadata"]["uid"]
        current["status"] = {**claim["status"], "reservedFor": [reference]}
        await resource.replace_namespaced_resource_claim_status(
            claim["metadata"]["name"], namespace, current
        )
    await wait_running(core, scenario.existing)
    await wait_settled(core, scenario, await baseline(core, scenario))


async def uninstall_dra(core: client.CoreV1Api, scenario: DraScenario) -> None:
    """Delete what `install_dra` created (the shared `gpu.nvidia.com` class stays)."""
    resource, custom = _apis(core)

    async def gone(call: Awaitable[Any]) -> None:
        try:
            await call
        except client.ApiException as error:
            if error.status != 404:
                raise

    for namespace in scenario.namespace_names:
        await gone(core.delete_namespace(namespace))
    for rule in scenario.taint_rules:
        await gone(
            custom.delete_cluster_custom_object(GROUP, VERSION, RULES, rule["metadata"]["name"])
        )
    for device_class in scenario.device_classes:
        await gone(resource.delete_device_class(device_class["metadata"]["name"]))
    for node in scenario.nodes:
        await gone(core.delete_node(node["metadata"]["name"]))
    for body in scenario.slices:
        await gone(resource.delete_resource_slice(body["metadata"]["name"]))


async def read_state(core: client.CoreV1Api) -> DraState:
    resource, custom = _apis(core)
    listed = await asyncio.gather(
        _raw(core.list_node(_preload_content=False)),
        _raw(core.list_pod_for_all_namespaces(_preload_content=False)),
        _raw(core.list_namespace(_preload_content=False)),
        _raw(resource.list_device_class(_preload_content=False)),
        _raw(resource.list_resource_slice(_preload_content=False)),
        _raw(resource.list_resource_claim_for_all_namespaces(_preload_content=False)),
        custom.list_cluster_custom_object(GROUP, VERSION, RULES),
    )
    return DraState(*(cast(list[JsonObject], found["items"]) for found in listed))


def _claim_state(claim: JsonObject, pod_uid: str) -> tuple[str, ...]:
    status = claim.get("status") or {}
    reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod_uid]
    return (
        claim_key(claim),
        json.dumps(status.get("allocation"), sort_keys=True),
        json.dumps(reserved, sort_keys=True),
        str(bool(claim["metadata"].get("deletionTimestamp"))),
    )


def dra_fingerprint(
    state: DraState, skip: str, own_claims: set[str], pod_uid: str
) -> tuple[tuple[object, ...], ...]:
    """`run.fingerprint` of nodes, pods and namespaces, plus what the DRA filters read:
    classes', slices' and taint rules' specs, and every claim but the candidate's own (its
    allocation, its reservations but the candidate's, deleting or not; the claim a scheduler
    made for the candidate's extended resources is its own too)."""
    specs = tuple(
        sorted(
            json.dumps([kind, o["metadata"]["name"], o.get("spec")], sort_keys=True)
            for kind, objects in (
                ("class", state.classes),
                ("slice", state.slices),
                ("rule", state.rules),
            )
            for o in objects
        )
    )
    claims = tuple(
        sorted(
            _claim_state(c, pod_uid)
            for c in state.claims
            if claim_key(c) not in own_claims and not made_for(c, pod_uid)
        )
    )
    return (
        *fingerprint(list(state.nodes), list(state.pods), list(state.namespaces), skip),
        specs,
        claims,
    )


DRA_FINGERPRINT_PARTS = (*FINGERPRINT_PARTS, "class, slice or rule spec", "claim")


async def baseline(core: client.CoreV1Api, scenario: DraScenario) -> frozenset[tuple[str, ...]]:
    """The existing claims' state that every candidate must meet (read after install)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT_S
    wanted = {claim_key(c) for c in scenario.existing_claims}
    while True:
        state = await read_state(core)
        found = {_claim_state(c, "") for c in _scenario_claims(state, scenario)}
        if {f[0] for f in found} == wanted and all(
            json.loads(f[2]) and f[1] != "null" for f in found
        ):
            return frozenset(found)
        if loop.time() > deadline:
            raise TimeoutError(f"the existing claims did not settle: {sorted(found)}")
        await asyncio.sleep(0.2)


def _scenario_claims(state: DraState, scenario: DraScenario) -> list[JsonObject]:
    names = set(scenario.namespace_names)
    return [c for c in state.claims if c["metadata"].get("namespace") in names]


async def wait_settled(
    core: client.CoreV1Api, scenario: DraScenario, wanted: frozenset[tuple[str, ...]]
) -> None:
    """Wait until the scenario's claims are exactly `wanted` again (see the module docstring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT_S
    resource, _ = _apis(core)
    while True:
        listed = await _raw(resource.list_resource_claim_for_all_namespaces(_preload_content=False))
        names = set(scenario.namespace_names)
        found = frozenset(
            _claim_state(c, "") for c in listed["items"] if c["metadata"]["namespace"] in names
        )
        if found == wanted:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"the claims did not return to the baseline: {sorted(found)}")
        await asyncio.sleep(POLL_S)


def _condition(pod: JsonObject) -> JsonObject | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") in ("Unschedulable", "SchedulerError")
        ):
            return cast(JsonObject, condition)
    return None


async def _poll_pod(
    core: client.CoreV1Api, namespace: str, name: str, done: Callable[[JsonObject], bool]
) -> JsonObject | None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTCOME_TIMEOUT_S
    while loop.time() < deadline:
        pod: JsonObject = await _raw(
            core.read_namespaced_pod(name, namespace, _preload_content=False)
        )
        if done(pod):
            return pod
        await asyncio.sleep(POLL_S)
    return None


def _has_claim_statuses(pod: JsonObject) -> bool:
    templates = {
        c["name"]
        for c in pod["spec"].get("resourceClaims") or []
        if "resourceClaimTemplateName" in c
    }
    statuses = {
        s["name"]
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if s.get("resourceClaimName")
    }
    return templates <= statuses


def _unbound(pod: JsonObject) -> JsonObject:
    found: JsonObject = json.loads(json.dumps(pod))
    found["spec"].pop("nodeName", None)
    found.setdefault("status", {})["conditions"] = []
    return found


async def compare_dra_one(
    core: client.CoreV1Api,
    reference: ReferenceScheduler,
    scenario: DraScenario,
    candidate: Candidate,
    wanted: frozenset[tuple[str, ...]],
) -> Outcome:
    """Both verdicts for one candidate (steps 1-6 of the module docstring)."""
    resource, _ = _apis(core)
    namespace, name = candidate.namespace, candidate.name
    key = f"{namespace}/{name}"
    features = candidate.features
    await wait_settled(core, scenario, wanted)
    before = dra_fingerprint(await read_state(core), key, set(), "")
    for claim in candidate.claims:
        await resource.create_namespaced_resource_claim(namespace, cast(Any, claim))
    manifest = json.loads(json.dumps(candidate.manifest))
    manifest["spec"]["schedulerName"] = SCHEDULER_NAME
    created: JsonObject = await _raw(
        core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    )
    uid = str(created["metadata"]["uid"])
    try:
        pod = await _poll_pod(core, namespace, name, _has_claim_statuses)
        if pod is None:
            error = "the resourceclaim controller made no claim for the pod's templates"
            return Outcome(key, features, frozenset(), frozenset(), error=error)
        own = {f"{namespace}/{c['metadata']['name']}" for c in candidate.claims}
        own |= {
            f"{namespace}/{s['resourceClaimName']}"
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName")
        }
        state = await read_state(core)
        cache = build_dra_cache(state, key, own, uid)
        ours = dra_verdict(_unbound(pod), cache, framework())
        done = await _poll_pod(
            core, namespace, name, lambda p: bool(p["spec"].get("nodeName") or _condition(p))
        )
        scored = parse_scored(reference.read_new()).get(key, set())
        after = dra_fingerprint(await read_state(core), key, own, uid)
    finally:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        for claim in candidate.claims:
            try:
                await resource.delete_namespaced_resource_claim(
                    claim["metadata"]["name"], namespace
                )
            except client.ApiException as failure:
                if failure.status != 404:
                    raise
    ours_message = ours.error or ours.message
    if after != before:
        error = f"{STATE_CHANGED}: {describe_change(before, after, DRA_FINGERPRINT_PARTS)}"
        return Outcome(key, features, frozenset(), ours.feasible, error=error)
    if done is None:
        error = f"kube-scheduler gave no outcome within {OUTCOME_TIMEOUT_S:.0f} s"
        return Outcome(key, features, frozenset(), ours.feasible, ours.first_failure, error=error)
    condition = _condition(done)
    bound = done["spec"].get("nodeName")
    if condition is not None and condition.get("reason") == "SchedulerError":
        kube_error = str(condition.get("message") or "")
        if ours.error:
            return Outcome(key, features, frozenset(), frozenset(), ours.first_failure)
        error = f"kube-scheduler's attempt failed ({kube_error[:300]}), gpu-scheduler's did not"
        return Outcome(key, features, frozenset(), ours.feasible, ours.first_failure, error=error)
    if ours.error:
        error = f"gpu-scheduler's attempt failed ({ours.error[:300]}), kube-scheduler's did not"
        return Outcome(key, features, frozenset(), ours.feasible, ours.first_failure, error=error)
    if bound and not scored:
        kube = frozenset({bound})
    elif bound and bound not in scored:
        error = f"kube-scheduler bound to {bound}, which it did not log as scored"
        return Outcome(key, features, frozenset(scored), ours.feasible, error=error)
    else:
        kube = frozenset(scored)
    return Outcome(
        key,
        features,
        kube,
        ours.feasible,
        ours.first_failure,
        node_count=len(state.nodes),
        kube_message=str(condition.get("message") or "") if condition else "",
        ours_message=ours_message,
    )


async def compare_dra_pods(
    core: client.CoreV1Api,
    reference: ReferenceScheduler,
    scenario: DraScenario,
    progress: Callable[[int, Outcome], None] | None = None,
    attempts: int = 3,
) -> list[Outcome]:
    """Every candidate's outcome; a pod whose state changed meanwhile is judged again (at most
    `attempts` times in all)."""
    await wait_quiet(core)
    wanted = await baseline(core, scenario)
    outcomes: list[Outcome] = []
    for index, candidate in enumerate(scenario.candidates):
        if not reference.alive():
            raise RuntimeError("the reference kube-scheduler exited; see its log")
        outcome = await compare_dra_one(core, reference, scenario, candidate, wanted)
        for attempt in range(2, attempts + 1):
            if not outcome.error.startswith(STATE_CHANGED):
                break
            await wait_quiet(core)
            outcome = await compare_dra_one(core, reference, scenario, candidate, wanted)
            outcome.attempts = attempt
        outcomes.append(outcome)
        if progress is not None:
            progress(index, outcome)
    await wait_settled(core, scenario, wanted)
    check_counts(outcomes, parse_bound(reference.whole_log()))
    return outcomes
