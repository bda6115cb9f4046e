"""The pure half of the demo's DRA step (`hack.demo`, step `dra`): its node, its objects, the
device choice kube-scheduler would have made, and the table it prints. No I/O.

The step adds one 8-GPU node whose GPUs are published through Dynamic Resource Allocation
(`DRA_NODE`: NVIDIA's driver `gpu.nvidia.com`, devices gpu-0..gpu-7, NVLink domains 0-3 and 4-7
named by GPU UUID), tainted so only the step's pods land there. Then, one pod at a time:

1. `HOLDER` takes gpu-0 through a ResourceClaim of its own whose selector names that GPU's UUID
   (`uuid_selector`);
2. `PAIR` asks for 2 GPUs and `QUAD` for 4, each through a ResourceClaimTemplate
   (`claim_template`), from which the resourceclaim controller makes the pod's claim.

For each pod, before it is created, `first_fit` runs the allocator over the cluster's objects
as they are then, without a domain map: upstream's device order (pool, slice, device), what
kube-scheduler's DynamicResources would allocate. The claim gpu-scheduler wrote is read back
afterwards; `claim_row` puts both side by side with the NVLink domains of the devices
(`node_domains`, the map gpu-scheduler itself uses), and `claim_table` aligns the rows. With
gpu-0 to gpu-2 taken, first fit gives the 4-GPU pod gpu-3 to gpu-6, across both domains;
gpu-scheduler gives it gpu-4 to gpu-7, one domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hack.localcluster.dra import DRIVER, GPU_CLASS
from hack.localcluster.dradriver import DEVICE_CLASS, claim_env_name
from hack.localcluster.nodes import DRA, NodeSpec
from hack.localcluster.realnode import PROBE_IMAGE, REAL_NODE_LABEL
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.dra.domains import device_domains
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.state.dra import DraStore

Json = dict[str, Any]

STEP_LABEL = "gpu-scheduler.io/demo-step"
"""Label (and taint key) of the nodes a demo step adds for itself, and of its pods."""
STEP = "dra"
DRA_NODE = NodeSpec(
    "Demo-DRA",
    1,
    gpus=8,
    nvlink_domains="0-3,4-7",
    gpu_product="NVIDIA-H200",
    cpu="96",
    memory="1Ti",
    labels={STEP_LABEL: STEP},
    taints=({"key": STEP_LABEL, "value": STEP, "effect": "NoSchedule"},),
    gpu_api=DRA,
)
"""The DRA step's node: its GPUs are published as a ResourceSlice, not as nvidia.com/gpu."""
HOLDER = "dra-holder"
"""The pod (and its claim) holding gpu-0."""
PAIR, PAIR_GPUS = "dra-pair", 2
QUAD, QUAD_GPUS = "dra-quad", 4
POD_CLAIM = "gpus"
"""The name of the claim entry in each pod's spec.resourceClaims."""
REQUEST = "gpu"
"""The name of the one request of each claim."""
TABLE_HEADER = ("POD", "NODE", "CLAIM", "DEVICES", "DOMAIN", "FIRST FIT", "FIRST FIT DOMAIN")
"""DEVICES: the claim's status.allocation; FIRST FIT: kube-scheduler's order (`first_fit`)."""
NO_DEVICES = "-"


def template_name(gpus: int) -> str:
    return f"gpus-{gpus}"


def step_pods(namespace: str, selector: str) -> list[tuple[str, Json, Mapping[str, str]]]:
    """(pod, claim, claim source) of the step's pods in their order: `HOLDER` with a claim of its
    own selecting one GPU by `selector`, then `PAIR` and `QUAD` with templates (their claim here
    is the one the controller will make: the template's spec, for `first_fit`)."""
    holder = resource_claim(HOLDER, namespace, gpu_request(1, selector))
    pods: list[tuple[str, Json, Mapping[str, str]]] = [
        (HOLDER, holder, {"resourceClaimName": HOLDER})
    ]
    for pod, gpus in ((PAIR, PAIR_GPUS), (QUAD, QUAD_GPUS)):
        claim = resource_claim(f"{pod}-{POD_CLAIM}", namespace, gpu_request(gpus))
        pods.append((pod, claim, {"resourceClaimTemplateName": template_name(gpus)}))
    return pods


def gpu_request(count: int, selector: str = "", device_class: str = GPU_CLASS) -> Json:
    """A claim spec asking for `count` GPUs of `device_class` (the `gpu.nvidia.com` class of
    the kwok DRA nodes unless given) and `selector`, in one request named `REQUEST`."""
    exactly: Json = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}


def uuid_selector(uuid: str) -> str:
    """The CEL selector of the one GPU whose driver attribute `uuid` is `uuid`."""
    return f"device.attributes['{DRIVER}'].uuid == '{uuid}'"


def device_uuid(resource_slice: Mapping[str, Any], device: str) -> str:
    """The `uuid` attribute of `device` in a ResourceSlice's JSON ("" when absent)."""
    for entry in (resource_slice.get("spec") or {}).get("devices") or ():
        if entry.get("name") == device:
            value = (entry.get("attributes") or {}).get("uuid") or {}
            return str(value.get("string") or "")
    return ""


def resource_claim(name: str, namespace: str, spec: Json) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def claim_template(namespace: str, gpus: int, device_class: str = GPU_CLASS) -> Json:
    """The ResourceClaimTemplate `template_name(gpus)`: `gpus` GPUs of `device_class`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(gpus), "namespace": namespace},
        "spec": {"spec": gpu_request(gpus, device_class=device_class)},
    }


def claim_pod(name: str, namespace: str, source: Mapping[str, str]) -> Json:
    """A gpu-scheduler pod on the step's node using one claim: `source` is
    `{"resourceClaimName": ...}` or `{"resourceClaimTemplateName": ...}`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {STEP_LABEL: STEP}},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {STEP_LABEL: STEP},
            "tolerations": [
                {"key": STEP_LABEL, "operator": "Equal", "value": STEP, "effect": "NoSchedule"}
            ],
            "resourceClaims": [{"name": POD_CLAIM, **source}],
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/train:1",
                    "resources": {"claims": [{"name": POD_CLAIM}]},
                }
            ],
        },
    }


def dra_store(objects: Iterable[Mapping[str, Any]]) -> DraStore:
    """A store of the DeviceClasses, ResourceSlices and ResourceClaims among `objects` (JSON
    with `kind`)."""
    store = DraStore()
    for obj in objects:
        kind = obj.get("kind")
        if kind == "DeviceClass":
            store.put_class(parse_device_class(obj))
        elif kind == "ResourceSlice":
            store.put_slice(parse_resource_slice(obj))
        elif kind == "ResourceClaim":
            store.put_claim(parse_resource_claim(obj))
    return store


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def first_fit(
    objects: Iterable[Mapping[str, Any]], node: Mapping[str, Any], claim: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The devices kube-scheduler would allocate `claim` (JSON, not allocated) on `node` (JSON)
    given the DRA objects `objects` (devices of their allocated claims are in use): the
    allocator without a domain map, which tries devices in upstream's order. None when the
    claim does not fit there."""
    return _allocate(objects, node, claim, nvlink=False)


def nvlink_fit(
    objects: Iterable[Mapping[str, Any]], node: Mapping[str, Any], claim: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """As `first_fit`, with the node's domain map (`node_domains`) given to the allocator: the
    NVLink-aware order gpu-scheduler's DynamicResources allocates in."""
    return _allocate(objects, node, claim, nvlink=True)


def _allocate(
    objects: Iterable[Mapping[str, Any]],
    node: Mapping[str, Any],
    claim: Mapping[str, Any],
    nvlink: bool,
) -> tuple[str, ...] | None:
    objects = list(objects)
    store = dra_store(objects)
    name = str(node["metadata"]["name"])
    labels = _labels(node)
    pools = store.pools_for(name, labels)
    annotations = dict((node.get("metadata") or {}).get("annotations") or {})
    domains = device_domains(annotations, pools).domain_of if nvlink else None
    allocator = Allocator(store.classes, store.in_use(), CelSelectors())
    outcome = allocator.allocate(
        name,
        labels,
        pools,
        [parse_resource_claim(claim)],
        domains,
        store.slices_for(name, labels),
    )
    if outcome.allocations is None:
        return None
    return tuple(result.device for result in outcome.allocations[0].results)


def node_domains(objects: Iterable[Mapping[str, Any]], node: Mapping[str, Any]) -> dict[str, int]:
    """Device name -> NVLink domain index of `node`'s DRA GPUs, as gpu-scheduler maps them (its
    annotations over the devices of its slices, `scheduler.dra.domains`)."""
    store = dra_store(objects)
    name = str(node["metadata"]["name"])
    labels = _labels(node)
    annotations = dict((node.get("metadata") or {}).get("annotations") or {})
    found = device_domains(annotations, store.pools_for(name, labels))
    return {device: domain for (_, _, device), domain in found.domain_of.items()}


def domain_cell(devices: Sequence[str], domains: Mapping[str, int]) -> str:
    """ "0" when every device lies in domain 0, "spans 0,1" across domains, "?" for a device
    without a known domain, "-" for no devices."""
    if not devices:
        return NO_DEVICES
    found = {domains.get(device) for device in devices}
    if None in found:
        return "?"
    indices = sorted(d for d in found if d is not None)
    if len(indices) == 1:
        return str(indices[0])
    return "spans " + ",".join(str(d) for d in indices)


def allocated_devices(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The device names of a claim's status.allocation, in its order (() when unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return tuple(str(result.get("device")) for result in results)


@dataclass(frozen=True)
class ClaimRow:
    """One pod of the step, bound, with its claim as read back."""

    pod: str
    node: str
    claim: str
    devices: tuple[str, ...]
    """The device names of the claim's status.allocation."""
    first_fit: tuple[str, ...] | None
    """`first_fit` before the pod was created (None: it would not have fitted)."""
    claim_json: Json = field(default_factory=dict, compare=False)

    def cells(self, domains: Mapping[str, int]) -> tuple[str, ...]:
        fit = self.first_fit or ()
        return (
            self.pod,
            self.node or NO_DEVICES,
            self.claim or NO_DEVICES,
            ",".join(self.devices) or NO_DEVICES,
            domain_cell(self.devices, domains),
            ",".join(fit) if self.first_fit is not None else "does not fit",
            domain_cell(fit, domains),
        )


def claim_table(rows: Sequence[ClaimRow], domains: Mapping[str, int]) -> str:
    """`TABLE_HEADER` and one aligned row per claim, in the order given."""
    lines = [TABLE_HEADER, *(row.cells(domains) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(TABLE_HEADER))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def claim_summary(claim: Mapping[str, Any]) -> str:
    """One line: what gpu-scheduler wrote into `claim`, in the order it wrote it: the finalizer,
    then status.allocation (devices by pool and driver, the node selector) with
    status.reservedFor."""
    metadata = claim.get("metadata") or {}
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ()
    selector = "; ".join(
        f"{r.get('key')} {r.get('operator')} {','.join(r.get('values') or ())}"
        for term in terms
        for r in (*(term.get("matchFields") or ()), *(term.get("matchExpressions") or ()))
    )
    results = (allocation.get("devices") or {}).get("results") or ()
    pools = sorted({f"pool {r.get('pool')} of driver {r.get('driver')}" for r in results})
    reserved = [f"{r.get('resource')}/{r.get('name')}" for r in status.get("reservedFor") or ()]
    return (
        f"claim {metadata.get('name')}: metadata.finalizers "
        f"{','.join(metadata.get('finalizers') or ()) or '-'}, then status.allocation "
        f"{','.join(allocated_devices(claim)) or '-'} ({'; '.join(pools) or '-'}; nodeSelector "
        f"{selector or '-'}) with status.reservedFor {','.join(reserved) or '-'}"
    )


# -- on the real node (`make demo ARGS=--in-cluster`) -------------------------------------------

REAL_PAIR = PAIR
"""The real node's pod of `PAIR_GPUS` devices (beside `HOLDER`, which takes one)."""


def real_node_pods(namespace: str) -> list[tuple[str, Json, Mapping[str, str]]]:
    """(pod, claim, claim source) of the step on the real node, in their order: `HOLDER` with
    a claim of its own for one device of the real node's driver (`dradriver.DEVICE_CLASS`; the
    test driver's devices carry no attribute to select one by, so gpu-scheduler picks it), then
    `REAL_PAIR` with the template `template_name(PAIR_GPUS)` of that class (its claim here is
    the template's spec, for `first_fit`)."""
    holder = resource_claim(HOLDER, namespace, gpu_request(1, device_class=DEVICE_CLASS))
    pair = resource_claim(
        f"{REAL_PAIR}-{POD_CLAIM}",
        namespace,
        gpu_request(PAIR_GPUS, device_class=DEVICE_CLASS),
    )
    return [
        (HOLDER, holder, {"resourceClaimName": HOLDER}),
        (REAL_PAIR, pair, {"resourceClaimTemplateName": template_name(PAIR_GPUS)}),
    ]


def probe_pod(name: str, namespace: str, source: Mapping[str, str]) -> Json:
    """A gpu-scheduler pod for the real node using one claim (`source` as in `claim_pod`),
    running the probe image's `-env` mode: it prints its environment, where the test driver's
    CDI spec put `claim_<claim>_<request>=true` for each claim kubelet prepared for it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {STEP_LABEL: STEP}},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "resourceClaims": [{"name": POD_CLAIM, **source}],
            "containers": [
                {
                    "name": "main",
                    "image": PROBE_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["-env"],
                    "resources": {"claims": [{"name": POD_CLAIM}]},
                }
            ],
        },
    }


def claim_variables(log: str) -> tuple[str, ...]:
    """The `claim_*` lines of the environment a probe pod printed (`log`), sorted."""
    return tuple(sorted(line for line in log.splitlines() if line.startswith("claim_")))


def expected_variable(claim: str) -> str:
    """The variable the test driver sets for a container given `claim` (its one request)."""
    return f"{claim_env_name(claim, REQUEST)}=true"


def domains_text(domains: Mapping[str, int]) -> str:
    """The domains of a node's devices, e.g. `device-00,device-01 | device-02,device-03`."""
    members: dict[int, list[str]] = {}
    for device, domain in sorted(domains.items()):
        members.setdefault(domain, []).append(device)
    return " | ".join(",".join(names) for _, names in sorted(members.items())) or NO_DEVICES
