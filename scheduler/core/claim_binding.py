"""DynamicResources' PreBind for one pod, and its undo: the binding cycle's side of
`scheduler.kube.claims`.

    writes = ClaimWrites(api, plan, timeout)
    await writes.write()     # before the Binding; raises ClaimWriteError on the first failure
    await writes.undo()      # after any later failure (a write, the Binding); never raises

A plan for a pod whose extended resources a DeviceClass serves also creates that pod's claim
(`scheduler.kube.extended_claims`), allocates and reserves it, and writes the pod's status naming
it; `undo` deletes that claim (released first). A claim whose create answer was lost is found
by the pod's next attempt, which deletes it before anything else (`STALE_EXTENDED_CLAIM`).

`undo` reads back every claim a write was attempted for (an answer lost in transit may hide a
write that landed) and, where the claim is reserved for the pod, takes the pod out of
`reservedFor`; a claim this attempt allocated, with the allocation still the one written and no
other consumer, is deallocated in the same write. Nothing is left reserved for a pod that was not
bound, except when the API server cannot be reached: then the reservation stays, and the pod's
next attempt finds its claim allocated and reserved for it (it goes to the same node, as with
kube-scheduler after a failed Unreserve).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import structlog
from kubernetes_asyncio import client

from scheduler.kube.apierrors import api_call, expect_success
from scheduler.kube.claims import allocate_and_reserve, release_claim
from scheduler.kube.extended_claims import (
    create_extended_claim,
    discard_extended_claim,
    write_extended_status,
)
from scheduler.model.allocations import Allocation
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.plugins.dynamic_resources import ClaimPlan

log = structlog.get_logger("scheduler.claims")


class ClaimWrites:
    """The writes of one `ClaimPlan` (see the module docstring)."""

    def __init__(
        self,
        api: client.ResourceV1Api,
        plan: ClaimPlan,
        timeout: float,
        core: client.CoreV1Api | None = None,
    ) -> None:
        self.api = api
        self.plan = plan
        self.timeout = timeout
        self.core = core
        """For the pod's `status.extendedResourceClaimStatus` (a plan that creates a claim)."""
        self._attempted: list[tuple[ResourceClaim, Allocation | None]] = []
        self._created: ResourceClaim | None = None
        self._created_allocating = False

    async def write(self) -> None:
        """Allocate and reserve each claim of the plan, in order; then create, allocate and
        reserve the pod's extended-resource claim and write the pod's status naming it.
        Raises `ClaimWriteError`."""
        now = datetime.now(UTC)
        pod = (self.plan.pod_name, self.plan.pod_uid)
        work: list[tuple[ResourceClaim, Allocation | None]] = [
            *self.plan.allocate,
            *((claim, None) for claim in self.plan.reserve),
        ]
        for claim, allocation in work:
            self._attempted.append((claim, allocation))
            await allocate_and_reserve(self.api, claim, allocation, pod, now, self.timeout)
        if self.plan.create is None:
            return
        if self.core is None:
            raise ValueError("a plan that creates a claim needs the core API for the pod status")
        made, allocation = self.plan.create
        self._created = await create_extended_claim(self.api, made.manifest, self.timeout)
        created = self._created
        self._created_allocating = True
        await allocate_and_reserve(self.api, created, allocation, pod, now, self.timeout)
        namespace = self.plan.pod_key.partition("/")[0]
        await write_extended_status(
            self.core, (namespace, self.plan.pod_name), created.name, made.mappings, self.timeout
        )

    async def undo(self) -> dict[str, tuple[str, Allocation]]:
        """Release what `write` may have written, and delete the claim it created; logs and
        goes on on every failure. Returns the allocations whose write may have landed and that
        could not be released (claim key -> (claim uid, allocation); the created claim under its
        in-memory key): the caller keeps them counted in flight (`DraStore.assume`) until the
        informer shows the claim as it is, so their devices are not given to another claim
        meanwhile."""
        unsettled: dict[str, tuple[str, Allocation]] = {}
        created, self._created = self._created, None
        if created is not None:
            try:
                await discard_extended_claim(self.api, created, self.plan.pod_uid, self.timeout)
                log.info("claim_deleted", pod=self.plan.pod_key, claim=created.key)
            except Exception as error:  # the next attempt finds it and deletes it first
                log.warning(
                    "claim_delete_failed",
                    pod=self.plan.pod_key,
                    claim=created.key,
                    error=f"{type(error).__name__}: {error}",
                )
                if self._created_allocating and self.plan.create is not None:
                    made, written = self.plan.create
                    unsettled[made.claim.key] = ("", written)
        self._created_allocating = False
        for claim, allocation in reversed(self._attempted):
            try:
                await self._release(claim, allocation)
            except Exception as error:  # the next attempt copes with a reservation left over
                log.warning(
                    "claim_release_failed",
                    pod=self.plan.pod_key,
                    claim=claim.key,
                    error=f"{type(error).__name__}: {error}",
                )
                if allocation is not None:
                    unsettled[claim.key] = (claim.uid, allocation)
        self._attempted.clear()
        return unsettled

    async def _release(self, claim: ResourceClaim, allocation: Allocation | None) -> None:
        what = f"reading resourceclaim {claim.key}"
        async with api_call(what):
            response = await self.api.read_namespaced_resource_claim(
                claim.name, claim.namespace, _preload_content=False, _request_timeout=self.timeout
            )
        current = parse_resource_claim(json.loads(await expect_success(response, what)))
        if current.uid != claim.uid or not current.reserved_for_pod(self.plan.pod_uid):
            return
        ours = (
            allocation is not None
            and current.allocation is not None
            and [r.device_id for r in current.allocation.results]
            == [r.device_id for r in allocation.results]
        )
        await release_claim(
            self.api,
            current,
            current.resource_version,
            self.plan.pod_uid,
            deallocate=ours,
            timeout=self.timeout,
        )
        log.info("claim_released", pod=self.plan.pod_key, claim=claim.key, deallocated=ours)
