"""Whether a device may serve a request regardless of what else is allocated: the class's
selectors, then the request's, then the device's own node selection (a slice with
`perDeviceNodeSelection`), memoized per device and request for one allocation attempt, as
`isSelectable` and `selectorsMatch` (k8s.io/dynamic-resource-allocation@v0.37.2 structured/
internal/incubating/allocator_incubating.go) do; and whether a device's taints keep it from a
request (`taintPreventsAllocation`: only NoSchedule and NoExecute taints, unless one of the
request's tolerations tolerates them).

The selectors go to `SelectorMatcher`; a `SelectorError` propagates, its message prefixed with
upstream's words for where it happened ("class <c>: selector #<i> on device <driver/pool/dev>: "
or "claim <ns>/<name>: selector #<i> on device ...: ").
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.dra.allocator_requests import Candidate, RequestData
from scheduler.dra.selectors import SelectorError, SelectorMatcher
from scheduler.model.claim_specs import RequestSpec
from scheduler.model.device_taints import tolerates
from scheduler.model.devices import Device

MatchKey = tuple[tuple[str, str, str], int, int, int]
"""(device ID, claim index, request index, entry index)."""


def taint_prevents(device: Device, spec: RequestSpec) -> bool:
    """Whether a NoSchedule or NoExecute taint of `device` is not tolerated by `spec`."""
    return any(
        taint.blocks_allocation
        and not any(tolerates(toleration, taint) for toleration in spec.tolerations)
        for taint in device.taints
    )


class Selection:
    """Selector matching for one allocation attempt on one node."""

    def __init__(
        self,
        matcher: SelectorMatcher,
        node_name: str,
        labels: Mapping[str, str],
        claim_labels: tuple[str, ...],
    ) -> None:
        self._matcher = matcher
        self._node_name = node_name
        self._labels = labels
        self._claim_labels = claim_labels
        self._memo: dict[MatchKey, bool] = {}

    def selectable(self, data: RequestData, candidate: Candidate) -> bool:
        key = (candidate.id, data.claim_index, data.request_index, data.sub_index)
        known = self._memo.get(key)
        if known is None:
            known = self._evaluate(data, candidate)
            self._memo[key] = known
        return known

    def _evaluate(self, data: RequestData, candidate: Candidate) -> bool:
        device = candidate.entry.device
        where = f"class {data.device_class.name}"
        if not self._all_match(data.device_class.selectors, where, candidate):
            return False
        where = f"claim {self._claim_labels[data.claim_index]}"
        if not self._all_match(data.spec.selectors, where, candidate):
            return False
        selection = device.node_selection
        return selection is None or selection.matches(self._node_name, self._labels)

    def _all_match(self, expressions: tuple[str, ...], where: str, candidate: Candidate) -> bool:
        pool = candidate.pool
        memo_key = (pool.id, pool.generation, candidate.entry.slice_name, candidate.id[2])
        for index, expression in enumerate(expressions):
            try:
                matches = self._matcher.matches(
                    expression, candidate.id[0], candidate.entry.device, memo_key
                )
            except SelectorError as error:
                raise SelectorError(
                    f"{where}: selector #{index} on device {candidate.name}: {error}"
                ) from error
            if not matches:
                return False
        return True
