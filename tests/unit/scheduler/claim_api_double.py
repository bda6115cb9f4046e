"""An in-memory stand-in for the ResourceClaim calls of DynamicResources' PreBind
(`scheduler.kube.claims`, `scheduler.core.claim_binding`), and a `Harness` wired to it that
schedules pods with claims on a node whose GPUs are published through DRA.

`FakeResourceV1` holds claims as JSON and applies the strategic merge patches the writes send as
the API server would for the fields they touch (finalizers and annotations merged; `reservedFor`
merged by uid, `$patch: delete` removing an entry; `allocation` set or cleared), refusing a patch
whose `metadata.resourceVersion` is not the claim's (409) and bumping the version on every write.
Like `core_api_double`, each call answers raw (`_preload_content=False`) and takes the next
scripted outcome of its list: 200 (applied), another HTTP status (refused, nothing applied), an
exception (raised, nothing applied: the request never reached the server), or
`LANDED_ANSWER_LOST` (applied, then the connection breaks before the answer: the write landed
and its caller cannot know). With the list empty, the write is applied.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.objects import PodInfo, parse_pod
from tests.dra_objects import claim_pod, device_class, resource_claim, resource_slice
from tests.unit.scheduler.builders import cluster, make_node
from tests.unit.scheduler.core_api_double import FakeResponse, Harness, Outcome, harness

Json = dict[str, Any]


class LandedAnswerLost:
    """The write is applied, then the connection breaks before its answer arrives."""


LANDED_ANSWER_LOST = LandedAnswerLost()
ClaimOutcome = Outcome | LandedAnswerLost


@dataclass
class FakeResourceV1:
    """ResourceClaims by "namespace/name"; see the module docstring."""

    claims: dict[str, Json] = field(default_factory=dict)
    meta_outcomes: list[ClaimOutcome] = field(default_factory=list)
    status_outcomes: list[ClaimOutcome] = field(default_factory=list)
    read_outcomes: list[ClaimOutcome] = field(default_factory=list)
    writes: list[tuple[str, str, Json]] = field(default_factory=list)
    """("meta" | "status", claim key, patch) of every write that reached the server."""
    reads: list[str] = field(default_factory=list)
    gate: asyncio.Event | None = None
    """When set, status writes wait for it."""

    create_outcomes: list[ClaimOutcome] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    """Keys of the claims deleted."""

    def claim(self, key: str) -> Json:
        return self.claims[key]

    async def create_namespaced_resource_claim(
        self, namespace: str, body: Json, **_: Any
    ) -> FakeResponse:
        """Stores `body` under a name made from its generateName (as the API server does)."""
        refused = _scripted(self.create_outcomes)
        if refused is not None:
            return refused
        created = copy.deepcopy(body)
        metadata = created["metadata"]
        metadata["name"] = f"{metadata.pop('generateName', '')}x{len(self.claims)}"
        metadata.update(uid=f"uid-{metadata['name']}", resourceVersion="1")
        self.claims[f"{namespace}/{metadata['name']}"] = created
        self.writes.append(("create", f"{namespace}/{metadata['name']}", body))
        return FakeResponse.json(201, copy.deepcopy(created))

    async def delete_namespaced_resource_claim(
        self, name: str, namespace: str, **_: Any
    ) -> FakeResponse:
        key = f"{namespace}/{name}"
        if self.claims.pop(key, None) is None:
            return FakeResponse(404, "not found")
        self.deleted.append(key)
        return FakeResponse.json(200, {})

    async def read_namespaced_resource_claim(
        self, name: str, namespace: str, **_: Any
    ) -> FakeResponse:
        key = f"{namespace}/{name}"
        self.reads.append(key)
        refused = _scripted(self.read_outcomes)
        if refused is not None:
            return refused
        return FakeResponse.json(200, copy.deepcopy(self.claims[key]))

    async def patch_namespaced_resource_claim(
        self, name: str, namespace: str, body: Json, **_: Any
    ) -> FakeResponse:
        return await self._write("meta", f"{namespace}/{name}", body, self.meta_outcomes)

    async def patch_namespaced_resource_claim_status(
        self, name: str, namespace: str, body: Json, **_: Any
    ) -> FakeResponse:
        if self.gate is not None:
            await self.gate.wait()
        return await self._write("status", f"{namespace}/{name}", body, self.status_outcomes)

    async def _write(
        self, kind: str, key: str, body: Json, outcomes: list[ClaimOutcome]
    ) -> FakeResponse:
        outcome = outcomes.pop(0) if outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, tuple) or (isinstance(outcome, int) and outcome // 100 != 2):
            self.writes.append((kind, key, body))
            return FakeResponse(*outcome) if isinstance(outcome, tuple) else FakeResponse(outcome)
        self.writes.append((kind, key, body))
        claim = self.claims[key]
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != claim["metadata"]["resourceVersion"]:
            return FakeResponse(409, "the object has been modified")
        _apply(claim, body, status=kind == "status")
        claim["metadata"]["resourceVersion"] = str(int(claim["metadata"]["resourceVersion"]) + 1)
        if outcome is LANDED_ANSWER_LOST:
            raise aiohttp.ServerDisconnectedError()
        return FakeResponse.json(200, copy.deepcopy(claim))


def _scripted(outcomes: list[ClaimOutcome]) -> FakeResponse | None:
    outcome = outcomes.pop(0) if outcomes else None
    if isinstance(outcome, BaseException):
        raise outcome
    if isinstance(outcome, tuple):
        return FakeResponse(*outcome)
    if isinstance(outcome, int):
        return FakeResponse(outcome)
    return None


def _apply(claim: Json, body: Json, status: bool) -> None:
    """The strategic merge of the fields the PreBind writes touch; a status write changes only
    the status, a write of the object only its metadata (as the API server's strategies do)."""
    if not status:
        metadata = body.get("metadata") or {}
        held = claim["metadata"]
        for finalizer in metadata.get("finalizers") or ():
            if finalizer not in held.setdefault("finalizers", []):
                held["finalizers"].append(finalizer)
        for name, value in (metadata.get("annotations") or {}).items():
            notes = held.setdefault("annotations", {})
            if value is None:
                notes.pop(name, None)
            else:
                notes[name] = value
        return
    patch = body.get("status") or {}
    current = claim.setdefault("status", {})
    if "allocation" in patch:
        if patch["allocation"] is None:
            current.pop("allocation", None)
        else:
            current["allocation"] = copy.deepcopy(patch["allocation"])
    for entry in patch.get("reservedFor") or ():
        reserved = current.setdefault("reservedFor", [])
        if entry.get("$patch") == "delete":
            reserved[:] = [r for r in reserved if r["uid"] != entry["uid"]]
        elif all(r["uid"] != entry["uid"] for r in reserved):
            reserved.append(dict(entry))
    if not current.get("reservedFor"):
        current.pop("reservedFor", None)


@dataclass
class DraHarness:
    """A `Harness` whose node `node-a` has eight GPUs published through DRA (one slice, the
    DeviceClass `gpu.nvidia.com`) and whose claim writes go to `resource`."""

    h: Harness
    resource: FakeResourceV1


def claim_json(name: str, uid: str = "", version: str = "5") -> Json:
    """A claim of two GPUs (`tests.dra_objects.gpu_claim_spec`) in namespace default."""
    return resource_claim(
        name, metadata={"uid": uid or f"uid-claim-{name}", "resourceVersion": version}
    )


def dra_harness(*claims: str) -> DraHarness:
    """The harness with `claims` (names) created unallocated, in the cache as in `resource`."""
    cache = cluster(make_node("node-a", gpus=0))
    cache.dra.put_slice(parse_resource_slice(resource_slice("slice-a")))
    cache.dra.put_class(parse_device_class(device_class()))
    resource = FakeResourceV1()
    for name in claims:
        body = claim_json(name)
        cache.dra.put_claim(parse_resource_claim(body))
        resource.claims[f"default/{name}"] = body
    h = harness(cache)
    h.scheduler.resource = resource  # type: ignore[assignment]
    return DraHarness(h, resource)


def pod_using(name: str, *claims: str) -> PodInfo:
    """A pod in namespace default using the ResourceClaims `claims` by name."""
    pod = claim_pod(name, {f"c{i}": claim for i, claim in enumerate(claims)}, templates=False)
    pod["metadata"].update(namespace="default", uid=f"uid-{name}", resourceVersion="1")
    return parse_pod(pod)
