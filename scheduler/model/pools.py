"""The resource pools one node sees, gathered from parsed ResourceSlices the way kube-scheduler's
allocator gathers them (`GatherPools`, `addSlice`, `checkSlicesInPool`, `buildPool` and
`validateDeviceNames` in k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/
incubating/pools_incubating.go, the implementation the Kubernetes 1.37 defaults select, with
DRAPartitionableDevices on and DRADeviceCompatibilityGroups off):

- A slice counts for the node when its node selection matches it (`NodeSelection.matches`), or,
  with `perDeviceNodeSelection`, when one of its devices' does. A slice that sets none of them is
  some future extension and is skipped.
- Per (driver, pool name) only the slices of the newest generation among those count.
- A pool with fewer (or more) slices at that generation than its `resourceSliceCount` is looked
  at again over all slices: when some slice of the pool, even one the node does not see, has a
  newer generation, the driver is replacing the pool and it is left out entirely; otherwise, if
  the count of all slices at the generation still differs, the pool is *incomplete*
  (`Pool.incomplete`): the allocator allocates nothing from it, and a request for all devices
  fails with "... resource pool <driver>/<pool> is currently being updated" (`INCOMPLETE`).
- A complete pool is *invalid* (`Pool.invalid` holds the reason, worded as upstream's) when a
  device name repeats among the slices the node sees, a counter set name repeats, or a device
  consumes a counter set or counter the pool does not have. Upstream fails allocation on a node
  with "invalid resource pools were encountered" when nothing else fits. Beyond upstream (which
  only ever sees slices the API server validated), a slice with parse errors makes its pool
  invalid too.
- Pools are sorted by driver, then pool name; pools with a device that has binding conditions
  come last (the allocator's first-fit search tries them last).

Pure data: no I/O, no CEL; devices are records of `scheduler.model.devices`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.model.device_capacity import CounterSet
from scheduler.model.devices import Device, ResourceSlice
from topology.text import clip

INCOMPLETE = "resource pool {pool} is currently being updated"
"""How upstream words an incomplete pool to a request for all devices (`{pool}`: its ID)."""

INVALID = "resource pool {pool} is currently invalid"
"""How upstream words an invalid pool to a request for all devices."""


@dataclass(frozen=True, order=True)
class PoolID:
    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


@dataclass(frozen=True)
class PoolDevice:
    """A device of a pool and the slice it was published in."""

    slice_name: str
    device: Device


@dataclass(frozen=True)
class Pool:
    """One pool as the node sees it. Only a `usable` pool is allocated from."""

    id: PoolID
    generation: int = 0
    incomplete: bool = False
    invalid: str = ""
    """Why the pool is invalid ("" when it is not)."""
    devices: tuple[PoolDevice, ...] = ()
    """The devices the node can use, by slice name, then in slice order."""
    devices_elsewhere: tuple[PoolDevice, ...] = ()
    """The pool's other devices (slices or per-device selections the node does not match):
    they share the pool's counters, so what they consume counts."""
    counter_sets: Mapping[str, CounterSet] = field(default_factory=dict)
    """The pool's shared counter sets by name."""

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid

    @property
    def has_binding_conditions(self) -> bool:
        return any(entry.device.binding_conditions for entry in self.devices)

    @property
    def problem(self) -> str:
        """Upstream's words for an unusable pool ("" for a usable one)."""
        if self.incomplete:
            return INCOMPLETE.format(pool=self.id)
        if self.invalid:
            return f"{INVALID.format(pool=self.id)}: {self.invalid}"
        return ""


def slice_matches_node(
    resource_slice: ResourceSlice, node_name: str, labels: Mapping[str, str]
) -> bool:
    """Whether the node sees the slice (`GatherPools`' relevance test)."""
    if resource_slice.node_selection.is_set:
        return resource_slice.node_selection.matches(node_name, labels)
    if resource_slice.per_device_node_selection:
        return any(_device_matches(device, node_name, labels) for device in resource_slice.devices)
    return False


def _device_matches(device: Device, node_name: str, labels: Mapping[str, str]) -> bool:
    return device.node_selection is not None and device.node_selection.matches(node_name, labels)


def gather_pools(
    slices: Iterable[ResourceSlice], node_name: str, labels: Mapping[str, str]
) -> tuple[Pool, ...]:
    """The pools the node named `node_name` with `labels` sees, from all known slices."""
    every = list(slices)
    newest: dict[PoolID, list[ResourceSlice]] = {}
    for resource_slice in every:
        if not resource_slice.driver or not resource_slice.pool.name:
            continue  # unparseable: belongs to no pool
        if slice_matches_node(resource_slice, node_name, labels):
            _add_slice(newest, resource_slice)
    plain: list[Pool] = []
    last: list[Pool] = []
    for pool_id, seen in newest.items():
        generation = seen[0].pool.generation
        wanted = seen[0].pool.resource_slice_count
        others: list[ResourceSlice] = []
        if len(seen) != wanted:
            obsolete, same_generation = _slices_in_pool(every, pool_id, generation)
            if obsolete:
                continue
            if len(same_generation) != wanted:
                plain.append(Pool(pool_id, generation, incomplete=True))
                continue
            names = {resource_slice.name for resource_slice in seen}
            others = [s for s in same_generation if s.name not in names]
        pool = _build_pool(pool_id, seen, others, node_name, labels)
        (last if pool.has_binding_conditions else plain).append(pool)
    return (*sorted(plain, key=lambda pool: pool.id), *sorted(last, key=lambda pool: pool.id))


def _add_slice(pools: dict[PoolID, list[ResourceSlice]], resource_slice: ResourceSlice) -> None:
    """`addSlice`: keep only the newest generation's slices of each pool."""
    pool_id = PoolID(resource_slice.driver, resource_slice.pool.name)
    known = pools.get(pool_id)
    if known is None or resource_slice.pool.generation > known[0].pool.generation:
        pools[pool_id] = [resource_slice]
    elif resource_slice.pool.generation == known[0].pool.generation:
        known.append(resource_slice)


def _slices_in_pool(
    every: Sequence[ResourceSlice], pool_id: PoolID, generation: int
) -> tuple[bool, list[ResourceSlice]]:
    """`checkSlicesInPool`: (a newer generation exists, the pool's slices at `generation`)."""
    found = []
    for resource_slice in every:
        if PoolID(resource_slice.driver, resource_slice.pool.name) != pool_id:
            continue
        if resource_slice.pool.generation > generation:
            return True, []
        if resource_slice.pool.generation == generation:
            found.append(resource_slice)
    return False, found


def _build_pool(
    pool_id: PoolID,
    seen: list[ResourceSlice],
    others: list[ResourceSlice],
    node_name: str,
    labels: Mapping[str, str],
) -> Pool:
    """`buildPool`: the node's slices `seen` and the pool's `others` at the same generation."""
    generation = seen[0].pool.generation
    seen = sorted(seen, key=lambda resource_slice: resource_slice.name)
    device_slices = [s for s in seen if not s.shared_counters]
    counter_slices = [s for s in (*seen, *others) if s.shared_counters]
    elsewhere_slices = [s for s in others if not s.shared_counters]
    broken = next((s for s in (*seen, *others) if s.errors), None)
    if broken is not None:
        reason = f"ResourceSlice {clip(broken.name)}: {broken.errors[0]}"
        return Pool(pool_id, generation, invalid=reason)
    reason = _duplicate_device(device_slices)
    counter_sets: dict[str, CounterSet] = {}
    for counter_slice in counter_slices:
        for counter_set in counter_slice.shared_counters:
            if counter_set.name in counter_sets and not reason:
                reason = f"duplicate counter set name {counter_set.name}"
            counter_sets.setdefault(counter_set.name, counter_set)
    devices: list[PoolDevice] = []
    elsewhere: list[PoolDevice] = []
    for resource_slice in device_slices:
        for device in resource_slice.devices:
            visible = not resource_slice.per_device_node_selection or _device_matches(
                device, node_name, labels
            )
            (devices if visible else elsewhere).append(PoolDevice(resource_slice.name, device))
    for resource_slice in elsewhere_slices:
        elsewhere.extend(
            PoolDevice(resource_slice.name, device) for device in resource_slice.devices
        )
    reason = reason or _missing_counters(counter_sets, [*devices, *elsewhere])
    if reason:
        return Pool(pool_id, generation, invalid=reason)
    return Pool(
        pool_id,
        generation,
        devices=tuple(devices),
        devices_elsewhere=tuple(elsewhere),
        counter_sets=counter_sets,
    )


def _duplicate_device(slices: Iterable[ResourceSlice]) -> str:
    """`validateDeviceNames` over the slices the node sees."""
    names: set[str] = set()
    for resource_slice in slices:
        for device in resource_slice.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
    return ""


def _missing_counters(counter_sets: Mapping[str, CounterSet], devices: Iterable[PoolDevice]) -> str:
    """`validateDeviceCounterConsumption`: every consumed counter exists in the pool."""
    for entry in devices:
        for consumption in entry.device.consumes_counters:
            counter_set = counter_sets.get(consumption.name)
            if counter_set is None:
                return f"counter set {consumption.name} not found"
            for counter in consumption.counters:
                if counter not in counter_set.counters:
                    return f"counter {counter} not found in counter set {counter_set.name}"
    return ""
