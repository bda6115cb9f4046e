"""Pods and nodes as the scheduler sees them, parsed once from the API's JSON.

`parse_pod` and `parse_node` take the plain dicts the informers deliver and return frozen
records. They never raise on bad content: every problem becomes a `FieldError` naming the object's
field (e.g. `spec.containers[0].resources.requests.cpu`), and the record carries a documented
fallback so the daemon can report the error and go on:

- a pod with an unparseable request is not scheduled (its errors are reported as a
  FailedScheduling event) until it is fixed;
- a node with an unparseable allocatable quantity offers 0 of that resource;
- a node with a malformed NVLink annotation is modelled with the default layout for its GPU count
  (see `topology.domains`), and the error is reported on the node;
- a node claiming more than `MAX_NODE_GPUS` GPUs is modelled with none, and says so;
- a GPU (or other extended-resource) request that differs from its limit is an error, as the API
  server's validation has it; the pod is not scheduled.

Messages quote offending values cut to `topology.text.MAX_ECHO` characters, and
`sorted_errors` keeps an object's summary within 1 KiB, whatever the input size.

Resource vectors are int64 arrays in the order of `RESOURCES`: CPU in millicores, the others in
base units (bytes, pods, GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import structlog

from scheduler.model.claims import PodClaims, pod_claim_names
from scheduler.model.extended_requests import ContainerRequests
from scheduler.model.fields import (
    FieldError,
    NodeSelectorTerm,
    Taint,
    Toleration,
    error_reporter,
    list_of,
    object_at,
    parse_node_selector_term,
    parse_timestamp,
    string_map,
    text_of,
)
from scheduler.model.gpu_sharing import GpuSharing, parse_gpu_sharing
from scheduler.model.pod_affinity import PodAffinity, parse_pod_affinity
from scheduler.model.podfields import HostPort, pod_features
from scheduler.model.preemption_policy import read_preemption_policy
from scheduler.model.resources import (
    GPU,
    GPU_RESOURCE,
    PODS,
    RESOURCES,
    ResourceVector,
    pod_requests,
    resource_amount,
    resource_list,
    vector_resource,
)
from scheduler.model.spread import SpreadConstraint, parse_spread_constraints
from scheduler.model.unsupported import unsupported_fields
from scheduler.model.volumes import pod_claims
from topology.domains import NVLINK_DOMAINS_ANNOTATION, NodeTopology, domains_for_node
from topology.mig import is_mig_resource
from topology.occupancy import GPUS_ANNOTATION, parse_gpus_annotation
from topology.text import clip, quote

NVLINK_DOMAIN_ANNOTATION = "gpu-scheduler.io/nvlink-domain"
"""Pod annotation with the NVLink domain the scheduler chose ("-1" when the GPUs span domains)."""


NVLINK_POLICY_ANNOTATION = "gpu-scheduler.io/nvlink-policy"
"""Pod annotation: "preferred" (default; spanning domains is allowed but scores lower) or
"required" (only nodes where the GPUs fit inside one domain)."""


NVLINK_POLICIES = ("preferred", "required")


FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod, parsed. `errors` non-empty means: report, do not schedule."""

    key: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    scheduler_name: str
    node_name: str
    phase: str
    priority: int
    priority_class: str
    created: datetime | None
    terminating: bool
    requests: ResourceVector  # (resources,)
    gpus: int
    mig: Mapping[str, int]
    gpu_indices: tuple[int, ...] | None
    nvlink_policy: str
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    required_terms: tuple[NodeSelectorTerm, ...]
    preferred_terms: tuple[tuple[int, NodeSelectorTerm], ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    errors: tuple[FieldError, ...] = ()
    scheduled_at: datetime | None = None
    """When the pod was bound: its PodScheduled=True condition's lastTransitionTime (the API
    server sets it on binding), else status.startTime; None while pending."""
    pod_affinity: PodAffinity | None = None
    """spec.affinity.podAffinity / podAntiAffinity terms; None when it has none."""
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    """spec.topologySpreadConstraints, matchLabelKeys merged (see `scheduler.model.spread`)."""
    scheduling_gates: tuple[str, ...] = ()
    """Names of spec.schedulingGates: while any is left the pod is not queued (PreEnqueue)."""
    host_ports: tuple[HostPort, ...] = ()
    """Host ports its containers and sidecars bind (NodePorts), sorted, without duplicates."""
    scalar: Mapping[str, int] = field(default_factory=dict)
    """Extended resources requested beyond `requests` and `mig` (example.com/foo, hugepages-*)."""
    unsupported: tuple[str, ...] = ()
    """Paths of fields it uses that the scheduler does not implement (plugins.unsupported)."""
    preemption_policy: str = "PreemptLowerPriority"
    """spec.preemptionPolicy: Never keeps the pod from preempting others
    (scheduler.victims.preemption)."""
    claims: tuple[str, ...] = ()
    """Names of the PersistentVolumeClaims its volumes use (VolumeBinding), in its namespace."""
    resource_claims: PodClaims | None = None
    """spec.resourceClaims resolved to ResourceClaim names (DynamicResources); None when the pod
    has none."""
    pod_group: str = ""
    """spec.schedulingGroup.podGroupName: the PodGroup (same namespace) it is a member of, "" for
    none (see `scheduler.gangs.tracker`)."""
    extended: tuple[ContainerRequests, ...] = ()
    """Its containers' extended requests, which a DeviceClass may serve (DynamicResources)."""

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    @property
    def holds_resources(self) -> bool:
        """Bound and not finished: counted against its node (terminating pods still count)."""
        return self.bound and not self.finished


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node, parsed."""

    name: str
    allocatable: ResourceVector  # (resources,)
    mig: Mapping[str, int]
    topology: NodeTopology
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    errors: tuple[FieldError, ...] = ()
    scalar: Mapping[str, int] = field(default_factory=dict)
    """Allocatable extended resources beyond `allocatable` and `mig` (example.com/foo)."""
    topology_annotations: Mapping[str, str] = field(default_factory=dict)
    """The node's `gpu-scheduler.io/` annotations (NVLink domains by GPU index or by ID), read
    again for the devices of a node whose GPUs are published through DRA."""
    sharing: GpuSharing | None = None
    """Time-slicing or MPS replicas of its GPUs (`scheduler.model.gpu_sharing`); the topology
    then has the physical GPUs."""


TOPOLOGY_ANNOTATION_PREFIX = "gpu-scheduler.io/"
MAX_TOPOLOGY_ANNOTATION = 16384  # characters of one kept (128 GPUs by UUID take about 5,300)

MAX_NODE_GPUS = 64
"""GPUs per node the topology model accepts (NVLink domains and GPU masks are per GPU)."""


MAX_NODE_MIG_PROFILES = 32
"""MIG profiles per node the model accepts (each is a column of the cache's MIG arrays; a GPU
has at most a handful)."""


def _node_affinity(
    spec: Mapping[str, Any], errors: list[FieldError]
) -> tuple[tuple[NodeSelectorTerm, ...], tuple[tuple[int, NodeSelectorTerm], ...]]:
    where = "spec.affinity.nodeAffinity"
    affinity = object_at(
        object_at(spec.get("affinity"), "spec.affinity", errors).get("nodeAffinity"), where, errors
    )
    required_raw = object_at(
        affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
        f"{where}.requiredDuringSchedulingIgnoredDuringExecution",
        errors,
    )
    required = tuple(
        parse_node_selector_term(
            term,
            f"{where}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]",
            errors,
        )
        for i, term in enumerate(list_of(required_raw.get("nodeSelectorTerms")))
        if isinstance(term, Mapping)
    )
    preferred = []
    for i, item in enumerate(
        list_of(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ):
        item_where = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        weight = item.get("weight") if isinstance(item, Mapping) else None
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            errors.append(FieldError(f"{item_where}.weight", f"must be 1-100, got {quote(weight)}"))
            continue
        preferred.append(
            (
                weight,
                parse_node_selector_term(
                    object_at(item.get("preference"), f"{item_where}.preference", errors),
                    f"{item_where}.preference",
                    errors,
                ),
            )
        )
    return required, tuple(preferred)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    found = []
    for item in list_of(spec.get("tolerations")):
        if not isinstance(item, Mapping):
            continue
        found.append(
            Toleration(
                key=text_of(item.get("key") or ""),
                operator=text_of(item.get("operator") or "Equal"),
                value=text_of(item.get("value") or ""),
                effect=text_of(item.get("effect") or ""),
            )
        )
    return tuple(found)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _priority(raw: object, errors: list[FieldError]) -> int:
    """spec.priority: an int32 (the API's type); 0 when absent or not an integer, and an error
    when out of range (numpy arrays of priorities must not overflow)."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        return 0
    if not INT32_MIN <= raw <= INT32_MAX:
        errors.append(FieldError("spec.priority", f"must be an int32, got {quote(raw)}"))
        return 0
    return raw


def parse_pod(obj: Mapping[str, Any]) -> PodInfo:
    """A PodInfo from a Pod's JSON. Never raises; problems land in `errors`."""
    errors: list[FieldError] = []
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    status = object_at(obj.get("status"), "status", errors)
    requests = pod_requests(spec, errors)
    features = pod_features(spec, requests, vector_resource, report=error_reporter(errors))
    vector = np.array([requests.get(name, 0) for name in RESOURCES], dtype=np.int64)
    vector[PODS] = 1
    mig: dict[str, int] = {}
    for name, amount in requests.items():
        if is_mig_resource(name) and amount:
            mig[name] = amount
    annotations = string_map(metadata.get("annotations"))
    gpus = int(vector[GPU])
    gpu_indices: tuple[int, ...] | None = None
    if GPUS_ANNOTATION in annotations:
        try:
            gpu_indices = parse_gpus_annotation(annotations[GPUS_ANNOTATION], 1 << 16)
        except ValueError as error:
            errors.append(FieldError(f"metadata.annotations[{GPUS_ANNOTATION}]", str(error)))
    policy = annotations.get(NVLINK_POLICY_ANNOTATION, "preferred")
    if policy not in NVLINK_POLICIES:
        errors.append(
            FieldError(
                f"metadata.annotations[{NVLINK_POLICY_ANNOTATION}]",
                f"must be one of {', '.join(NVLINK_POLICIES)}, got {quote(policy)}",
            )
        )
        policy = "preferred"
    required, preferred = _node_affinity(spec, errors)
    namespace = text_of(metadata.get("namespace") or "")
    labels = string_map(metadata.get("labels"))
    pod_affinity = parse_pod_affinity(spec, namespace, labels, errors)
    priority = _priority(spec.get("priority"), errors)
    name = text_of(metadata.get("name") or "")
    scheduled_at = None
    for condition in list_of(status.get("conditions")):
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") == "True"
        ):
            scheduled_at = parse_timestamp(condition.get("lastTransitionTime"))
    if scheduled_at is None and spec.get("nodeName"):
        scheduled_at = parse_timestamp(status.get("startTime"))
    spread = parse_spread_constraints(spec, labels, errors, FieldError)
    preemption_policy = read_preemption_policy(spec, error_reporter(errors))
    pod_group = _gang_of(spec, labels, f"{namespace}/{name}", errors)
    resource_claims = pod_claim_names(obj) if spec.get("resourceClaims") else None
    if resource_claims is not None:
        errors.extend(resource_claims.errors)
    return PodInfo(
        key=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        uid=text_of(metadata.get("uid") or ""),
        resource_version=text_of(metadata.get("resourceVersion") or ""),
        scheduler_name=text_of(spec.get("schedulerName") or "default-scheduler"),
        node_name=text_of(spec.get("nodeName") or ""),
        phase=text_of(status.get("phase") or "Pending"),
        priority=priority,
        priority_class=text_of(spec.get("priorityClassName") or ""),
        created=parse_timestamp(metadata.get("creationTimestamp")),
        terminating=metadata.get("deletionTimestamp") is not None,
        requests=vector,
        gpus=gpus,
        mig=mig,
        gpu_indices=gpu_indices,
        nvlink_policy=policy,
        tolerations=_tolerations(spec),
        node_selector=string_map(spec.get("nodeSelector")),
        required_terms=required,
        preferred_terms=preferred,
        labels=labels,
        annotations=annotations,
        errors=tuple(errors),
        scheduled_at=scheduled_at,
        pod_affinity=pod_affinity,
        spread_constraints=spread,
        scheduling_gates=features.scheduling_gates,
        host_ports=features.host_ports,
        scalar=features.scalar,
        unsupported=unsupported_fields(obj),
        preemption_policy=preemption_policy,
        claims=pod_claims(spec, errors),
        resource_claims=resource_claims,
        pod_group=pod_group,
        extended=features.extended,
    )


def _gang_of(
    spec: Mapping[str, Any], labels: Mapping[str, str], key: str, errors: list[FieldError]
) -> str:
    """`PodInfo.pod_group`: spec.schedulingGroup's PodGroup, else the coscheduling label's,
    else Kueue's pod group label's."""
    return kueue_pod_group(coscheduling_pod_group(key, _pod_group(spec, errors), labels), labels)


@dataclass(frozen=True, slots=True)
class PodRef:
    """What a deleted pod's bookkeeping needs: its identity and gang, read without parsing the
    rest of the pod (`pod_ref`)."""

    key: str
    namespace: str
    name: str
    uid: str
    pod_group: str
    """As `PodInfo.pod_group`."""


def pod_ref(obj: Mapping[str, Any]) -> PodRef:
    """The `PodRef` of a Pod's JSON; the fields agree with `parse_pod`'s. Never raises."""
    errors: list[FieldError] = []
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    namespace = text_of(metadata.get("namespace") or "")
    name = text_of(metadata.get("name") or "")
    key = f"{namespace}/{name}"
    return PodRef(
        key=key,
        namespace=namespace,
        name=name,
        uid=text_of(metadata.get("uid") or ""),
        pod_group=_gang_of(spec, string_map(metadata.get("labels")), key, errors),
    )


def _pod_group(spec: Mapping[str, Any], errors: list[FieldError]) -> str:
    """spec.schedulingGroup.podGroupName ("" when absent); a non-string is an error."""
    group = object_at(spec.get("schedulingGroup"), "spec.schedulingGroup", errors)
    name = group.get("podGroupName")
    if name is None:
        return ""
    if not isinstance(name, str):
        errors.append(
            FieldError("spec.schedulingGroup.podGroupName", f"must be a string, got {quote(name)}")
        )
        return ""
    return name


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """A NodeInfo from a Node's JSON. Never raises; problems land in `errors`."""
    errors: list[FieldError] = []
    metadata = object_at(obj.get("metadata"), "metadata", errors)
    spec = object_at(obj.get("spec"), "spec", errors)
    status = object_at(obj.get("status"), "status", errors)
    allocatable_raw = resource_list(status.get("allocatable"), "status.allocatable", errors)
    allocatable = np.zeros(len(RESOURCES), dtype=np.int64)
    mig: dict[str, int] = {}
    scalar: dict[str, int] = {}
    for name, value in allocatable_raw.items():
        if not vector_resource(name):
            amount = resource_amount(name, value, "status.allocatable", errors)
            if amount:
                scalar[name] = amount
        elif name in RESOURCES:
            allocatable[RESOURCES.index(name)] = resource_amount(
                name, value, "status.allocatable", errors
            )
        elif is_mig_resource(name):
            amount = resource_amount(name, value, "status.allocatable", errors)
            if amount and len(mig) >= MAX_NODE_MIG_PROFILES:
                errors.append(
                    FieldError(
                        f"status.allocatable.{clip(name)}",
                        f"more than {MAX_NODE_MIG_PROFILES} MIG profiles on one node; left out",
                    )
                )
            elif amount:
                mig[name] = amount
    annotations = string_map(metadata.get("annotations"))
    labels = string_map(metadata.get("labels"))
    sharing = parse_gpu_sharing(labels, {**scalar, GPU_RESOURCE: int(allocatable[GPU])}, errors)
    gpu_count = sharing.gpus if sharing else int(allocatable[GPU])
    if gpu_count > MAX_NODE_GPUS:
        errors.append(
            FieldError(
                f"status.allocatable.{GPU_RESOURCE}",
                f"{gpu_count} GPUs exceed the {MAX_NODE_GPUS} per node this scheduler models; "
                "the node is treated as having no GPUs",
            )
        )
        gpu_count, sharing = 0, None
        allocatable[GPU] = 0
    domains = domains_for_node(
        annotations.get(NVLINK_DOMAINS_ANNOTATION) if gpu_count else None, gpu_count
    )
    if domains.error:
        errors.append(
            FieldError(
                f"metadata.annotations[{NVLINK_DOMAINS_ANNOTATION}]",
                f"{domains.error}; using the default layout for {gpu_count} GPUs",
            )
        )
    taints = tuple(
        Taint(
            text_of(t.get("key") or ""),
            text_of(t.get("value") or ""),
            text_of(t.get("effect") or ""),
        )
        for t in list_of(spec.get("taints"))
        if isinstance(t, Mapping)
    )
    return NodeInfo(
        name=text_of(metadata.get("name") or ""),
        allocatable=allocatable,
        mig=mig,
        topology=domains.topology,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        errors=tuple(errors),
        scalar=scalar,
        topology_annotations={
            key: value
            for key, value in annotations.items()
            if key.startswith(TOPOLOGY_ANNOTATION_PREFIX) and len(value) <= MAX_TOPOLOGY_ANNOTATION
        },
        sharing=sharing,
    )


COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
"""The pod label naming a scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1, same
namespace)."""


COSCHEDULING_PREFIX = "scheduling.x-k8s.io/"
"""Prefix of `PodInfo.pod_group` for a labelled pod: its gang key ("ns/scheduling.x-k8s.io/name")
never equals a v1beta1 PodGroup's ("ns/name"; object names hold no "/")."""


_MAX_BOTH_LOGGED = 4096


_both_logged: dict[str, None] = {}


"""Pods already logged for carrying both spec.schedulingGroup and the label (bounded, oldest
first out): one log line per pod, not per informer event."""


def coscheduling_pod_group(key: str, pod_group: str, labels: Mapping[str, str]) -> str:
    """`PodInfo.pod_group` from spec.schedulingGroup's `pod_group` and the pod's labels: the
    PodGroup API wins (a log line says the label is ignored); else the label, prefixed."""
    name = labels.get(COSCHEDULING_LABEL, "")
    if not name:
        return pod_group
    if pod_group:
        if key not in _both_logged:
            _both_logged[key] = None
            if len(_both_logged) > _MAX_BOTH_LOGGED:
                del _both_logged[next(iter(_both_logged))]
            structlog.get_logger("gpu-scheduler.model.objects").info(
                "pod_group_label_ignored",
                pod=key,
                label=COSCHEDULING_LABEL,
                value=clip(name),
                reason="spec.schedulingGroup is set and takes precedence",
            )
        return pod_group
    return f"{COSCHEDULING_PREFIX}{name}"


KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
"""The pod label naming a Kueue pod group (plain pods admitted together as one Workload)."""


KUEUE_PREFIX = "kueue.x-k8s.io/"
"""Prefix of `PodInfo.pod_group` for a pod of a Kueue pod group: its gang key
("ns/kueue.x-k8s.io/name") never equals a PodGroup's ("ns/name") nor a coscheduling one's."""


def kueue_pod_group(pod_group: str, labels: Mapping[str, str]) -> str:
    """`PodInfo.pod_group` given the group found so far (spec.schedulingGroup or the
    coscheduling label, which win) and the pod's labels: the Kueue group's name, prefixed."""
    if pod_group:
        return pod_group
    name = labels.get(KUEUE_GROUP_LABEL, "")
    return f"{KUEUE_PREFIX}{name}" if name else ""
