"""gpu-scheduler's side of the DRA differential: feasible nodes and the failure message.

`build_dra_cache(state, skip, own_claims)` fills a cache the way the daemon's informer handlers
do: Nodes, bound Pods and Namespace labels as `ours.build_cache`, then every DeviceClass,
ResourceSlice, ResourceClaim and DeviceTaintRule through `scheduler.state.dra_handlers`. The
candidate's own claims (`own_claims`, keys "namespace/name": fresh ones and those the
resourceclaim controller made from its templates) enter unallocated and unreserved, and no
claim keeps a reservation for the candidate: that is the state both schedulers met when the pod
was created, whatever the reference has written since.

`dra_verdict(pod, cache, profile)` then follows the scheduling cycle's order
(`scheduler.core.cycle`): invalid or unsupported fields, the claims' PreFilter message
("0/N nodes are available: <message>."), the profile's filters, and for a pod that fits nowhere
the FitError-style message of `Diagnosis.message`. A selector that fails is the cycle's attempt
error (`error`), as kube-scheduler's Filter error.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hack.differential.ours import INVALID, UNSUPPORTED, build_cache
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from scheduler.model.objects import parse_pod
from scheduler.model.unsupported import unsupported_message
from scheduler.plugins.dynamic_resources import DynamicResourcesError
from scheduler.plugins.dynamic_resources import pre_filter as claims_pre_filter
from scheduler.state.cache import ClusterCache
from scheduler.state.dra_handlers import (
    DeviceClassHandler,
    DeviceTaintRuleHandler,
    ResourceClaimHandler,
    ResourceSliceHandler,
)

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class DraState:
    """Every object either scheduler's DRA filters read, as listed from the API server."""

    nodes: Sequence[JsonObject]
    pods: Sequence[JsonObject]
    namespaces: Sequence[JsonObject]
    classes: Sequence[JsonObject]
    slices: Sequence[JsonObject]
    claims: Sequence[JsonObject]
    rules: Sequence[JsonObject]


@dataclass(frozen=True)
class DraVerdict:
    feasible: frozenset[str]
    first_failure: Mapping[str, str]
    message: str
    """The failure message when no node fits ("" otherwise)."""
    error: str = ""
    """The attempt's error (a selector failed), "" when there was none."""


def claim_key(claim: Mapping[str, Any]) -> str:
    return f"{claim['metadata'].get('namespace')}/{claim['metadata'].get('name')}"


def as_before(claim: JsonObject, own: bool, pod_uid: str) -> JsonObject:
    """`claim` as it was before the candidate (uid `pod_uid`) was created: an own claim
    unallocated, any other without a reservation for the candidate."""
    found = copy.deepcopy(claim)
    status = found.get("status") or {}
    if own:
        found["status"] = {}
        found["metadata"].pop("finalizers", None)
    elif status.get("reservedFor"):
        status["reservedFor"] = [r for r in status["reservedFor"] if r.get("uid") != pod_uid]
    return found


def build_dra_cache(
    state: DraState, skip: str, own_claims: Iterable[str], pod_uid: str
) -> ClusterCache:
    """The cache of `state` without the pod keyed `skip` (see the module docstring)."""
    cache = build_cache(state.nodes, state.pods, state.namespaces, skip=skip)
    own = set(own_claims)
    store = cache.dra
    for device_class in state.classes:
        DeviceClassHandler(store).on_add(device_class)
    for resource_slice in state.slices:
        ResourceSliceHandler(store).on_add(resource_slice)
    for rule in state.rules:
        DeviceTaintRuleHandler(store).on_add(rule)
    for claim in state.claims:
        if made_for(claim, pod_uid):
            continue  # the reference's claim for the pod's extended resources: not there before
        ResourceClaimHandler(store).on_add(as_before(claim, claim_key(claim) in own, pod_uid))
    return cache


def made_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether `claim` is the extended-resource claim a scheduler made for the pod `pod_uid`."""
    metadata = claim.get("metadata") or {}
    return (
        bool(pod_uid)
        and any(
            ref.get("uid") == pod_uid and ref.get("controller")
            for ref in metadata.get("ownerReferences") or ()
        )
        and (metadata.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
    )


def dra_verdict(pod_obj: Mapping[str, Any], cache: ClusterCache, profile: Framework) -> DraVerdict:
    """Which nodes gpu-scheduler's cycle finds feasible for `pod_obj`, and its message."""
    pod = parse_pod(pod_obj)
    snapshot = Snapshot(cache)
    names = [cache.names[row] for row in np.flatnonzero(snapshot.valid)]
    head = f"0/{snapshot.node_count} nodes are available"
    if pod.errors or pod.unsupported:
        why = INVALID if pod.errors else UNSUPPORTED
        detail = "; ".join(str(e) for e in pod.errors) or ", ".join(pod.unsupported)
        message = (
            unsupported_message(pod.unsupported, snapshot.node_count)
            if not pod.errors
            else f"pod has invalid fields: {detail}"
        )
        return DraVerdict(frozenset(), {n: f"{why}: {detail}"[:200] for n in names}, message)
    problem, _ = claims_pre_filter(pod, cache.dra)
    if problem:
        blamed = {n: f"DynamicResources: {problem}" for n in names}
        return DraVerdict(frozenset(), blamed, f"{head}: {problem}.")
    try:
        evaluation = profile.evaluate(pod, snapshot, choose=False)
    except DynamicResourcesError as error:
        failed = f'running Filter plugin "DynamicResources": {error}'
        return DraVerdict(frozenset(), {}, "", error=failed)
    diagnosis = evaluation.diagnosis
    feasible = frozenset(cache.names[row] for row in np.flatnonzero(diagnosis.feasible))
    first: dict[str, str] = {}
    for rejection in diagnosis.rejections:  # in profile order
        for row in np.flatnonzero(rejection.failed & snapshot.valid):
            first.setdefault(cache.names[row], f"{rejection.plugin}: {rejection.reason}")
    message = "" if feasible else diagnosis.message(snapshot.valid)
    return DraVerdict(feasible, first, message)
