"""The fault suite's invariants over ResourceClaims and the pods using them, pure functions over
the API's JSON (`hack.faults.dra_scenarios` and `hack.faults.dra_faults` list the objects).

- `device_shared` (`check_claims`): one device allocated to two claims that conflict (either
  holds it whole, or both the same share; an `adminAccess` result takes nothing), as
  `scheduler.core.conflicts.find_device_conflicts` judges it. One list of claims is one
  revision of the store, so this holds at any instant, mid-fault too.
- `claim_stranded` (`check_claims`): a claim allocated and reserved for a pod that exists and is
  not bound: the undo of a failed PreBind or Binding left it behind and nothing retries the pod
  onto its node. At rest only; mid-fault (a retry may be writing the claim at the moment of the
  list) `check_held` judges only claims unchanged between two lists.
- `claim_unreserved` (`check_unreserved`): a claim allocated with an empty `reservedFor` in two
  lists in a row, a scheduling cycle or more apart. The resourceclaim controller deallocates a
  claim only when its last consumer goes (the reserved -> unreserved transition,
  k8s.io/kubernetes@v1.37.2 pkg/controller/resourceclaim/controller.go `syncClaim`), so one that
  a scheduler allocated and never reserved, or released without deallocating, keeps its devices
  for good.
- `pod_without_claims` (`check_pods_claims`): a pod of ours that is bound (`spec.nodeName`), not
  terminating, whose claims are not all allocated and reserved for it: every claim its
  `status.resourceClaimStatuses` names (each template claim must have an entry), every
  `resourceClaimName` of its spec, and the claim of `status.extendedResourceClaimStatus`. The
  scheduler writes claims before the Binding, so no list taken at rest may show otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from hack.faults.invariants import FINISHED, Violation

Obj = Mapping[str, Any]


def claim_key(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _devices(allocation: Obj) -> dict[tuple[str, str, str], set[str]]:
    """Device -> the shares the allocation takes of it ("" for the whole device)."""
    shares: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for result in (allocation.get("devices") or {}).get("results") or ():
        if not result.get("adminAccess"):
            device = (str(result["driver"]), str(result["pool"]), str(result["device"]))
            shares[device].add(str(result.get("shareID") or ""))
    return shares


def _stranded(claim: Obj, bound: Mapping[str, bool]) -> Violation | None:
    status = claim.get("status") or {}
    waiting = [
        str(ref.get("name"))
        for ref in status.get("reservedFor") or ()
        if ref.get("resource") == "pods" and bound.get(str(ref.get("uid"))) is False
    ]
    if not waiting:
        return None
    detail = f"allocated and reserved for unbound pods {sorted(waiting)}"
    return Violation("claim_stranded", claim_key(claim), detail)


def bound_by_uid(pods: Iterable[Obj]) -> dict[str, bool]:
    """Pod UID -> whether the pod is bound."""
    return {_uid(pod): bool((pod.get("spec") or {}).get("nodeName")) for pod in pods}


def check_claims(claims: Iterable[Obj], pods: Iterable[Obj]) -> list[Violation]:
    """`device_shared` and `claim_stranded` (module docstring) over ResourceClaims and the pods
    of their namespaces."""
    bound = bound_by_uid(pods)
    holders: dict[tuple[str, str, str], list[tuple[str, set[str]]]] = defaultdict(list)
    found = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        for device, taken in _devices(allocation).items():
            holders[device].append((claim_key(claim), taken))
        stranded = _stranded(claim, bound)
        if stranded is not None:
            found.append(stranded)
    for device, held in sorted(holders.items()):
        clashing: set[str] = set()
        for index, (first, first_shares) in enumerate(held):
            for second, second_shares in held[index + 1 :]:
                if "" in first_shares or "" in second_shares or first_shares & second_shares:
                    clashing.update((first, second))
        if clashing:
            found.append(Violation("device_shared", "/".join(device), f"claims {sorted(clashing)}"))
    return found


def _version(claim: Obj) -> tuple[str, str]:
    return _uid(claim), str((claim.get("metadata") or {}).get("resourceVersion", ""))


def check_held(first: Iterable[Obj], second: Iterable[Obj], pods: Iterable[Obj]) -> list[Violation]:
    """`claim_stranded` while a fault goes on: only claims of `second` that are unchanged since
    `first` (same UID and resourceVersion) count, so a retry writing a claim between its
    allocation and its undo is not taken for a leak. `pods` are listed after `second`."""
    before = {_version(claim) for claim in first}
    bound = bound_by_uid(pods)
    found = []
    for claim in second:
        if _version(claim) in before and (claim.get("status") or {}).get("allocation"):
            stranded = _stranded(claim, bound)
            if stranded is not None:
                found.append(stranded)
    return found


def unreserved(claims: Iterable[Obj]) -> dict[str, str]:
    """UID -> key of each claim allocated with nobody in `reservedFor`."""
    return {
        _uid(claim): claim_key(claim)
        for claim in claims
        if (claim.get("status") or {}).get("allocation")
        and not (claim.get("status") or {}).get("reservedFor")
    }


def check_unreserved(first: Iterable[Obj], second: Iterable[Obj]) -> list[Violation]:
    """`claim_unreserved`: a claim allocated and unreserved in both lists (module docstring)."""
    before = unreserved(first)
    return [
        Violation("claim_unreserved", key, "allocated, reserved for nobody, in two lists in a row")
        for uid, key in sorted(unreserved(second).items(), key=lambda item: item[1])
        if uid in before
    ]


def claim_names(pod: Obj) -> tuple[set[str], list[str]]:
    """The claims `pod` needs by name, and the template claims of its spec that its status does
    not name yet."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {str(s.get("name")): s.get("resourceClaimName") for s in _entries(status)}
    names: set[str] = set()
    missing = []
    for entry in spec.get("resourceClaims") or ():
        if entry.get("resourceClaimName"):
            names.add(str(entry["resourceClaimName"]))
        elif str(entry.get("name")) not in generated:
            missing.append(str(entry.get("name")))
    names.update(str(name) for name in generated.values() if name)
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.add(str(extended))
    return names, missing


def _entries(status: Obj) -> list[Obj]:
    entries: list[Obj] = status.get("resourceClaimStatuses") or []
    return entries


def check_pods_claims(
    pods: Iterable[Obj], claims: Iterable[Obj], scheduler_names: Iterable[str]
) -> list[Violation]:
    """`pod_without_claims` (module docstring) over the pods of `scheduler_names`."""
    ours = set(scheduler_names)
    by_key = {claim_key(claim): claim for claim in claims}
    found = []
    for pod in pods:
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("schedulerName") not in ours or not spec.get("nodeName"):
            continue
        if metadata.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        names, missing = claim_names(pod)
        wrong = [f"template claim {entry!r} not generated" for entry in missing]
        for name in sorted(names):
            claim = by_key.get(f"{metadata.get('namespace', '')}/{name}")
            status = (claim or {}).get("status") or {}
            if claim is None:
                wrong.append(f"{name} missing")
            elif not status.get("allocation"):
                wrong.append(f"{name} not allocated")
            elif _uid(pod) not in {str(r.get("uid")) for r in status.get("reservedFor") or ()}:
                wrong.append(f"{name} not reserved for it")
        if wrong:
            subject = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
            found.append(Violation("pod_without_claims", subject, "; ".join(wrong)))
    return found
