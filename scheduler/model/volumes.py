"""PersistentVolumeClaims, PersistentVolumes and StorageClasses as VolumeBinding reads them.

Data and matching, no numpy and no API calls:

- `parse_claim`, `parse_volume`, `parse_class` turn the informers' JSON into frozen records (never
  raising; a malformed field becomes an error string on the record and a documented fallback).
- `VolumeStore` keeps them, plus the assumptions of the scheduling cycle: when a pod is placed,
  the PVs it pre-binds (`spec.claimRef`) and the claims it marks for provisioning
  (`volume.kubernetes.io/selected-node`) are assumed at once, so the next cycle never offers the
  same PV to another claim, before the writes go out. An assumption ends when the informer
  delivers a newer version of the object (the write, or someone else's change, landed) or when
  `revert(pod_key)` gives it back (the pod's binding failed before the write was seen).
- `find_matching_volume` is kube-scheduler's FindMatchingVolume for one claim on one node, with
  the node's fit of each PV's nodeAffinity given as a predicate; `match_claims` assigns distinct
  PVs to a pod's claims, smallest claim first, each taking the smallest fitting PV.
- `ClaimHandler`, `VolumeHandler`, `ClassHandler` feed the informers' events into the store and
  retry the unschedulable pods when something scheduling reads changed.

Semantics follow kube-scheduler's VolumeBinding (pkg/scheduler/framework/plugins/volumebinding):
a claim is bound when it names a volume and carries `pv.kubernetes.io/bind-completed`; an unbound
claim waits for its first consumer when its StorageClass says `WaitForFirstConsumer` and it names
no volume yet; every other unbound claim (Immediate, no class, a class that does not exist, or
pre-bound by name but not yet bound) is an "unbound immediate" claim, which the PV controller,
not the scheduler, must bind.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

from scheduler.model.fields import (
    FieldError,
    NodeSelectorTerm,
    SelectorRequirement,
    parse_node_selector_term,
)
from scheduler.model.pod_affinity import LabelSelector, parse_label_selector
from scheduler.model.quantity import QuantityError, base_units
from topology.text import quote

BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
FILESYSTEM = "Filesystem"
AVAILABLE = "Available"
log = structlog.get_logger("gpu-scheduler.model.volumes")
MAX_ERRORS = 5
"""Errors kept per object (the rest are dropped; the first ones name the problem)."""


@dataclass(frozen=True)
class ClaimRef:
    """A PV's spec.claimRef: the claim it is (pre-)bound to; `uid` "" matches any UID."""

    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True)
class Claim:
    """One PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    class_name: str = ""
    """The beta annotation, else spec.storageClassName ("" when neither)."""
    volume_name: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    request: int = 0
    """spec.resources.requests.storage in bytes (0 when absent)."""
    selector: LabelSelector | None = None
    terminating: bool = False
    errors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound, as kube-scheduler's isPVCFullyBound: a volume name and bind-completed."""
        return bool(self.volume_name) and BIND_COMPLETED_ANNOTATION in self.annotations


@dataclass(frozen=True)
class Volume:
    """One PersistentVolume. `node_terms` None: no nodeAffinity (every node fits)."""

    name: str
    uid: str = ""
    resource_version: str = ""
    class_name: str = ""
    capacity: int = 0
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    phase: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    claim_ref: ClaimRef | None = None
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    terminating: bool = False
    errors: tuple[str, ...] = ()

    def bound_to(self, claim: Claim) -> bool:
        """kube-scheduler's IsVolumeBoundToClaim."""
        ref = self.claim_ref
        return (
            ref is not None
            and ref.namespace == claim.namespace
            and ref.name == claim.name
            and (not ref.uid or ref.uid == claim.uid)
        )


@dataclass(frozen=True)
class StorageClass:
    """One StorageClass. `allowed_topologies` empty: every node is allowed."""

    name: str
    provisioner: str = ""
    binding_mode: str = "Immediate"
    allowed_topologies: tuple[NodeSelectorTerm, ...] = ()

    @property
    def wait_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        """Whether dynamic provisioning can give a claim of this class a volume."""
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


# -- parsing ---------------------------------------------------------------------------------


def _map(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _strings(raw: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _text(raw: object) -> str:
    return raw if isinstance(raw, str) else ""


def _modes(raw: object) -> frozenset[str]:
    return frozenset(str(m) for m in raw) if isinstance(raw, list) else frozenset()


def _storage(raw: object, where: str, errors: list[str]) -> int:
    value = _map(raw).get("storage")
    if value is None:
        return 0
    try:
        return base_units(value)
    except (QuantityError, TypeError, ValueError):
        errors.append(f"{where}.storage: not a quantity: {quote(value)}")
        return 0


def _class_name(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    beta = _strings(metadata.get("annotations")).get(BETA_CLASS_ANNOTATION)
    return beta if beta is not None else _text(spec.get("storageClassName"))


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    """A Claim from a PersistentVolumeClaim's JSON. Never raises."""
    metadata, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    errors: list[str] = []
    request = _storage(_map(spec.get("resources")).get("requests"), "spec.resources", errors)
    selector_errors: list[FieldError] = []
    selector = parse_label_selector(spec.get("selector"), "spec.selector", selector_errors)
    errors.extend(str(e) for e in selector_errors)
    if selector is None and spec.get("selector") is not None:
        selector = LabelSelector((SelectorRequirement("", "In", ()),))  # matches no volume
    return Claim(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        resource_version=_text(metadata.get("resourceVersion")),
        class_name=_class_name(metadata, spec),
        volume_name=_text(spec.get("volumeName")),
        annotations=_strings(metadata.get("annotations")),
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=_text(spec.get("volumeMode")) or FILESYSTEM,
        request=request,
        selector=selector,
        terminating=metadata.get("deletionTimestamp") is not None,
        errors=tuple(errors[:MAX_ERRORS]),
    )


def _node_terms(raw: object, where: str, errors: list[str]) -> tuple[NodeSelectorTerm, ...]:
    """nodeSelectorTerms (matchExpressions, matchFields) with objects' own rules."""
    field_errors: list[FieldError] = []
    terms = tuple(
        parse_node_selector_term(term, f"{where}[{i}]", field_errors)
        for i, term in enumerate(raw if isinstance(raw, list) else ())
        if isinstance(term, Mapping)
    )
    errors.extend(str(e) for e in field_errors)
    return terms


def parse_volume(obj: Mapping[str, Any]) -> Volume:
    """A Volume from a PersistentVolume's JSON. Never raises. A nodeAffinity whose terms do not
    parse keeps the terms that did (a bad requirement is dropped, so it matches no node only if
    nothing is left: an empty term matches nothing)."""
    metadata, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    errors: list[str] = []
    ref_raw = spec.get("claimRef")
    ref = None
    if isinstance(ref_raw, Mapping):
        ref = ClaimRef(
            _text(ref_raw.get("namespace")), _text(ref_raw.get("name")), _text(ref_raw.get("uid"))
        )
    required = _map(_map(spec.get("nodeAffinity")).get("required"))
    terms = None
    if required:
        where = "spec.nodeAffinity.required.nodeSelectorTerms"
        terms = _node_terms(required.get("nodeSelectorTerms"), where, errors)
    return Volume(
        name=_text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        resource_version=_text(metadata.get("resourceVersion")),
        class_name=_class_name(metadata, spec),
        capacity=_storage(spec.get("capacity"), "spec.capacity", errors),
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=_text(spec.get("volumeMode")) or FILESYSTEM,
        phase=_text(_map(obj.get("status")).get("phase")),
        labels=_strings(metadata.get("labels")),
        claim_ref=ref,
        node_terms=terms,
        terminating=metadata.get("deletionTimestamp") is not None,
        errors=tuple(errors[:MAX_ERRORS]),
    )


def parse_class(obj: Mapping[str, Any]) -> StorageClass:
    """A StorageClass from its JSON; allowedTopologies' matchLabelExpressions become `In`
    requirements (a topology term ANDs them; the terms are ORed, like node selector terms)."""
    metadata = _map(obj.get("metadata"))
    topologies = []
    for term in obj.get("allowedTopologies") or ():
        expressions = tuple(
            SelectorRequirement(
                _text(e.get("key")), "In", tuple(str(v) for v in e.get("values") or ())
            )
            for e in _map(term).get("matchLabelExpressions") or ()
            if isinstance(e, Mapping)
        )
        topologies.append(NodeSelectorTerm(expressions, ()))
    return StorageClass(
        name=_text(metadata.get("name")),
        provisioner=_text(obj.get("provisioner")),
        binding_mode=_text(obj.get("volumeBindingMode")) or "Immediate",
        allowed_topologies=tuple(topologies),
    )


def pod_claims(spec: Mapping[str, Any], errors: list[FieldError]) -> tuple[str, ...]:
    """Claim names of spec.volumes[*].persistentVolumeClaim, in order, without duplicates."""
    found: list[str] = []
    volumes = spec.get("volumes")
    for index, volume in enumerate(volumes if isinstance(volumes, list) else ()):
        source = _map(volume).get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
        if source is None:
            continue
        name = _map(source).get("claimName")
        if not isinstance(name, str) or not name:
            where = f"spec.volumes[{index}].persistentVolumeClaim.claimName"
            errors.append(FieldError(where, "is required"))
        elif name not in found:
            found.append(name)
    return tuple(found)


# -- matching --------------------------------------------------------------------------------


def find_matching_volume(
    claim: Claim,
    volumes: Iterable[Volume],
    fits: Callable[[Volume], bool],
    excluded: Collection[str] = (),
) -> Volume | None:
    """The PV kube-scheduler's FindMatchingVolume gives `claim` on a node (None: none).

    `volumes` are the PVs of the claim's class; `fits(pv)` whether the node satisfies the PV's
    nodeAffinity. A PV pre-bound to the claim (its claimRef) wins whatever its phase, if it fits
    the node; if it does not, the claim gets no PV on this node. Otherwise the smallest
    Available PV that is not bound to another claim, not excluded, not being deleted, of the
    claim's class, large enough, of the same volume mode, with every access mode the claim asks
    for, matching the claim's selector and fitting the node; ties go to the first in order."""
    best: Volume | None = None
    for volume in volumes:
        if volume.name in excluded:
            continue
        if volume.claim_ref is not None and not volume.bound_to(claim):
            continue
        if volume.capacity < claim.request or volume.volume_mode != claim.volume_mode:
            continue
        if volume.terminating:
            continue
        if volume.bound_to(claim):
            return volume if fits(volume) else None
        if volume.phase != AVAILABLE:
            continue
        if claim.selector is not None and not claim.selector.matches(volume.labels):
            continue
        if volume.class_name != claim.class_name or not claim.access_modes <= volume.access_modes:
            continue
        if not fits(volume):
            continue
        if best is None or volume.capacity < best.capacity:
            best = volume
    return best


def match_claims(
    claims: Sequence[Claim],
    volumes_of: Callable[[Claim], Sequence[Volume]],
    fits: Callable[[Volume], bool],
) -> tuple[dict[str, Volume], list[Claim]]:
    """Distinct PVs for `claims` on one node, as kube-scheduler's findMatchingVolumes: claims
    in increasing request order (stable), each taking `find_matching_volume` among the PVs not
    yet chosen. Returns claim key -> PV, and the claims left without one (to provision)."""
    chosen: dict[str, Volume] = {}
    taken: set[str] = set()
    left: list[Claim] = []
    for claim in sorted(claims, key=lambda c: c.request):
        volume = find_matching_volume(claim, volumes_of(claim), fits, taken)
        if volume is None:
            left.append(claim)
            continue
        chosen[claim.key] = volume
        taken.add(volume.name)
    return chosen, left


# -- the store -------------------------------------------------------------------------------


@dataclass
class _Assumed:
    """An object as the scheduler assumes it, over the informer's version `base_version`."""

    pod_key: str
    base_version: str
    obj: Claim | Volume


class VolumeStore:
    """Claims, volumes and classes from the informers, with the cycle's assumptions on top."""

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self._by_class: dict[str, set[str]] = {}
        self._assumed_claims: dict[str, _Assumed] = {}
        self._assumed_volumes: dict[str, _Assumed] = {}
        self.generation = 0
        """Grows on every change seen or assumed (lets callers cache per-state work)."""

    # -- reads (assumptions applied) -------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> Claim | None:
        key = f"{namespace}/{name}"
        assumed = self._assumed_claims.get(key)
        if assumed is not None and isinstance(assumed.obj, Claim):
            return assumed.obj
        return self.claims.get(key)

    def volume(self, name: str) -> Volume | None:
        assumed = self._assumed_volumes.get(name)
        if assumed is not None and isinstance(assumed.obj, Volume):
            return assumed.obj
        return self.volumes.get(name)

    def volumes_of_class(self, class_name: str) -> list[Volume]:
        """PVs of the class, by name (a fixed order, so choices are deterministic)."""
        found = (self.volume(name) for name in sorted(self._by_class.get(class_name, ())))
        return [v for v in found if v is not None]

    # -- informer side -----------------------------------------------------------------------

    def put_claim(self, claim: Claim) -> bool:
        """Store the informer's claim; True when anything scheduling reads changed."""
        self._supersede(self._assumed_claims, claim.key, claim.resource_version)
        old = self.claims.get(claim.key)
        self.claims[claim.key] = claim
        return self._changed(old != replace(claim, resource_version=_rv(old)))

    def drop_claim(self, key: str) -> bool:
        self._assumed_claims.pop(key, None)
        return self._changed(self.claims.pop(key, None) is not None)

    def put_volume(self, volume: Volume) -> bool:
        self._supersede(self._assumed_volumes, volume.name, volume.resource_version)
        old = self.volumes.get(volume.name)
        if old is not None and old.class_name != volume.class_name:
            self._by_class.get(old.class_name, set()).discard(volume.name)
        self.volumes[volume.name] = volume
        self._by_class.setdefault(volume.class_name, set()).add(volume.name)
        return self._changed(old != replace(volume, resource_version=_rv(old)))

    def drop_volume(self, name: str) -> bool:
        self._assumed_volumes.pop(name, None)
        old = self.volumes.pop(name, None)
        if old is not None:
            self._by_class.get(old.class_name, set()).discard(name)
        return self._changed(old is not None)

    def put_class(self, storage_class: StorageClass) -> bool:
        old = self.classes.get(storage_class.name)
        self.classes[storage_class.name] = storage_class
        return self._changed(old != storage_class)

    def drop_class(self, name: str) -> bool:
        return self._changed(self.classes.pop(name, None) is not None)

    def _changed(self, changed: bool) -> bool:
        if changed:
            self.generation += 1
        return changed

    @staticmethod
    def _supersede(assumed: dict[str, _Assumed], key: str, version: str) -> None:
        """A newer informer version than the one an assumption was made over ends it."""
        found = assumed.get(key)
        if found is not None and found.base_version != version:
            del assumed[key]

    # -- cycle side --------------------------------------------------------------------------

    def assume_volume(self, pod_key: str, volume: Volume) -> None:
        """`volume` (as the pod's pre-bind will write it) replaces the informer's view."""
        base = self.volumes.get(volume.name)
        self._assumed_volumes[volume.name] = _Assumed(pod_key, _rv(base), volume)
        self.generation += 1

    def assume_claim(self, pod_key: str, claim: Claim) -> None:
        base = self.claims.get(claim.key)
        self._assumed_claims[claim.key] = _Assumed(pod_key, _rv(base), claim)
        self.generation += 1

    def revert(self, pod_key: str) -> int:
        """Drop the assumptions `pod_key`'s cycle made that the informer has not superseded;
        returns how many."""
        dropped = 0
        for assumed in (self._assumed_claims, self._assumed_volumes):
            for key in [k for k, a in assumed.items() if a.pod_key == pod_key]:
                del assumed[key]
                dropped += 1
        if dropped:
            self.generation += 1
        return dropped

    def assumed_count(self) -> int:
        return len(self._assumed_claims) + len(self._assumed_volumes)


def _rv(obj: Claim | Volume | None) -> str:
    return obj.resource_version if obj is not None else ""


# -- informer handlers -------------------------------------------------------------------------

CLAIM_EVENT = "PersistentVolumeClaimChange"
VOLUME_EVENT = "PersistentVolumeChange"
CLASS_EVENT = "StorageClassChange"


class _Requeue(Protocol):
    def move_all_to_active_or_backoff(self, event: str) -> int: ...


class _Handler:
    """Feeds one kind into the store; a change scheduling reads retries the unschedulable pods
    (kube-scheduler's queueing hints for PVC, PV and StorageClass events). An object with
    malformed fields is logged once per distinct problem."""

    event = ""

    def __init__(self, store: VolumeStore, queue: _Requeue | None = None) -> None:
        self.store = store
        self.queue = queue
        self._reported: dict[str, tuple[str, ...]] = {}

    def _put(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _drop(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def _changed(self, changed: bool) -> None:
        if changed and self.queue is not None:
            self.queue.move_all_to_active_or_backoff(self.event)

    def _report(self, key: str, errors: tuple[str, ...]) -> None:
        if errors and self._reported.get(key) != errors:
            log.warning("volume_object_invalid", kind=self.event, object=key, errors=list(errors))
        if errors:
            self._reported[key] = errors
        else:
            self._reported.pop(key, None)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._changed(self._put(obj))

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._changed(self._put(new))

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self._changed(self._drop(obj))


def _name_of(obj: Mapping[str, Any]) -> str:
    return _text(_map(obj.get("metadata")).get("name"))


class ClaimHandler(_Handler):
    """Informer handler for PersistentVolumeClaims of every namespace."""

    event = CLAIM_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        claim = parse_claim(obj)
        self._report(claim.key, claim.errors)
        return self.store.put_claim(claim)

    def _drop(self, obj: Mapping[str, Any]) -> bool:
        claim = parse_claim(obj)
        self._reported.pop(claim.key, None)
        return self.store.drop_claim(claim.key)


class VolumeHandler(_Handler):
    """Informer handler for PersistentVolumes."""

    event = VOLUME_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        volume = parse_volume(obj)
        self._report(volume.name, volume.errors)
        return self.store.put_volume(volume)

    def _drop(self, obj: Mapping[str, Any]) -> bool:
        self._reported.pop(_name_of(obj), None)
        return self.store.drop_volume(_name_of(obj))


class ClassHandler(_Handler):
    """Informer handler for StorageClasses."""

    event = CLASS_EVENT

    def _put(self, obj: Mapping[str, Any]) -> bool:
        return self.store.put_class(parse_class(obj))

    def _drop(self, obj: Mapping[str, Any]) -> bool:
        return self.store.drop_class(_name_of(obj))
