"""The constraints of one claim across its devices, as the allocator checks them while it
searches: `matchAttribute` (every device of the named requests has the attribute, all with one
value) and `distinctAttribute` (every device has it, no value twice), after
`matchAttributeConstraint` and `distinctAttributeConstraint` of k8s.io/dynamic-resource-
allocation@v0.37.2 structured/internal/incubating/allocator_incubating.go and constraint.go.

A constraint is stateful: `add` is asked before a device is taken and records it when it fits;
for every `add` that returned True the search calls `remove` with the same arguments when it
backtracks (last added, first removed). Constraints are monotonic: once a device does not fit,
more devices will not make it fit. A constraint with no request names covers every request; a
request name covers its firstAvailable entries too, and "request/entry" names one entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.model.claim_specs import DeviceConstraint
from scheduler.model.devices import AttributeValue, Device


def lookup_attribute(device: Device, driver: str, name: str) -> AttributeValue | None:
    """`lookupAttribute`: the attribute by its fully qualified name, else, when the name's
    domain is the device's driver, by its short name (the model already files an unqualified
    attribute under the driver's domain, so the second look rarely finds more)."""
    found = device.attributes.get(name)
    if found is not None:
        return found
    domain, slash, short = name.partition("/")
    if not slash or domain != driver:
        return None
    return device.attributes.get(short)


def same_value(left: AttributeValue, right: AttributeValue) -> bool:
    """Equal values of the same kind (a bool never equals an int; versions compare their
    text, which semver's minimal form makes exact)."""
    return type(left) is type(right) and left == right


@dataclass
class Constraint:
    """One claim constraint with the values of the devices taken so far."""

    spec: DeviceConstraint
    values: list[AttributeValue] = field(default_factory=list)

    def covers(self, request: str, subrequest: str) -> bool:
        """Whether devices of `request` (its entry `subrequest`, "" for none) count."""
        names = self.spec.requests
        if not names:
            return True
        return request in names or (bool(subrequest) and f"{request}/{subrequest}" in names)

    def add(self, request: str, subrequest: str, driver: str, device: Device) -> bool:
        """Whether `device` (of `driver`) fits; records it when it does."""
        if not self.covers(request, subrequest):
            return True
        name = self.spec.match_attribute or self.spec.distinct_attribute
        value = lookup_attribute(device, driver, name)
        if value is None:
            return False
        if self.spec.match_attribute:
            if self.values and not same_value(self.values[0], value):
                return False
        elif any(same_value(known, value) for known in self.values):
            return False
        self.values.append(value)
        return True

    def remove(self, request: str, subrequest: str) -> None:
        """Forget the device last added for `request`/`subrequest`."""
        if self.covers(request, subrequest):
            self.values.pop()
