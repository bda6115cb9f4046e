"""The allocation of one claim from the devices the search chose, built as `Allocator.Allocate`
and `createNodeSelector` (k8s.io/dynamic-resource-allocation@v0.37.2 structured/internal/
incubating/allocator_incubating.go) build it:

- results in the order the devices were chosen (claims' requests in order), each naming the
  request ("request/entry" for a firstAvailable entry), with adminAccess when the request asked
  for it and the request's tolerations, and for a share of a device that allows multiple
  allocations its `shareID` and `consumedCapacity`;
- configs: each DeviceClass's configs once (source FromClass), naming the requests that use
  the class, then the claim's configs (FromClaim) that apply to a request or to the entry
  chosen for it (an entry not chosen does not count); a config that applies to every request
  names none ("all");
- the node selector: when a device is local to a node (its slice's, or with per-device node
  selection its own, `nodeName`), or binds to the node, the node itself (`metadata.name In
  [<node>]`); otherwise the union of the devices' one-term `nodeSelector`s; None when every
  device is available on all nodes.

Devices with binding conditions are allocated as upstream does, but `DeviceResult` has no
field for the conditions: a caller that waits for them reads them from the device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from scheduler.dra.allocator_requests import Candidate, RequestData
from scheduler.model.allocations import Allocation, DeviceResult
from scheduler.model.claims import ResourceClaim
from scheduler.model.dra_fields import OpaqueConfig
from scheduler.model.fields import NodeSelectorTerm, SelectorRequirement
from scheduler.model.node_selection import NODE_NAME_FIELD, NodeSelection, NodeSelector

FROM_CLASS = "FromClass"
FROM_CLAIM = "FromClaim"


@dataclass(frozen=True)
class Chosen:
    """A device the search took for a request (or firstAvailable entry)."""

    data: RequestData
    candidate: Candidate
    share_id: str = ""
    """The share taken of a device that allows multiple allocations ("" for a whole device)."""
    consumed: Mapping[str, Decimal] = field(default_factory=dict)
    """The share's consumed capacity, by capacity name as published."""


def node_local(node_name: str) -> NodeSelector:
    """The selector of exactly the node named `node_name`."""
    requirement = SelectorRequirement(NODE_NAME_FIELD, "In", (node_name,))
    return NodeSelector((NodeSelectorTerm(expressions=(), fields=(requirement,)),))


def build_allocation(
    claim: ResourceClaim,
    chosen: Sequence[Chosen],
    selected: Sequence[RequestData],
    node_name: str,
    slice_selections: Mapping[str, NodeSelection],
) -> Allocation:
    """`selected`: per request of the claim, the alternative that was allocated;
    `slice_selections`: node selection by slice name (a slice not found counts as local to the
    node, the narrowest choice that is always true for it)."""
    results = tuple(
        DeviceResult(
            request=entry.data.name,
            driver=entry.candidate.id[0],
            pool=entry.candidate.id[1],
            device=entry.candidate.id[2],
            admin_access=entry.data.spec.admin_access,
            share_id=entry.share_id,
            consumed_capacity=entry.consumed,
            tolerations=entry.data.spec.tolerations,
        )
        for entry in chosen
    )
    return Allocation(
        results=results,
        config=_configs(claim, selected),
        node_selector=_node_selector(chosen, node_name, slice_selections),
    )


def _configs(claim: ResourceClaim, selected: Sequence[RequestData]) -> tuple[OpaqueConfig, ...]:
    found: list[tuple[OpaqueConfig, list[str]]] = []
    class_ranges: dict[str, range] = {}
    for data in selected:
        known = class_ranges.get(data.device_class.name)
        if known is not None:
            for index in known:
                found[index][1].append(data.name)
            continue
        start = len(found)
        found.extend(
            (OpaqueConfig(config.driver, config.parameters, source=FROM_CLASS), [data.name])
            for config in data.device_class.config
        )
        class_ranges[data.device_class.name] = range(start, len(found))
    for config in claim.spec.config:
        if not config.requests or any(_names(data, config.requests) for data in selected):
            found.append((OpaqueConfig(config.driver, config.parameters, source=FROM_CLAIM), []))
            found[-1][1].extend(config.requests)
    configs = []
    for config, requests in found:
        applies_to_all = all(_names(data, requests) for data in selected)
        names = () if applies_to_all else tuple(requests)
        configs.append(OpaqueConfig(config.driver, config.parameters, names, config.source))
    return tuple(configs)


def _names(data: RequestData, requests: Sequence[str]) -> bool:
    """Whether `requests` name the request of `data`, or the entry chosen for it."""
    return data.request in requests or (bool(data.subrequest) and data.name in requests)


def _node_selector(
    chosen: Sequence[Chosen], node_name: str, slice_selections: Mapping[str, NodeSelection]
) -> NodeSelector | None:
    fields: list[SelectorRequirement] = []
    expressions: list[SelectorRequirement] = []
    for entry in chosen:
        device = entry.candidate.entry.device
        selection = device.node_selection or slice_selections.get(entry.candidate.entry.slice_name)
        if selection is None or selection.node_name or device.binds_to_node:
            return node_local(node_name)
        selector = selection.node_selector
        if selector is not None and selector.terms:
            term = selector.terms[0]
            _add_new(term.fields, fields)
            _add_new(term.expressions, expressions)
    if fields or expressions:
        return NodeSelector((NodeSelectorTerm(tuple(expressions), tuple(fields)),))
    return None


def _add_new(requirements: Sequence[SelectorRequirement], into: list[SelectorRequirement]) -> None:
    """`addNewNodeSelectorRequirements`: a requirement is new unless one with its key, operator
    and set of values is there."""
    for requirement in requirements:
        if not any(
            known.key == requirement.key
            and known.operator == requirement.operator
            and set(known.values) == set(requirement.values)
            for known in into
        ):
            into.append(requirement)
