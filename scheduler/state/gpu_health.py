"""What the cache knows of sick GPUs, and the pods holding them.

Device-plugin nodes: a sick GPU index is recorded with `ClusterCache.set_sick_gpus` (never
chosen, not free; `scheduler.state.node_table`). DRA nodes: the device whose `<driver>/uuid`
attribute names the sick GPU (`devices_of_gpu`) gets an in-memory DeviceTaintRule
(`apply_device_taints`) tainting it `gpu-scheduler.io/unhealthy=<reason>:NoSchedule`, so the
allocator skips it through the taint path it already has (a claim that tolerates the taint may
still get it, as with any device taint). In-memory rules are named `MEMORY_RULE_PREFIX` +
"driver/pool/device": no API object can have that name (a DeviceTaintRule's name is a DNS
subdomain), so the DeviceTaintRule informer never replaces or drops them.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reclaim.health import GpuRef, Sickness
from scheduler.kube.device_taint_rules import UNHEALTHY_TAINT_KEY, taint_value
from scheduler.model.device_classes import DeviceTaintRule, DeviceTaintSelector
from scheduler.model.device_taints import DeviceTaint
from scheduler.model.objects import PodInfo
from scheduler.state.cache import ClusterCache
from scheduler.state.dra import DeviceID, DraStore

MEMORY_RULE_PREFIX = "health:"
UUID_ATTRIBUTE = "uuid"


def devices_of_gpu(store: DraStore, node: str, uuid: str) -> list[DeviceID]:
    """The devices of `node`'s own slices whose `<driver>/uuid` attribute is `uuid` (a whole
    GPU, and any partition that carries its parent's UUID), sorted."""
    if not uuid:
        return []
    found: set[DeviceID] = set()
    for resource_slice in store.slices.values():
        if resource_slice.node_selection.node_name != node:
            continue
        key = f"{resource_slice.driver}/{UUID_ATTRIBUTE}"
        for device in resource_slice.devices:
            if device.attributes.get(key) == uuid:
                found.add((resource_slice.driver, resource_slice.pool.name, device.name))
    return sorted(found)


def memory_rule_name(device: DeviceID) -> str:
    return MEMORY_RULE_PREFIX + "/".join(device)


def apply_device_taints(store: DraStore, sick: Mapping[DeviceID, str]) -> bool:
    """Make the in-memory health rules exactly one per device of `sick` (device -> taint
    value); True when a rule was added, changed or dropped."""
    wanted = {memory_rule_name(device): (device, value) for device, value in sick.items()}
    changed = False
    for name in [n for n in store.taint_rules if n.startswith(MEMORY_RULE_PREFIX)]:
        if name not in wanted:
            changed = store.drop_taint_rule(name) or changed
    for name, ((driver, pool, device), value) in sorted(wanted.items()):
        rule = DeviceTaintRule(
            name=name,
            selector=DeviceTaintSelector(driver=driver, pool=pool, device=device),
            taint=DeviceTaint(UNHEALTHY_TAINT_KEY, value, "NoSchedule"),
        )
        changed = store.put_taint_rule(name, rule) or changed
    return changed


def record_verdicts(
    cache: ClusterCache, verdicts: Mapping[GpuRef, Sickness]
) -> tuple[bool, dict[GpuRef, list[DeviceID]]]:
    """Make the cache's sick GPUs exactly `verdicts`: indices on every node
    (`ClusterCache.set_sick_gpus`, nodes no longer named are cleared) and in-memory taints on
    the DRA devices of the sick GPUs' UUIDs. Returns whether anything changed and the devices
    found per sick GPU."""
    devices = {gpu: devices_of_gpu(cache.dra, gpu.node, gpu.uuid) for gpu in sorted(verdicts)}
    by_node: dict[str, dict[int, str]] = {}
    for gpu, sickness in sorted(verdicts.items()):
        by_node.setdefault(gpu.node, {})[gpu.index] = sickness.describe()
    changed = False
    for node in sorted(set(cache.sick_gpus) | set(by_node)):
        changed = cache.set_sick_gpus(node, by_node.get(node, {})) or changed
    tainted = {
        device: taint_value(verdicts[gpu].kinds())
        for gpu, found in devices.items()
        for device in found
    }
    changed = apply_device_taints(cache.dra, tainted) or changed
    return changed, devices


def pods_on_gpu(cache: ClusterCache, node: str, index: int) -> list[PodInfo]:
    """Pods counted on `node` that hold GPU `index` (reservations left out), sorted by key."""
    return [
        state.info
        for state in cache.iter_pods_on(node)
        if state.reserved_at is None and index in state.gpus
    ]


def pods_on_devices(cache: ClusterCache, devices: Iterable[DeviceID]) -> list[PodInfo]:
    """Pods in the cache a claim allocated one of `devices` is reserved for, sorted by key."""
    wanted = set(devices)
    if not wanted:
        return []
    uids: set[str] = set()
    for claim in cache.dra.claims.values():
        if claim.allocation is None:
            continue
        if any(result.device_id in wanted for result in claim.allocation.results):
            uids.update(ref.uid for ref in claim.reserved_for)
    pods = {
        state.info.key: state.info
        for state in cache.pods.values()
        if state.reserved_at is None and state.info.uid in uids
    }
    return [pods[key] for key in sorted(pods)]
