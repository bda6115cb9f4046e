"""The DRA fault families: faults in gpu-scheduler's claim writes, on the scene of
`hack.faults.dra_scenarios` (one `D8` node whose eight GPUs are published through DRA).

Each scenario runs one replica under a seeded churn of one-GPU DRA pods (`DraWorkload`: most
take their GPU through the ResourceClaimTemplate, a seeded share asks for `nvidia.com/gpu: 1`,
which gpu-scheduler serves through a claim it creates), at most six alive at once, so the eight
devices always have room. `churn_dra` checks the scene's invariants every two seconds
(`hack.faults.observe.Audit`) and `device_shared` over the claims as often; once the fault and
the workload are over it waits (bounded) until every pod of ours is bound, then checks
everything at rest, including `claim_stranded`, `claim_unreserved` and `pod_without_claims`
(`hack.faults.dra_invariants`). `Outcome.notes` says what the replica did: claim writes sent and
failed, claims released and deleted by an undo, bind failures, pods left pending.

- `claim_writes_reset_dra`: connections between the replica and the API server reset
  (`ResetProxy`, as `scenarios.api_resets`): claim writes lost, landed or not, and refused;
- `binding_refused_dra`: a ValidatingAdmissionPolicy refuses the Bindings of some pods (names
  ending in 1, 4 or 7) after their claims were written; the undo must release them; then the
  policy goes and they bind;
- `claim_deleted_in_flight`: pods with plain ResourceClaims, half of whose claims are deleted 0
  to 60 ms after the pod is created, racing the replica's writes;
- `slice_republished_dra`: the node's ResourceSlice republished with a higher pool generation
  (same devices) while pods are placed: replaced in place, or a new slice created and the old
  one deleted.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any, cast

from kubernetes_asyncio import client

from hack.faults.dra_invariants import check_claims, check_held
from hack.faults.dra_scenarios import (
    claims_at_rest,
    dra_nodes,
    dra_pod,
    extended_pod,
    list_claims,
    list_json,
    one_gpu_template,
)
from hack.faults.invariants import Violation
from hack.faults.observe import API_TROUBLE, Audit
from hack.faults.processes import SchedulerProcess
from hack.faults.proxy import proxied_kubeconfig
from hack.faults.scenarios import (
    NODE_LABEL,
    SETTLE_S,
    Outcome,
    Scene,
    eventually,
    reset_proxy,
    synced,
)
from hack.faults.workload import WORKLOAD_LABEL, ChurnWorkload, WorkloadSpec
from hack.localcluster.dra import API_VERSION

MAX_LIVE = 6
"""DRA pods alive at once: fewer than the eight devices of the node."""
EXTENDED_SHARE = 0.3
"""The share of pods asking for `nvidia.com/gpu: 1` instead of using the template."""
BOUND_S = 60.0
"""How long every pod of ours may take to be bound once the fault is over."""


class DraWorkload(ChurnWorkload):
    """`ChurnWorkload` of one-GPU DRA pods: the template's, or (`EXTENDED_SHARE`, seeded)
    `nvidia.com/gpu: 1`; `pause_s` apart, so the stream spans the fault."""

    def __init__(self, core: client.CoreV1Api, spec: WorkloadSpec, pause_s: float) -> None:
        super().__init__(core, spec)
        self.pause_s = pause_s

    def manifest(self, name: str) -> dict[str, Any]:
        extended = self.rng.random() < EXTENDED_SHARE
        make = extended_pod if extended else dra_pod
        pod = make(name, self.spec.scheduler_name, self.spec.node_selector)
        pod["metadata"]["labels"] = {WORKLOAD_LABEL: self.spec.prefix}
        return pod

    async def run(self, pods: int, pause_s: float = 0.05) -> None:
        await super().run(pods, max(pause_s, self.pause_s))


def dra_workload(scene: Scene, pause_s: float = 0.3) -> DraWorkload:
    spec = WorkloadSpec(
        scene.namespace,
        scene.namespace,
        {NODE_LABEL: scene.namespace},
        seed=scene.seed,
        max_live=MAX_LIVE,
    )
    return DraWorkload(scene.core, spec, pause_s)


async def watch_devices(scene: Scene, stop: asyncio.Event, found: list[Violation]) -> None:
    """`device_shared` over the scene's claims every two seconds until `stop` is set."""
    while not stop.is_set():
        try:
            claims = await list_claims(scene)
        except API_TROUBLE:  # the API server is faulted: the next round sees it
            claims = []
        found.extend(
            v for v in check_claims(claims, []) if v.invariant == "device_shared" and v not in found
        )
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.0)


async def pending_pods(scene: Scene) -> list[dict[str, Any]]:
    pods = await list_json(scene.core.list_namespaced_pod, scene.namespace)
    return [
        pod
        for pod in pods
        if pod["spec"].get("schedulerName") == scene.namespace
        and not pod["spec"].get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
    ]


async def churn_dra(
    scene: Scene,
    workload: DraWorkload,
    fault: str,
    inject: Callable[[], Awaitable[None]],
    pods: int,
    before_settle: Callable[[], Awaitable[None]] | None = None,
) -> tuple[list[Violation], list[str]]:
    """`scenarios.churn_under_fault` with the DRA checks (module docstring); `before_settle` runs
    once the workload and the fault are over. Returns the violations and the pods of ours still
    pending after `BOUND_S`."""
    audit: Audit = scene.audit()
    stop = asyncio.Event()
    shared: list[Violation] = []
    watchers = [
        asyncio.create_task(audit.watch(fault, stop)),
        asyncio.create_task(watch_devices(scene, stop, shared)),
    ]
    try:
        await asyncio.gather(workload.run(pods), inject())
    finally:
        stop.set()
        await asyncio.gather(*watchers)
    if before_settle is not None:
        await before_settle()
    await audit.settle(fault, SETTLE_S)
    with suppress(TimeoutError):
        await eventually(lambda: _none_pending(scene), BOUND_S, "every pod bound", interval=1.0)
    pending = sorted(str(p["metadata"]["name"]) for p in await pending_pods(scene))
    return [*audit.violations[fault], *shared, *await claims_at_rest(scene)], pending


async def _none_pending(scene: Scene) -> bool:
    return not await pending_pods(scene)


def dra_notes(
    replica: SchedulerProcess, workload: DraWorkload, pending: list[str]
) -> dict[str, Any]:
    """What the replica did with claims, from its log, and how the workload went."""
    records = replica.records()

    def count(event: str) -> int:
        return sum(1 for r in records if r.get("event") == event)

    claim_writes = [
        r
        for r in records
        if r.get("event") in ("write_done", "write_failed")
        and "/resourceclaims" in str(r.get("path", ""))
    ]
    return {
        "alive": replica.alive(),
        "created": workload.created,
        "pending": pending,
        "bound": count("pod_bound"),
        "claim_writes": len(claim_writes),
        "claim_writes_failed": sum(1 for r in claim_writes if r.get("event") == "write_failed"),
        "claim_releases": count("claim_released"),
        "claims_deleted": count("claim_deleted"),
        "release_failures": count("claim_release_failed") + count("claim_delete_failed"),
        "bind_failures": count("bind_failed"),
    }


# -- a: claim writes lost or refused ----------------------------------------------------------


async def claim_writes_reset_dra(scene: Scene, pods: int, seconds: float = 10.0) -> Outcome:
    """Connections between the replica and the API server reset at random (seeded) while DRA
    pods are placed: a claim write, the extended claim's create, the pod status write or the
    Binding may be lost after it landed, or before."""
    await dra_nodes(scene)
    fault = "api resets, dra"
    async with reset_proxy(scene, seconds) as proxy:
        kubeconfig = proxied_kubeconfig(scene.cluster.kubeconfig, proxy.url, scene.folder)
        replica = scene.launch("solo", scene.config(), kubeconfig)
        await synced(replica)

        async def resets() -> None:
            proxy.resets_enabled = True
            await asyncio.sleep(seconds)
            proxy.resets_enabled = False

        workload = dra_workload(scene, pause_s=seconds / max(pods, 1))
        violations, pending = await churn_dra(scene, workload, fault, resets, pods)
    notes = dra_notes(replica, workload, pending)
    return Outcome("api resets under DRA claim writes", proxy.resets, pods, violations, notes)


# -- b: the Binding refused after the claims were written -------------------------------------

DENIED = "denied request"
"""What the API server's answer says when a ValidatingAdmissionPolicy refuses a request (it
answers 422 for a Binding)."""
REFUSED = "[147]$"
"""Pods whose names match this (RE2, unanchored at the start) have their Bindings refused."""


def refusing_policy(name: str, namespace: str, pattern: str) -> tuple[dict[str, Any], ...]:
    """A ValidatingAdmissionPolicy and its binding refusing Bindings (CREATE of `pods/binding`)
    in `namespace` of pods whose names match `pattern`."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods/binding"],
                    }
                ],
            },
            "validations": [
                {
                    "expression": f"!object.metadata.name.matches('{pattern}')",
                    "message": "Binding refused by the fault suite",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return policy, binding


async def _dry_run_refused(scene: Scene, pod: str, node: str) -> bool:
    """Whether a dry-run Binding of `pod` to `node` is refused now."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    response: Any = await scene.core.create_namespaced_pod_binding(
        pod, scene.namespace, cast(Any, binding), dry_run="All", _preload_content=False
    )
    body = await response.text()
    if response.status >= 400 and DENIED not in body:
        raise client.ApiException(status=response.status, reason=body[:200])
    return DENIED in body


@asynccontextmanager
async def bindings_refused(scene: Scene, node: str, pattern: str) -> AsyncIterator[None]:
    """Bindings of the scene's pods matching `pattern` refused by the API server inside the
    block; on entry and exit it waits until a dry-run Binding of a canary pod (named to match,
    left to no scheduler) shows the policy in force, then gone."""
    admission = client.AdmissionregistrationV1Api(scene.api)
    name = f"{scene.namespace}-refuse-bindings"
    canary = "canary-1"
    canary_pod = dra_pod(canary, f"nobody-{scene.namespace}", {})
    del canary_pod["spec"]["resourceClaims"]
    canary_pod["spec"]["containers"][0]["resources"] = {}
    await scene.core.create_namespaced_pod(scene.namespace, cast(Any, canary_pod))
    policy, binding = refusing_policy(name, scene.namespace, pattern)
    await admission.create_validating_admission_policy(cast(Any, policy))
    await admission.create_validating_admission_policy_binding(cast(Any, binding))
    try:
        await eventually(lambda: _dry_run_refused(scene, canary, node), 30, "the policy in force")
        yield
    finally:
        await admission.delete_validating_admission_policy_binding(name)
        await admission.delete_validating_admission_policy(name)

        async def passes() -> bool:
            return not await _dry_run_refused(scene, canary, node)

        await eventually(passes, 30, "the policy gone")
        await scene.core.delete_namespaced_pod(canary, scene.namespace, grace_period_seconds=0)


async def held_claims(scene: Scene, gap_s: float = 2.0) -> list[Violation]:
    """`claim_stranded` while Bindings are refused (`dra_invariants.check_held`)."""
    first = await list_claims(scene)
    await asyncio.sleep(gap_s)
    second = await list_claims(scene)
    pods = await list_json(scene.core.list_namespaced_pod, scene.namespace)
    return check_held(first, second, pods)


async def binding_refused_dra(scene: Scene, pods: int, hold_s: float = 10.0) -> Outcome:
    """The API server refuses the Bindings of the pods named like `REFUSED` for `hold_s` while
    the workload runs: each attempt writes the pod's claims, is refused, and must undo them (no
    claim left allocated or reserved for an unbound pod, an extended claim it created deleted);
    checked twice while the policy stands (`held_claims`), then the policy goes and every pod
    must be bound."""
    (node,) = await dra_nodes(scene)
    fault = "binding refused, dra"
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    held: list[Violation] = []

    async def refuse() -> None:
        async with bindings_refused(scene, node, REFUSED):
            await asyncio.sleep(hold_s / 2)
            held.extend(await held_claims(scene))
            await asyncio.sleep(hold_s / 2)
            held.extend(v for v in await held_claims(scene) if v not in held)

    workload = dra_workload(scene, pause_s=hold_s / max(pods, 1))
    violations, pending = await churn_dra(scene, workload, fault, refuse, pods)
    notes = dra_notes(replica, workload, pending)
    refused = sum(
        1
        for r in replica.records()
        if r.get("event") == "bind_failed" and DENIED in str(r.get("error", ""))
    )
    notes["refused"] = refused
    return Outcome("Binding refused after claim writes", refused, pods, violations + held, notes)


# -- c: a claim deleted while it is written ----------------------------------------------------


def plain_claim(name: str) -> dict[str, Any]:
    """A ResourceClaim `name` asking for what the template asks for."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": one_gpu_template()["spec"]["spec"],
    }


class ClaimWorkload(DraWorkload):
    """One-GPU pods each with a plain ResourceClaim `<pod>-gpu` of its own, created just before
    it; `doomed_share` of the claims (seeded) are deleted 0 to 60 ms after their pod is
    created (`doomed`)."""

    def __init__(
        self, scene: Scene, spec: WorkloadSpec, pause_s: float, doomed_share: float
    ) -> None:
        super().__init__(scene.core, spec, pause_s)
        self.resource = client.ResourceV1Api(scene.api)
        self.doomed_share = doomed_share
        self.doomed: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []

    def manifest(self, name: str) -> dict[str, Any]:
        pod = dra_pod(name, self.spec.scheduler_name, self.spec.node_selector)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
        pod["metadata"]["labels"] = {WORKLOAD_LABEL: self.spec.prefix}
        return pod

    async def create_one(self) -> str:
        claim = f"{self.spec.prefix}-{self.sequence + 1:05d}-gpu"
        await self.resource.create_namespaced_resource_claim(
            self.spec.namespace, cast(Any, plain_claim(claim))
        )
        name = await super().create_one()
        if self.rng.random() < self.doomed_share:
            self.tasks.append(asyncio.create_task(self._delete(claim, self.rng.uniform(0, 0.06))))
        return name

    async def _delete(self, claim: str, after_s: float) -> None:
        await asyncio.sleep(after_s)
        with suppress(client.ApiException):  # its pod's deletion may have taken it already
            await self.resource.delete_namespaced_resource_claim(claim, self.spec.namespace)
            self.doomed.append(claim)

    async def finish(self) -> None:
        await asyncio.gather(*self.tasks)


def _scheduled_message(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return str(condition.get("message") or "")
    return ""


async def claim_deleted_in_flight(scene: Scene, pods: int, doomed_share: float = 0.5) -> Outcome:
    """Pods with plain claims, some deleted while the replica writes them (`ClaimWorkload`): no
    crash, no allocation stranded, no device shared; a pod whose claim is gone stays pending
    (its PodScheduled message says the claim is not found) and is deleted before the settle; a
    pod whose claim survived is bound."""
    await dra_nodes(scene)
    fault = "claim deleted, dra"
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    spec = WorkloadSpec(
        scene.namespace,
        scene.namespace,
        {NODE_LABEL: scene.namespace},
        seed=scene.seed,
        max_live=MAX_LIVE,
    )
    workload = ClaimWorkload(scene, spec, 0.3, doomed_share)
    orphans: dict[str, str] = {}

    async def nothing() -> None:
        return None

    async def drop_orphans() -> None:
        """Pods whose claim is gone or going: their message read, then deleted (nothing will
        bind them)."""
        await workload.finish()
        await asyncio.sleep(5.0)  # the replica has tried each once more
        claims = {
            str(c["metadata"]["name"])
            for c in await list_claims(scene)
            if not c["metadata"].get("deletionTimestamp")
        }
        for pod in await pending_pods(scene):
            name = str(pod["metadata"]["name"])
            if f"{name}-gpu" not in claims:
                orphans[name] = _scheduled_message(pod)
                await scene.core.delete_namespaced_pod(
                    name, scene.namespace, grace_period_seconds=0
                )

    violations, pending = await churn_dra(scene, workload, fault, nothing, pods, drop_orphans)
    notes = dra_notes(replica, workload, pending)
    notes["claims_deleted_by_us"] = len(workload.doomed)
    notes["orphans"] = len(orphans)
    notes["orphans_not_found"] = sum(1 for m in orphans.values() if "not found" in m)
    notes["orphan_messages"] = sorted(set(orphans.values()))[:5]
    return Outcome("claim deleted in flight", len(workload.doomed), pods, violations, notes)


# -- d: the ResourceSlice republished ----------------------------------------------------------


async def _released(call: Awaitable[Any]) -> None:
    response = await call
    response.release()


async def republish_slice(resource: client.ResourceV1Api, node: str, fresh_name: bool) -> int:
    """The pool of `node` published again with its generation one higher and the same devices:
    in place, or (`fresh_name`) as a new slice before the old one is deleted, as a driver that
    restarts does. Returns the new generation."""
    listed = await list_json(
        partial(resource.list_resource_slice, field_selector=f"spec.nodeName={node}")
    )
    current = max(listed, key=lambda s: int(s["spec"]["pool"]["generation"]))
    generation = int(current["spec"]["pool"]["generation"]) + 1
    metadata: dict[str, Any] = {
        "name": current["metadata"]["name"],
        "ownerReferences": current["metadata"].get("ownerReferences") or [],
        "labels": current["metadata"].get("labels") or {},
    }
    body = {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {**current["spec"], "pool": {**current["spec"]["pool"], "generation": generation}},
    }
    if not fresh_name:
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        name = current["metadata"]["name"]
        await _released(
            resource.replace_resource_slice(name, cast(Any, body), _preload_content=False)
        )
        return generation
    metadata["name"] = f"{node}-g{generation}"
    await _released(resource.create_resource_slice(cast(Any, body), _preload_content=False))
    for old in listed:
        name = old["metadata"]["name"]
        await _released(resource.delete_resource_slice(name, _preload_content=False))
    return generation


async def slice_republished_dra(scene: Scene, pods: int, times: int = 6) -> Outcome:
    """The node's ResourceSlice republished `times` times (seeded, 0.5 to 1.5 s apart; in place
    or under a new name, `republish_slice`) while DRA pods are placed: no device shared, every
    pod bound."""
    (node,) = await dra_nodes(scene)
    fault = "slice republished, dra"
    replica = scene.launch("solo", scene.config())
    await synced(replica)
    resource = client.ResourceV1Api(scene.api)
    rng = random.Random(scene.seed)
    generations: list[int] = []

    async def republish() -> None:
        for _ in range(times):
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            generations.append(await republish_slice(resource, node, rng.random() < 0.5))

    workload = dra_workload(scene, pause_s=times / max(pods, 1))
    violations, pending = await churn_dra(scene, workload, fault, republish, pods)
    notes = dra_notes(replica, workload, pending)
    notes["generations"] = generations
    return Outcome("ResourceSlice republished", len(generations), pods, violations, notes)
