"""The demo's DRA step (`hack.demo`, step `dra`), the half that talks to the cluster; the pure
half (objects, first fit, the table) is `hack.demo_dra`.

`run` picks where the step runs. On the kwok cluster of `make demo` (`on_kwok_node`): an 8-GPU
node of its own (`demo_dra.DRA_NODE`, NVLink domains 0-3 and 4-7 named by GPU UUID); a holder takes
gpu-0 by UUID, then pods of 2 and 4 GPUs ask through ResourceClaimTemplates (see `hack.demo_dra`).

With `make demo ARGS=--in-cluster` (`on_real_node`), where gpu-scheduler is the Deployment of
manifests/ on the cluster's real node: on that node's devices, which kubelet prepares through
Kubernetes' DRA test driver (`hack.localcluster.dradriver`: 4 devices of driver `gpu.nvidia.com`,
in gpu-scheduler's default layout of two NVLink domains, `device-00,device-01 | device-02,
device-03`). `demo_dra.HOLDER` takes one device through a claim of its own, then
`demo_dra.REAL_PAIR` asks for 2 through a ResourceClaimTemplate; before each pod is created,
kube-scheduler's first fit for its claim on the node is worked out (`demo_dra.first_fit`). Both
pods run the probe image, which prints its environment: the step shows the table of claims (the
devices gpu-scheduler wrote, their domain, first fit's choice and its domain), then for each pod
the `claim_*` variables the driver's CDI spec put into its container and the devices kubelet
prepared for its claim (its DRA checkpoint), then what gpu-scheduler wrote into the pair's claim.
With the holder on device-00, first fit gives the pair device-01,device-02 across both domains;
gpu-scheduler gives it device-02,device-03, one domain.

Every wait is bounded (`DRA_TIMEOUT_SECONDS`, `RUN_TIMEOUT_SECONDS`) and ends early once `stop()`
is true (Ctrl-C); a pod that does not get there is said, with where to look, and ends the step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hack import demo_dra
from hack.demo_io import NAMESPACE, add_nodes, apply_objects, get_json, poll, say
from hack.localcluster import LocalCluster
from hack.localcluster.dra import DRIVER, NVLINK_DOMAIN_IDS_ANNOTATION, slice_name
from hack.localcluster.dradriver import DEVICE_CLASS, DRIVER_NAME

RUN_TIMEOUT_SECONDS = 120.0
"""How long the step on the real node waits for each pod to run and print its environment."""


def run(cluster: LocalCluster, stop: Callable[[], bool]) -> None:
    """The step: on the cluster's real node when it has one, else on a kwok node of its own."""
    if cluster.real_node is not None:
        on_real_node(cluster, stop)
    else:
        on_kwok_node(cluster, stop)


def scheduler_log(cluster: LocalCluster) -> str:
    """Where gpu-scheduler's log is: the Deployment's pods, or the log folder's file."""
    if cluster.real_node is not None:
        return "kubectl logs -n gpu-scheduler"
    return f"gpu-scheduler.log in {cluster.log_dir}"


DRA_TIMEOUT_SECONDS = 60.0
"""How long the DRA step waits for each pod to be bound with its claim allocated."""


def claim_of(pod: dict[str, Any]) -> str:
    """The name of the claim `pod` (JSON) uses (a template's: from the pod's status, once the
    resourceclaim controller made it); "" while there is none."""
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if entry.get("resourceClaimName"):
            return str(entry["resourceClaimName"])
    return ""


def bound_claim(cluster: LocalCluster, pod: str) -> tuple[str, dict[str, Any]] | None:
    """(node, claim JSON) once `pod` is bound and its claim allocated; None before."""
    body = get_json(cluster, "get", "pod", pod, "-n", NAMESPACE)
    node = str((body.get("spec") or {}).get("nodeName") or "")
    name = claim_of(body)
    if not node or not name:
        return None
    claim = get_json(cluster, "get", "resourceclaim", name, "-n", NAMESPACE)
    return (node, claim) if demo_dra.allocated_devices(claim) else None


def dra_objects(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Every DeviceClass, ResourceSlice and ResourceClaim of the cluster, each with its kind."""
    listed = get_json(cluster, "get", "deviceclasses,resourceslices,resourceclaims", "-A")
    items: list[dict[str, Any]] = listed.get("items", [])
    return items


def place_claim_pod(
    cluster: LocalCluster,
    stop: Callable[[], bool],
    node: dict[str, Any],
    pod: dict[str, Any],
    claim: dict[str, Any],
) -> demo_dra.ClaimRow | None:
    """Work out kube-scheduler's first fit for `claim` (the pod's claim, or one with its
    template's spec) on `node` as the cluster is now, apply `claim` when it is the pod's own
    and then `pod`, and wait for the pod to be bound with its claim allocated. The table row,
    or None (said why) when that did not happen in `DRA_TIMEOUT_SECONDS`."""
    name = pod["metadata"]["name"]
    fit = demo_dra.first_fit(dra_objects(cluster), node, claim)
    own = [claim] if "resourceClaimName" in pod["spec"]["resourceClaims"][0] else []
    apply_objects(cluster, f"{name}.yaml", [*own, pod])
    poll(lambda: stop() or bound_claim(cluster, name) is not None, DRA_TIMEOUT_SECONDS)
    found = None if stop() else bound_claim(cluster, name)
    if found is None:
        if not stop():
            say(f"dra: {name} was not bound with its claim allocated in "
                f"{DRA_TIMEOUT_SECONDS:.0f} s; see {scheduler_log(cluster)}")  # fmt: skip
        return None
    bound_node, bound = found
    devices = demo_dra.allocated_devices(bound)
    return demo_dra.ClaimRow(name, bound_node, bound["metadata"]["name"], devices, fit, bound)


def on_kwok_node(cluster: LocalCluster, stop: Callable[[], bool]) -> None:
    """The step on a kwok node of its own (`demo_dra.DRA_NODE`); see the module docstring."""
    spec = demo_dra.DRA_NODE
    (node,) = asyncio.run(add_nodes(cluster.kubeconfig, [spec]))
    node_json = get_json(cluster, "get", "node", node)
    published = get_json(cluster, "get", "resourceslice", slice_name(node))
    say(f"added {node} for this step: {spec.gpus} H200 GPUs published through DRA, not as "
        f"nvidia.com/gpu: ResourceSlice {slice_name(node)} (driver {DRIVER}, devices gpu-0.."
        f"gpu-{spec.gpus - 1}), NVLink domains {spec.nvlink_domains} named by GPU UUID in "
        f"{NVLINK_DOMAIN_IDS_ANNOTATION}")  # fmt: skip
    uuid = demo_dra.device_uuid(published, "gpu-0")
    if not uuid:
        say(f"dra: no ResourceSlice with gpu-0 published for {node}; see kube-apiserver.log in "
            f"{cluster.log_dir}")  # fmt: skip
        return
    selector = demo_dra.uuid_selector(uuid)
    say(f"{demo_dra.HOLDER} takes gpu-0 through a claim of its own, selecting it by UUID "
        f"({selector}); then, one at a time, {demo_dra.PAIR} asks for {demo_dra.PAIR_GPUS} "
        f"GPUs and {demo_dra.QUAD} for {demo_dra.QUAD_GPUS}, each through a "
        "ResourceClaimTemplate:")  # fmt: skip
    sizes = (demo_dra.PAIR_GPUS, demo_dra.QUAD_GPUS)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    templates = [demo_dra.claim_template(NAMESPACE, n) for n in sizes]
    apply_objects(cluster, "dra-templates.yaml", [namespace, *templates])
    rows: list[demo_dra.ClaimRow] = []
    for name, claim, source in demo_dra.step_pods(NAMESPACE, selector):
        row = place_claim_pod(
            cluster, stop, node_json, demo_dra.claim_pod(name, NAMESPACE, source), claim
        )
        if row is None:
            return
        rows.append(row)
    domains = demo_dra.node_domains(dra_objects(cluster), node_json)
    say("the devices gpu-scheduler wrote into each claim's status.allocation, their NVLink "
        "domain, and what kube-scheduler's first fit (the allocator in upstream's device order) "
        "would have taken at the same moment:")  # fmt: skip
    say(demo_dra.claim_table(rows, domains))
    say(f"dra: {demo_dra.claim_summary(rows[-1].claim_json)}")


def on_real_node(cluster: LocalCluster, stop: Callable[[], bool]) -> None:
    """The step on the cluster's real node; see the module docstring."""
    assert cluster.real_node is not None and cluster.real_node.dra_driver is not None
    node = cluster.real_node.name
    driver = cluster.real_node.dra_driver
    node_json = get_json(cluster, "get", "node", node)
    domains = demo_dra.node_domains(dra_objects(cluster), node_json)
    say(f"on the real node {node}: kubelet with Kubernetes' DRA test driver as its plugin, "
        f"publishing {len(domains)} devices of driver {DRIVER_NAME} (pool {node}, DeviceClass "
        f"{DEVICE_CLASS}); gpu-scheduler's NVLink domains for them: "
        f"{demo_dra.domains_text(domains)} (its default layout for {len(domains)} GPUs: the "
        "devices have no UUID or PCI bus ID to name in "
        f"{NVLINK_DOMAIN_IDS_ANNOTATION}, and are not named gpu-N)")  # fmt: skip
    say(f"{demo_dra.HOLDER} takes one device through a claim of its own; then "
        f"{demo_dra.REAL_PAIR} asks for {demo_dra.PAIR_GPUS} through a ResourceClaimTemplate; "
        "both run a probe that prints its environment:")  # fmt: skip
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    template = demo_dra.claim_template(NAMESPACE, demo_dra.PAIR_GPUS, DEVICE_CLASS)
    apply_objects(cluster, "dra-real-node-templates.yaml", [namespace, template])
    rows: list[demo_dra.ClaimRow] = []
    for name, claim, source in demo_dra.real_node_pods(NAMESPACE):
        pod = demo_dra.probe_pod(name, NAMESPACE, source)
        row = place_claim_pod(cluster, stop, node_json, pod, claim)
        if row is None:
            return
        rows.append(row)
    say("the devices gpu-scheduler wrote into each claim's status.allocation, their NVLink "
        "domain, and what kube-scheduler's first fit (the allocator in upstream's device order) "
        "would have taken at the same moment:")  # fmt: skip
    say(demo_dra.claim_table(rows, domains))
    for row in rows:
        variables = environment(cluster, stop, row.pod)
        if variables is None:
            return
        prepared = sorted(
            device.device
            for device in driver.checkpoint()
            if device.namespace == NAMESPACE and device.claim == row.claim
        )
        say(f"dra: {row.pod} runs on {row.node}; its container's claim variables: "
            f"{' '.join(variables) or '-'}; kubelet prepared {','.join(prepared) or '-'} for "
            f"claim {row.claim}")  # fmt: skip
    say(f"dra: {demo_dra.claim_summary(rows[-1].claim_json)}")


def environment(
    cluster: LocalCluster, stop: Callable[[], bool], pod: str
) -> tuple[str, ...] | None:
    """The `claim_*` variables `pod` printed once it runs; None (said why) when it did not
    print its environment in `RUN_TIMEOUT_SECONDS`."""

    def printed() -> bool:
        log = cluster.kubectl("logs", pod, "-n", NAMESPACE, check=False)
        return log.returncode == 0 and "PATH=" in log.stdout

    poll(lambda: stop() or printed(), RUN_TIMEOUT_SECONDS)
    if stop():
        return None
    if not printed():
        phase = get_json(cluster, "get", "pod", pod, "-n", NAMESPACE).get("status", {}).get("phase")
        say(f"dra: {pod} did not print its environment in {RUN_TIMEOUT_SECONDS:.0f} s (phase "
            f"{phase}); see kubelet.log and dra-driver.log in {cluster.log_dir}")  # fmt: skip
        return None
    log = cluster.kubectl("logs", pod, "-n", NAMESPACE).stdout
    return demo_dra.claim_variables(log)
