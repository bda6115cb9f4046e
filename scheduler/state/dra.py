"""What the scheduler knows of Dynamic Resource Allocation: DeviceClasses, ResourceSlices,
DeviceTaintRules and ResourceClaims as the informers deliver them, plus the allocations this
scheduler has decided and not yet seen written (in flight).

This is the claim tracker of kube-scheduler's DynamicResources plugin (its assume cache and
`inFlightAllocations`, k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/
dra_manager.go) in one object:

- `pools_for(node, labels)`: the pools a node sees (`scheduler.model.pools.gather_pools` over
  the slices of the pools that have a slice for the node or for every node), with the
  DeviceTaintRules applied as device taints; kept per node until a slice or rule changes.
- `in_use()`: every device allocated whole to any claim in the cluster (admin access results
  and shares of devices that allow multiple allocations aside, as upstream), plus every such
  device of an allocation in flight here: what no new allocation may take (the API server
  does not check that a device is allocated to one claim only).
- `device_use()`: the same with the shares (DRAConsumableCapacity): per device that allows
  multiple allocations, the capacity its allocated and in-flight shares consume and whether it
  has any (`scheduler.dra.consumable.DeviceUse`), what the allocator needs to share a device.
- `class_for_resource(name)`: the DeviceClass serving an extended resource (its
  `extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>`; of two classes naming
  the same resource the newer serves it, on a tie the smaller name, as
  k8s.io/dynamic-resource-allocation@v0.37.2 deviceclass/extendedresourcecache does), and
  `extended_claim_of(pod_uid)`: the claim made for a pod's extended resources.
- `released(gone_uids, is_live, gone_keys)`: the what-if of victim selection: within the block
  the devices of the claims the gone pods would free count as free, and the capacity those
  claims' shares consume as given back (see `released`).
- `gpu_devices_by_pod(drivers)` / `gpu_devices_of(pod_uid, drivers)`: the GPUs a pod holds
  through the claims reserved for it (`reserved_gpu_devices`), for reclaim, preemption and
  accounting, which count a DRA pod's GPUs there instead of in `PodInfo.gpus`.
- `assume(pod_key, allocations)`: the scheduling cycle decided these claims' allocations for the
  pod (an extended-resource claim under its in-memory name, `scheduler.dra.extended`); until the
  informer delivers the claim allocated (the PreBind write landed) or
  `revert(pod_key)` gives them back (the binding failed), the devices count as taken and another
  pod sharing the claim waits ("is in the process of being allocated").

Claims are keyed "namespace/name". Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

from scheduler.dra.consumable import DeviceUse, device_use
from scheduler.dra.equivalence import device_shape
from scheduler.dra.extended import GENERATE_NAME_SUFFIX
from scheduler.model.allocations import Allocation
from scheduler.model.claims import ResourceClaim
from scheduler.model.device_classes import DeviceClass, DeviceTaintRule, with_taint_rules
from scheduler.model.devices import Device, ResourceSlice
from scheduler.model.extended_requests import DEVICE_CLASS_RESOURCE_PREFIX
from scheduler.model.pools import Pool, PoolID, gather_pools

DeviceID = tuple[str, str, str]
"""(driver, pool, device)."""


@dataclass(frozen=True)
class InFlight:
    """An allocation decided for `claim_key` while scheduling `pod_key`, not yet seen written."""

    pod_key: str
    claim_uid: str
    allocation: Allocation


@dataclass(frozen=True)
class _NodePools:
    version: int
    labels: tuple[tuple[str, str], ...]
    pools: tuple[Pool, ...]
    slices: tuple[ResourceSlice, ...]


def taken_devices(allocation: Allocation) -> Iterable[DeviceID]:
    """The devices an allocation takes whole from others: all its results but those with admin
    access, which kube-scheduler does not count as allocated either, and shares (a `shareID`),
    which leave the device to other shares (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/
    plugins/dynamicresources/allocateddevices.go)."""
    return (
        result.device_id
        for result in allocation.results
        if not result.admin_access and not result.share_id
    )


def held_devices(allocation: Allocation) -> Iterable[DeviceID]:
    """The devices an allocation holds, whole or a share: all its results but those with admin
    access (watching a device is not holding it)."""
    return (result.device_id for result in allocation.results if not result.admin_access)


def reserved_gpu_devices(
    claims: Iterable[ResourceClaim], drivers: Collection[str]
) -> dict[str, int]:
    """Pod uid -> how many GPUs it holds through `claims`: for every allocated claim, its
    distinct devices whose driver is in `drivers`, admin-access results aside (`held_devices`:
    watching a device is not holding it; a share of a device that allows multiple allocations
    holds it), counted for each pod in its `status.reservedFor` (a claim shared by several pods
    counts for each, as a time-sliced GPU does). Pure."""
    wanted = frozenset(drivers)
    held: dict[str, int] = {}
    for claim in claims:
        if claim.allocation is None or not claim.reserved_for:
            continue
        devices = {d for d in held_devices(claim.allocation) if d[0] in wanted}
        if not devices:
            continue
        for ref in claim.reserved_for:
            if ref.is_pod:
                held[ref.uid] = held.get(ref.uid, 0) + len(devices)
    return held


class DraStore:
    """The DRA objects and in-flight allocations; see the module docstring."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.taint_rules: dict[str, DeviceTaintRule] = {}
        self._in_flight: dict[str, InFlight] = {}
        self._slices_version = 0
        self._pools: dict[str, _NodePools] = {}
        self._by_pool: dict[PoolID, set[str]] | None = None
        self._node_pools: dict[str, set[PoolID]] | None = None
        self._shared_pools: set[PoolID] | None = None
        self._in_use: frozenset[DeviceID] | None = None
        self._device_use: DeviceUse | None = None
        self._released: frozenset[DeviceID] = frozenset()
        """Devices of claims a `released` block now running counts as free."""
        self._released_claims: frozenset[str] = frozenset()
        """Claims (keys) whose shares a `released` block now running gives back."""
        self._released_keys: frozenset[str] = frozenset()
        """Pods whose in-flight allocations a `released` block now running gives back."""
        self._shapes: dict[int, tuple[Device, int]] = {}
        self._shape_ids: dict[str, int] = {}
        self._resource_classes: dict[str, str] | None = None
        self._extended_claims: dict[str, str] = {}
        """Pod uid -> the key of the extended-resource claim it controls."""

    # -- informer input --------------------------------------------------------------------------

    def put_class(self, device_class: DeviceClass) -> bool:
        old = self.classes.get(device_class.name)
        self.classes[device_class.name] = device_class
        self._resource_classes = None
        return old != device_class

    def drop_class(self, name: str) -> bool:
        self._resource_classes = None
        return self.classes.pop(name, None) is not None

    def put_slice(self, resource_slice: ResourceSlice) -> bool:
        if self.slices.get(resource_slice.name) == resource_slice:
            return False
        self.slices[resource_slice.name] = resource_slice
        self._slices_changed()
        return True

    def drop_slice(self, name: str) -> bool:
        if self.slices.pop(name, None) is None:
            return False
        self._slices_changed()
        return True

    def put_taint_rule(self, name: str, rule: DeviceTaintRule) -> bool:
        if self.taint_rules.get(name) == rule:
            return False
        self.taint_rules[name] = rule
        self._slices_changed()
        return True

    def drop_taint_rule(self, name: str) -> bool:
        if self.taint_rules.pop(name, None) is None:
            return False
        self._slices_changed()
        return True

    def put_claim(self, claim: ResourceClaim) -> bool:
        """Store `claim`; an in-flight allocation of it ends once the claim is seen allocated
        (the write landed, or someone else allocated it: either way the informer's view now
        counts) or replaced by another object of the same name."""
        old = self.claims.get(claim.key)
        self.claims[claim.key] = claim
        if claim.extended and claim.controller is not None and claim.controller.kind == "Pod":
            self._extended_claims[claim.controller.uid] = claim.key
            if claim.allocation is not None:  # the in-memory claim it was made from is written
                in_memory = f"{claim.namespace}/{claim.controller.name}{GENERATE_NAME_SUFFIX}"
                self._in_flight.pop(in_memory, None)
        flying = self._in_flight.get(claim.key)
        if flying is not None and (claim.allocation is not None or claim.uid != flying.claim_uid):
            del self._in_flight[claim.key]
        self._uses_changed()
        return old != claim

    def drop_claim(self, key: str) -> bool:
        self._in_flight.pop(key, None)
        self._uses_changed()
        claim = self.claims.pop(key, None)
        owner = claim.controller.uid if claim is not None and claim.controller else None
        if owner is not None and self._extended_claims.get(owner) == key:
            del self._extended_claims[owner]
        return claim is not None

    # -- extended resources ----------------------------------------------------------------------

    def class_for_resource(self, name: str) -> str | None:
        """The DeviceClass serving extended resource `name` (see the module docstring)."""
        if self._resource_classes is None:
            newest: dict[str, DeviceClass] = {}
            for device_class in self.classes.values():
                if device_class.extended_resource_name:
                    kept = newest.get(device_class.extended_resource_name)
                    if kept is None or (device_class.created, kept.name) > (
                        kept.created,
                        device_class.name,
                    ):
                        newest[device_class.extended_resource_name] = device_class
            found = {resource: c.name for resource, c in newest.items()}
            for class_name in self.classes:
                found[DEVICE_CLASS_RESOURCE_PREFIX + class_name] = class_name
            self._resource_classes = found
        return self._resource_classes.get(name)

    def extended_claim_of(self, pod_uid: str) -> ResourceClaim | None:
        """The claim annotated as made for the extended resources of the pod with `pod_uid`
        (its controller owner), if the informer has delivered one."""
        key = self._extended_claims.get(pod_uid)
        return self.claims.get(key) if key is not None else None

    # -- in flight -------------------------------------------------------------------------------

    def assume(self, pod_key: str, allocations: Mapping[str, tuple[str, Allocation]]) -> None:
        """Record the allocations (claim key -> (claim uid, allocation)) decided for `pod_key`."""
        for claim_key, (uid, allocation) in allocations.items():
            self._in_flight[claim_key] = InFlight(pod_key, uid, allocation)
        self._uses_changed()

    def revert(self, pod_key: str) -> bool:
        """Give back every in-flight allocation of `pod_key`; True if there was one."""
        keys = [key for key, flying in self._in_flight.items() if flying.pod_key == pod_key]
        for key in keys:
            del self._in_flight[key]
        if keys:
            self._uses_changed()
        return bool(keys)

    def in_flight(self, claim_key: str) -> InFlight | None:
        return self._in_flight.get(claim_key)

    def in_flight_for(self, pod_key: str) -> dict[str, InFlight]:
        return {k: v for k, v in self._in_flight.items() if v.pod_key == pod_key}

    # -- what-if of victim selection ------------------------------------------------------------

    def freed_by(
        self,
        gone_uids: Collection[str],
        is_live: Callable[[str], bool],
    ) -> frozenset[DeviceID]:
        """The devices taken whole by the claims `freed_claims` names."""
        freed: set[DeviceID] = set()
        for key in self.freed_claims(gone_uids, is_live):
            allocation = self.claims[key].allocation
            assert allocation is not None  # freed_claims names allocated claims only
            freed.update(taken_devices(allocation))
        return frozenset(freed)

    def freed_claims(
        self,
        gone_uids: Collection[str],
        is_live: Callable[[str], bool],
    ) -> frozenset[str]:
        """The allocated claims (keys) that are deallocated once the pods with uids `gone_uids`
        are gone and the resourceclaim controller has done its work:

        - a claim generated for one of them (its controller owner) is deleted with it;
        - a claim reserved only for pods that are gone or no longer live (`is_live(uid)` is
          False: deleted, or finished) is deallocated once its last consumer goes, so a claim
          shared with a pod that stays frees nothing, and one whose consumers already left is
          counted free (its release is pending: no pod has to be evicted for it).

        A claim reserved for a consumer that is not a pod is never freed."""
        gone = set(gone_uids)
        freed: set[str] = set()
        for claim in self.claims.values():
            if claim.allocation is None:
                continue
            owner = claim.controller
            owned_by_gone = owner is not None and owner.kind == "Pod" and owner.uid in gone
            reserved = claim.reserved_for
            consumers_gone = bool(reserved) and all(
                ref.is_pod and (ref.uid in gone or not is_live(ref.uid)) for ref in reserved
            )
            if owned_by_gone or consumers_gone:
                freed.add(claim.key)
        return frozenset(freed)

    @contextmanager
    def released(
        self,
        gone_uids: Collection[str],
        is_live: Callable[[str], bool],
        gone_keys: Collection[str] = (),
    ) -> Iterator[None]:
        """Within the block, `in_use()` leaves out the devices of the claims `freed_claims`
        names and the allocations in flight for the pods `gone_keys` (blocks nest), and
        `device_use()` the shares of both; allocations assumed inside the block count as usual.
        Afterwards everything counts again. Nothing is written: the claims stay as they are."""
        saved = self._released, self._released_keys, self._released_claims
        freed = self.freed_claims(gone_uids, is_live)
        self._released = saved[0] | self.freed_by(gone_uids, is_live)
        self._released_keys = saved[1] | frozenset(gone_keys)
        self._released_claims = saved[2] | freed
        self._uses_changed()
        try:
            yield
        finally:
            self._released, self._released_keys, self._released_claims = saved
            self._uses_changed()

    # -- what the allocator reads ----------------------------------------------------------------

    def in_use(self) -> frozenset[DeviceID]:
        """Devices allocated to any claim, or to an allocation in flight (less those a
        `released` block gives back)."""
        if self._in_use is None:
            taken: set[DeviceID] = set()
            for claim in self.claims.values():
                if claim.allocation is not None:
                    taken.update(taken_devices(claim.allocation))
            taken -= self._released
            for flying in self._in_flight.values():
                if flying.pod_key not in self._released_keys:
                    taken.update(taken_devices(flying.allocation))
            self._in_use = frozenset(taken)
        return self._in_use

    def pools_for(self, node_name: str, labels: Mapping[str, str]) -> tuple[Pool, ...]:
        """The pools `node_name` sees, taint rules applied; cached until a slice, a rule or
        the node's labels change."""
        return self._node_pools_of(node_name, labels).pools

    def slices_for(self, node_name: str, labels: Mapping[str, str]) -> tuple[ResourceSlice, ...]:
        """The slices `pools_for` gathered the node's pools from (the allocator reads their node
        selection for an allocation's node selector)."""
        return self._node_pools_of(node_name, labels).slices

    def _node_pools_of(self, node_name: str, labels: Mapping[str, str]) -> _NodePools:
        label_key = tuple(sorted(labels.items()))
        kept = self._pools.get(node_name)
        if kept is not None and kept.version == self._slices_version and kept.labels == label_key:
            return kept
        slices = tuple(self._candidate_slices(node_name))
        found = _NodePools(
            self._slices_version, label_key, gather_pools(slices, node_name, labels), slices
        )
        self._pools[node_name] = found
        return found

    def shape_of(self, device: Device) -> int:
        """A small integer naming `device`'s shape (`scheduler.dra.equivalence.device_shape`),
        the same for devices of equal shape; kept until a slice changes."""
        kept = self._shapes.get(id(device))
        if kept is not None and kept[0] is device:
            return kept[1]
        shape = self._shape_ids.setdefault(device_shape(device), len(self._shape_ids))
        self._shapes[id(device)] = (device, shape)
        return shape

    @property
    def slices_version(self) -> int:
        """Grows whenever a slice or a taint rule is added, changed or dropped."""
        return self._slices_version

    def has_devices(self, node_name: str) -> bool:
        """Whether any slice is published for the node itself or for every/selected nodes."""
        self._index()
        assert self._node_pools is not None and self._shared_pools is not None
        return bool(self._node_pools.get(node_name)) or bool(self._shared_pools)

    # -- GPUs held through claims ----------------------------------------------------------------

    def gpu_devices_by_pod(self, drivers: Collection[str]) -> dict[str, int]:
        """Pod uid -> the GPUs it holds through its claims (`reserved_gpu_devices` over every
        claim); one pass over the claims."""
        return reserved_gpu_devices(self.claims.values(), drivers)

    def gpu_devices_of(self, pod_uid: str, drivers: Collection[str]) -> int:
        """The GPUs the pod with `pod_uid` holds through its claims; one pass over the claims
        (use `gpu_devices_by_pod` for many pods)."""
        return self.gpu_devices_by_pod(drivers).get(pod_uid, 0)

    # -- shares of devices (DRAConsumableCapacity) -----------------------------------------------

    def device_use(self) -> DeviceUse:
        """`in_use()` and the shares of devices that allow multiple allocations, of allocated
        claims and allocations in flight (less those a `released` block gives back)."""
        if self._device_use is None:
            allocations = [
                claim.allocation
                for claim in self.claims.values()
                if claim.allocation is not None and claim.key not in self._released_claims
            ]
            allocations.extend(
                flying.allocation
                for flying in self._in_flight.values()
                if flying.pod_key not in self._released_keys
            )
            self._device_use = replace(device_use(allocations), taken=self.in_use())
        return self._device_use

    # -- internals -------------------------------------------------------------------------------

    def _uses_changed(self) -> None:
        self._in_use = None
        self._device_use = None

    def _slices_changed(self) -> None:
        self._slices_version += 1
        self._shapes.clear()
        self._shape_ids.clear()
        self._by_pool = None
        self._node_pools = None
        self._shared_pools = None

    def _index(self) -> None:
        if self._by_pool is not None:
            return
        by_pool: dict[PoolID, set[str]] = {}
        node_pools: dict[str, set[PoolID]] = {}
        shared: set[PoolID] = set()
        for name, resource_slice in self.slices.items():
            pool = PoolID(resource_slice.driver, resource_slice.pool.name)
            by_pool.setdefault(pool, set()).add(name)
            node = resource_slice.node_selection.node_name
            if node and not resource_slice.per_device_node_selection:
                node_pools.setdefault(node, set()).add(pool)
            else:
                shared.add(pool)
        self._by_pool, self._node_pools, self._shared_pools = by_pool, node_pools, shared

    def _candidate_slices(self, node_name: str) -> Iterable[ResourceSlice]:
        """Every slice of every pool that may have devices for `node_name` (all slices of a
        pool, so `gather_pools` can tell an incomplete pool from one being replaced)."""
        self._index()
        assert self._by_pool is not None and self._node_pools is not None
        assert self._shared_pools is not None
        pools = self._node_pools.get(node_name, set()) | self._shared_pools
        rules = list(self.taint_rules.values())
        for pool in sorted(pools):
            for name in sorted(self._by_pool.get(pool, ())):
                resource_slice = self.slices[name]
                yield with_taint_rules(resource_slice, rules) if rules else resource_slice
