"""The room left on shared GPUs (DRAConsumableCapacity), in thousandths of a GPU: what the
GPU-fragmentation score counts as free GPU on nodes whose GPUs are published as devices that
allow multiple allocations.

A *shared GPU* is a whole-GPU device of the GPU driver (`scheduler.dra.domains`' rule: its
`<driver>/type` attribute absent or `gpu`) with `allowMultipleAllocations`, published in a slice
of one node (`nodeName`). What its shares take, in thousandths, is the largest share of any one
capacity they consume (`consumed / value`, rounded up, at most 1000): a GPU whose memory is
half taken and whose compute share is a quarter taken is half taken. Its room is 1000 less that.

    SharedRoom(slices)          the index of shared GPUs by node (built when slices change)
    SharedRoom.room(use)        node name -> the thousandths still free on its shared GPUs
    SharedRoom.taken(results)   the thousandths a pod's share results take of their GPUs

Pure: parsed slices and `DeviceUse` in, integers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal

from scheduler.dra.consumable import Amounts, DeviceID, DeviceUse
from scheduler.dra.domains import DEFAULT_DRIVER, TYPE_ATTRIBUTE, WHOLE_GPU_TYPE
from scheduler.model.allocations import DeviceResult
from scheduler.model.device_capacity import DeviceCapacity
from scheduler.model.devices import ResourceSlice

WHOLE = 1000
"""Thousandths of one GPU."""


def taken_milli(consumed: Amounts, capacity: Mapping[str, DeviceCapacity]) -> int:
    """The thousandths of a device that `consumed` takes: the largest share of any capacity
    with a positive value, rounded up, at most `WHOLE`."""
    largest = Decimal(0)
    for published in capacity.values():
        amount = consumed.get(published.name)
        if amount is not None and published.value > 0:
            largest = max(largest, amount / published.value)
    milli = (largest * WHOLE).to_integral_value(rounding=ROUND_CEILING)
    return min(int(milli), WHOLE)


class SharedRoom:
    """The shared GPUs of node-local slices, by node (see the module docstring)."""

    def __init__(self, slices: Iterable[ResourceSlice], driver: str = DEFAULT_DRIVER) -> None:
        self._node_of: dict[DeviceID, str] = {}
        self._capacity: dict[DeviceID, Mapping[str, DeviceCapacity]] = {}
        self.gpus: dict[str, int] = {}
        """Node name -> its shared GPUs."""
        type_key = f"{driver}/{TYPE_ATTRIBUTE}"
        for resource_slice in slices:
            node = resource_slice.node_selection.node_name
            if resource_slice.driver != driver or not node:
                continue
            for device in resource_slice.devices:
                kind = device.attributes.get(type_key)
                if not device.allow_multiple_allocations or kind not in (None, WHOLE_GPU_TYPE):
                    continue
                key = (driver, resource_slice.pool.name, device.name)
                if key in self._node_of:
                    continue
                self._node_of[key] = node
                self._capacity[key] = device.capacity
                self.gpus[node] = self.gpus.get(node, 0) + 1

    def room(self, use: DeviceUse) -> dict[str, int]:
        """Node name -> thousandths free on its shared GPUs, given what shares consume."""
        found = {node: count * WHOLE for node, count in self.gpus.items()}
        for device, consumed in use.consumed.items():
            node = self._node_of.get(device)
            if node is not None:
                found[node] -= taken_milli(consumed, self._capacity[device])
        return found

    def taken(self, results: Iterable[DeviceResult]) -> int:
        """The thousandths that the share results among `results` take of shared GPUs."""
        return sum(
            taken_milli(result.consumed_capacity, self._capacity[result.device_id])
            for result in results
            if result.share_id and result.device_id in self._capacity
        )
