"""Nodes on which the allocator must reach the same verdict for a pod's claims, so that it runs
once per group of such nodes instead of once per node.

The allocator's outcome on a node depends on its pools' devices (their attributes, capacities,
taints, counters), which of them are in use, their NVLink domains, the node's labels (for slices
that select nodes) and the names in the results. For nodes whose devices are all published in
node-local slices (`nodeName`, the way NVIDIA's driver and most drivers publish GPUs), two nodes
reach the same verdict when, pool by pool and device by device in the allocator's order, their
devices have the same name, the same *shape*, the same in-use state (taken whole, and the
capacity their shares consume) and the same domain, and the
pools agree on being incomplete or invalid. A device's shape is everything of it but its identity
attributes (`IDENTITY_ATTRIBUTES`: the GPU's UUID and PCI bus ID, different on every node); so
the grouping holds only for claims whose selectors and constraints cannot read an identity
attribute: every attribute access in their CEL must name its domain and attribute literally
(`device.attributes['gpu.nvidia.com'].productName`) and none may name an identity attribute;
otherwise (`groupable` False) every node is allocated on its own.

`node_shape(...).signature(use)` is None for a node the grouping does not cover (a pool with
shared counters or with devices in slices of other nodes), which is then allocated on its own.
The results (device names per claim) are the same within a group; the pool names differ, which
is why the caller allocates the chosen node again for its own results
(`scheduler.plugins.dynamic_resources`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace

from scheduler.dra.consumable import DeviceUse
from scheduler.model.claims import ResourceClaim
from scheduler.model.device_classes import DeviceClass
from scheduler.model.devices import Device
from scheduler.model.pools import Pool

IDENTITY_ATTRIBUTES = ("uuid", "pciBusID", "serialNumber", "parentUUID")
"""Attribute names (in any domain) that identify one device and differ on every node."""

_ATTRIBUTE_ACCESS = re.compile(r"device\s*\.\s*attributes")
_LITERAL_ACCESS = re.compile(
    r"device\s*\.\s*attributes\s*\[\s*(['\"])([^'\"]*)\1\s*\]\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)"
    r"(?!\s*[A-Za-z0-9_(])"
)
"""A literal attribute read; a name followed by "(" is a macro or method on the whole map
(`exists`, `all`, `map`, ...), which may read any attribute."""


def _expression_groupable(expression: str) -> bool:
    """Every `device.attributes` access of `expression` is literal and names no identity
    attribute (a textual check: conservative, never wrong the other way)."""
    accesses = len(_ATTRIBUTE_ACCESS.findall(expression))
    literal = _LITERAL_ACCESS.findall(expression)
    if len(literal) != accesses:
        return False
    if any(name in IDENTITY_ATTRIBUTES for _, _, name in literal):
        return False
    return not any(identity in expression for identity in IDENTITY_ATTRIBUTES)


def groupable(claims: Iterable[ResourceClaim], classes: Mapping[str, DeviceClass]) -> bool:
    """Whether the claims' selectors (with their classes') and constraints let equal-shaped
    nodes be grouped (see the module docstring)."""
    for claim in claims:
        for constraint in claim.spec.constraints:
            attribute = constraint.match_attribute or constraint.distinct_attribute
            if attribute.rpartition("/")[2] in IDENTITY_ATTRIBUTES:
                return False
        for request in claim.spec.requests:
            for _, spec in request.alternatives:
                expressions = list(spec.selectors)
                device_class = classes.get(spec.device_class_name)
                if device_class is not None:
                    expressions += device_class.selectors
                if not all(_expression_groupable(e) for e in expressions):
                    return False
    return True


def device_shape(device: Device) -> str:
    """The device without its name and identity attributes, as text (equal texts: devices the
    allocator cannot tell apart by anything but their names)."""
    attributes = {
        key: value
        for key, value in device.attributes.items()
        if key.rpartition("/")[2] not in IDENTITY_ATTRIBUTES
    }
    return repr(replace(device, name="", attributes=attributes))


@dataclass(frozen=True)
class NodeShape:
    """What of a node's signature does not change from pod to pod: per pool its driver and
    state and per device its name, shape and domain (`key`), and the devices in order (`ids`),
    whose in-use states complete the signature. None-valued `key`: not covered."""

    key: Hashable | None
    ids: tuple[tuple[str, str, str], ...] = ()

    def signature(self, use: DeviceUse) -> Hashable | None:
        """The node's group key for the allocator (None: allocate this node on its own): the
        shape and, per device, whether it is taken whole and what its shares consume."""
        if self.key is None:
            return None
        if not use.shared and not use.consumed:
            return (self.key, tuple([device in use.taken for device in self.ids]))
        return (
            self.key,
            tuple(
                [
                    (
                        device in use.taken,
                        device in use.shared,
                        tuple(sorted(use.consumed.get(device, {}).items())),
                    )
                    for device in self.ids
                ]
            ),
        )


def node_shape(
    pools: tuple[Pool, ...],
    domain_of: Mapping[tuple[str, str, str], int],
    shape_of: Callable[[Device], int],
) -> NodeShape:
    """The node's `NodeShape` (see the module docstring for what it must capture)."""
    key: list[Hashable] = []
    ids: list[tuple[str, str, str]] = []
    for pool in pools:
        if pool.counter_sets or pool.devices_elsewhere:
            return NodeShape(None)
        devices = []
        for entry in pool.devices:
            device_id = (pool.id.driver, pool.id.pool, entry.device.name)
            ids.append(device_id)
            devices.append(
                (entry.device.name, shape_of(entry.device), domain_of.get(device_id, -1))
            )
        key.append((pool.id.driver, pool.incomplete, pool.invalid, tuple(devices)))
    return NodeShape(tuple(key), tuple(ids))
