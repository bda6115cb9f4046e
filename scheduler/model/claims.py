"""ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1) as records, and the claim
names a pod's `spec.resourceClaims` resolve to.

- `parse_resource_claim`: the spec (`scheduler.model.claim_specs`), the status
  (`scheduler.model.allocations`), the finalizers, the controller owner and whether the claim is
  being deleted; `status.reservedFor` without an allocation is an error, as the API's validation
  has it.
- `parse_resource_claim_template`: a template's `spec.spec`, the same claim spec.
- `pod_claim_names`: `resourceclaim.Name` (k8s.io/dynamic-resource-allocation@v0.37.2
  resourceclaim/resourceclaim.go) for each entry of a pod's `spec.resourceClaims`.

Parsers never raise: a bad field is a `FieldError` naming its path (a claim with errors is not
to be allocated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.model.allocations import (
    Allocation,
    ConsumerRef,
    parse_allocation,
    parse_reserved_for,
)
from scheduler.model.claim_specs import ClaimSpec, gather_request_names, parse_claim_spec
from scheduler.model.dra_fields import (
    OwnerRef,
    bounded_errors,
    dns_label_problem,
    list_at,
    meta_at,
    report,
    text_at,
)
from scheduler.model.fields import FieldError, object_at, text_of
from topology.text import clip

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""Marks the claim a scheduler made for a pod's extended resources backed by a DeviceClass."""

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
"""The finalizer the allocating scheduler adds; the resourceclaim controller deallocates only
claims that carry it."""


@dataclass(frozen=True)
class ResourceClaim:
    """One ResourceClaim. `errors` non-empty: not to be allocated."""

    namespace: str
    name: str
    spec: ClaimSpec
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    finalizers: tuple[str, ...] = ()
    deleting: bool = False
    """metadata.deletionTimestamp is set: no pod may start using it."""
    controller: OwnerRef | None = None
    """The owner a claim generated from a template has: its pod."""
    uid: str = ""
    resource_version: str = ""
    errors: tuple[FieldError, ...] = ()
    extended: bool = False
    """Annotated `resource.kubernetes.io/extended-resource-claim: "true"`: made by a scheduler
    for its controller pod's extended resources (`scheduler.dra.extended`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        """`IsReservedForPod` for the pod with `uid` (a PodGroup's reservation not counted)."""
        return any(ref.uid == uid for ref in self.reserved_for)


@dataclass(frozen=True)
class ResourceClaimTemplate:
    """One ResourceClaimTemplate: the spec of the claims generated from it for pods."""

    namespace: str
    name: str
    spec: ClaimSpec
    uid: str = ""
    resource_version: str = ""
    errors: tuple[FieldError, ...] = ()


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    """A ResourceClaim from its JSON. Never raises."""
    errors: list[FieldError] = []
    meta = meta_at(obj, errors)
    spec = parse_claim_spec(obj.get("spec"), "spec", errors)
    status = object_at(obj.get("status"), "status", errors)
    allocation = parse_allocation(
        status.get("allocation"), "status.allocation", gather_request_names(obj.get("spec")), errors
    )
    reserved = parse_reserved_for(status.get("reservedFor"), "status.reservedFor", errors)
    if reserved and allocation is None:
        report(errors, "status.reservedFor", "must be empty while the claim is not allocated")
    return ResourceClaim(
        namespace=meta.namespace,
        name=meta.name,
        spec=spec,
        allocation=allocation,
        reserved_for=reserved,
        finalizers=meta.finalizers,
        deleting=meta.deleting,
        controller=meta.controller,
        uid=meta.uid,
        resource_version=meta.resource_version,
        errors=bounded_errors(errors),
        extended=_annotated_extended(obj),
    )


def _annotated_extended(obj: Mapping[str, Any]) -> bool:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return (
        isinstance(annotations, Mapping)
        and annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"
    )


def parse_resource_claim_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    """A ResourceClaimTemplate from its JSON: `spec.spec` is the claim spec. Never raises."""
    errors: list[FieldError] = []
    meta = meta_at(obj, errors)
    outer = object_at(obj.get("spec"), "spec", errors)
    return ResourceClaimTemplate(
        namespace=meta.namespace,
        name=meta.name,
        spec=parse_claim_spec(outer.get("spec"), "spec.spec", errors),
        uid=meta.uid,
        resource_version=meta.resource_version,
        errors=bounded_errors(errors),
    )


CLAIM_NOT_CREATED = "ResourceClaim not created yet"
"""`resourceclaim.ErrClaimNotFound`'s text."""

UNSUPPORTED_POD_CLAIM = "none of the supported fields are set"
"""`resourceclaim.ErrAPIUnsupported`'s text."""

MAX_POD_CLAIMS = 128
"""Entries of spec.resourceClaims read (the API sets no limit)."""


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's spec.resourceClaims, resolved (`resourceclaim.Name`)."""

    name: str
    """The entry's name (what containers' resources.claims refer to)."""
    claim_name: str = ""
    """The ResourceClaim's name; "" while waiting, or when the controller did not create a
    claim for the entry on purpose (nothing to allocate)."""
    from_template: bool = False
    """Generated from a template: the claim must be owned by the pod (`IsForPod`)."""
    waiting: str = ""
    """kube-scheduler's message while the template's claim is not created yet, else ""."""


@dataclass(frozen=True)
class PodClaims:
    claims: tuple[PodClaim, ...] = ()
    errors: tuple[FieldError, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The ResourceClaims the pod uses now, in spec order."""
        return tuple(claim.claim_name for claim in self.claims if claim.claim_name)

    @property
    def waiting(self) -> str:
        """Why the pod cannot be scheduled yet (the first entry's reason, as kube-scheduler's
        PreEnqueue reports it), "" when every claim name is known."""
        return next((claim.waiting for claim in self.claims if claim.waiting), "")


def pod_claim_names(pod: Mapping[str, Any]) -> PodClaims:
    """The claims of a Pod's JSON: `spec.resourceClaims[*]` each resolved to `resourceClaimName`,
    or for `resourceClaimTemplateName` to the name the resourceclaim controller recorded in
    `status.resourceClaimStatuses` (the entry with the same name); with no entry yet, `waiting`
    says `pod "<namespace>/<name>": ResourceClaim not created yet`, the error PreEnqueue of
    kube-scheduler's DynamicResources plugin (k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/
    plugins/dynamicresources/dynamicresources.go, `foreachPodResourceClaim`) keeps the pod
    waiting with. An entry with neither field is an error and waits with upstream's
    `pod "<ns>/<name>", spec.resourceClaim "<entry>": none of the supported fields are set`.
    Never raises."""
    errors: list[FieldError] = []
    metadata = object_at(pod.get("metadata"), "metadata", errors)
    spec = object_at(pod.get("spec"), "spec", errors)
    status = object_at(pod.get("status"), "status", errors)
    pod_key = clip(
        f"{text_of(metadata.get('namespace') or '')}/{text_of(metadata.get('name') or '')}"
    )
    recorded: dict[str, str | None] = {}
    for index, item in enumerate(
        list_at(
            status.get("resourceClaimStatuses"),
            "status.resourceClaimStatuses",
            errors,
            MAX_POD_CLAIMS,
        )
    ):
        at = f"status.resourceClaimStatuses[{index}]"
        entry = object_at(item, at, errors)
        entry_name = text_at(entry.get("name"), f"{at}.name", errors, required=True)
        claim_name = text_at(entry.get("resourceClaimName"), f"{at}.resourceClaimName", errors)
        if entry_name and entry_name not in recorded:
            recorded[entry_name] = claim_name or None
    claims: list[PodClaim] = []
    for index, item in enumerate(
        list_at(spec.get("resourceClaims"), "spec.resourceClaims", errors, MAX_POD_CLAIMS)
    ):
        at = f"spec.resourceClaims[{index}]"
        entry = object_at(item, at, errors)
        name = text_at(
            entry.get("name"), f"{at}.name", errors, required=True, problem=dns_label_problem
        )
        direct = text_at(entry.get("resourceClaimName"), f"{at}.resourceClaimName", errors)
        template = text_at(
            entry.get("resourceClaimTemplateName"), f"{at}.resourceClaimTemplateName", errors
        )
        if direct and template:
            report(
                errors,
                at,
                "at most one of resourceClaimName and resourceClaimTemplateName may be set",
            )
        if direct:
            claims.append(PodClaim(name, direct))
        elif template and name in recorded:
            claims.append(PodClaim(name, recorded[name] or "", from_template=True))
        elif template:
            claims.append(PodClaim(name, waiting=f'pod "{pod_key}": {CLAIM_NOT_CREATED}'))
        else:
            report(errors, at, "one of resourceClaimName and resourceClaimTemplateName is required")
            waiting = f'pod "{pod_key}", spec.resourceClaim "{clip(name)}": {UNSUPPORTED_POD_CLAIM}'
            claims.append(PodClaim(name, waiting=waiting))
    return PodClaims(tuple(claims), bounded_errors(errors))
