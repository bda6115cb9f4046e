"""The DRA claim tracker (`scheduler.state.dra.DraStore`) and DynamicResources' PreFilter
(`scheduler.plugins.dynamic_resources.pre_filter`), with plain parsed objects."""

from __future__ import annotations

from typing import Any

from scheduler.framework.interface import CycleState
from scheduler.model.claims import parse_resource_claim
from scheduler.model.device_classes import parse_device_class, parse_device_taint_rule
from scheduler.model.objects import parse_pod
from scheduler.plugins.dynamic_resources import (
    NAME,
    PodClaimState,
    assume_claims,
    plan_claims,
    pre_filter,
)
from scheduler.state.dra import DraStore
from scheduler.state.dra_handlers import ResourceClaimHandler, ResourceSliceHandler
from tests.dra_objects import (
    DRIVER,
    allocated,
    device_class,
    pod_ref,
    pod_with_claims,
    resource_claim,
    resource_slice,
    result,
    taint,
    taint_rule,
)


class Requeue:
    def __init__(self) -> None:
        self.events: list[str] = []

    def move_all_to_active_or_backoff(self, event: str) -> int:
        self.events.append(event)
        return 0

    def move_matching(self, event: str, wanted: object) -> int:
        self.events.append(event)
        return 0


def store_with(*claims: dict[str, Any], classes: tuple[str, ...] = (DRIVER,)) -> DraStore:
    store = DraStore()
    for name in classes:
        store.put_class(parse_device_class(device_class(name)))
    for claim in claims:
        store.put_claim(parse_resource_claim(claim))
    return store


def claim_owned_by(name: str, pod_uid: str, **kwargs: Any) -> dict[str, Any]:
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "uid": pod_uid,
        "controller": True,
    }
    meta = {"uid": f"uid-{name}", "ownerReferences": [owner]}
    return resource_claim(name, metadata=meta, **kwargs)


def template_pod(claim_name: str | None) -> dict[str, Any]:
    statuses = [{"name": "gpus", "resourceClaimName": claim_name}] if claim_name else []
    return pod_with_claims(
        "p", [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}], statuses
    )


def test_in_use_counts_every_allocated_claim_and_every_allocation_in_flight() -> None:
    store = store_with(
        resource_claim("a", status=allocated(result("gpus", "gpu-0"), result("gpus", "gpu-1")))
    )
    assert store.in_use() == {(DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-1")}
    free = parse_resource_claim(claim_owned_by("b", "uid-p"))
    other = parse_resource_claim(resource_claim("a", status=allocated(result("gpus", "gpu-0"))))
    assert other.allocation is not None
    store.assume("default/p", {free.key: (free.uid, other.allocation)})
    assert (DRIVER, "node-a", "gpu-0") in store.in_use()
    assert store.revert("default/p") and not store.revert("default/p")


def test_an_in_flight_allocation_ends_when_the_claim_is_seen_allocated() -> None:
    claim = claim_owned_by("c", "uid-p")
    store = store_with(claim)
    written = parse_resource_claim(resource_claim("c", status=allocated(result("gpus", "gpu-3"))))
    assert written.allocation is not None
    store.assume("default/p", {"default/c": ("uid-c", written.allocation)})
    store.put_claim(parse_resource_claim(claim))  # an unrelated update: still in flight
    assert store.in_flight("default/c") is not None
    allocated_claim = dict(claim, status=allocated(result("gpus", "gpu-3")))
    store.put_claim(parse_resource_claim(allocated_claim))
    assert store.in_flight("default/c") is None
    assert (DRIVER, "node-a", "gpu-3") in store.in_use()


def test_pools_are_recomputed_when_a_slice_or_a_taint_rule_changes() -> None:
    store = DraStore()
    requeue = Requeue()
    slices = ResourceSliceHandler(store, requeue)
    slices.on_add(resource_slice("s-a"))
    slices.on_add(resource_slice("s-b", node="node-b"))
    [pool] = store.pools_for("node-a", {})
    assert len(pool.devices) == 8 and requeue.events == ["ResourceSliceChange"] * 2
    slices.on_add(resource_slice("s-a"))  # unchanged: no requeue
    assert requeue.events == ["ResourceSliceChange"] * 2
    rule = parse_device_taint_rule(
        taint_rule("sick", taint("gpu.nvidia.com/xid", "NoSchedule"), device="gpu-5")
    )
    store.put_taint_rule(rule.name, rule)
    [pool] = store.pools_for("node-a", {})
    tainted = [e.device.name for e in pool.devices if e.device.taints]
    assert tainted == ["gpu-5"]
    assert store.pools_for("node-c", {}) == ()
    assert store.has_devices("node-b") and not store.has_devices("node-c")


def test_the_claims_informer_handler_requeues_and_forgets_deleted_claims() -> None:
    store = DraStore()
    requeue = Requeue()
    handler = ResourceClaimHandler(store, requeue)
    handler.on_add(resource_claim("c"))
    assert "default/c" in store.claims
    handler.on_delete(resource_claim("c"))
    assert "default/c" not in store.claims
    assert requeue.events == ["ResourceClaimChange"] * 2


def test_pre_filter_waits_with_kube_schedulers_messages() -> None:
    store = store_with()
    assert pre_filter(parse_pod(template_pod(None)), store)[0] == (
        'pod "default/p": ResourceClaim not created yet'
    )
    assert pre_filter(parse_pod(template_pod("p-gpus")), store)[0] == (
        'resourceclaim.resource.k8s.io "p-gpus" not found'
    )
    store.put_claim(parse_resource_claim(claim_owned_by("p-gpus", "someone-else")))
    assert pre_filter(parse_pod(template_pod("p-gpus")), store)[0] == (
        "ResourceClaim default/p-gpus was not created for Pod default/p (Pod is not owner)"
    )
    deleting = claim_owned_by("p-gpus", "uid-p")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    store.put_claim(parse_resource_claim(deleting))
    assert pre_filter(parse_pod(template_pod("p-gpus")), store)[0] == (
        'resourceclaim "p-gpus" is being deleted'
    )


def test_pre_filter_names_a_missing_class_and_a_claim_being_allocated_for_another_pod() -> None:
    store = store_with(claim_owned_by("p-gpus", "uid-p"), classes=())
    pod = parse_pod(template_pod("p-gpus"))
    assert pre_filter(pod, store)[0] == f"request gpus: device class {DRIVER} does not exist"
    store.put_class(parse_device_class(device_class(DRIVER)))
    message, state = pre_filter(pod, store)
    assert message == "" and state is not None and [c.name for c in state.to_allocate] == ["p-gpus"]
    written = parse_resource_claim(resource_claim("x", status=allocated(result("gpus", "gpu-0"))))
    assert written.allocation is not None
    store.assume("default/q", {"default/p-gpus": ("uid-p-gpus", written.allocation)})
    assert pre_filter(pod, store)[0] == (
        "resource claim default/p-gpus is in the process of being allocated"
    )


def test_an_allocated_shared_claim_is_only_reserved() -> None:
    shared = resource_claim(
        "shared",
        metadata={"uid": "uid-shared"},
        status=allocated(result("gpus", "gpu-0"), reserved_for=[pod_ref("q", "uid-q")]),
    )
    store = store_with(shared)
    pod = parse_pod(pod_with_claims("p", [{"name": "gpus", "resourceClaimName": "shared"}]))
    message, claim_state = pre_filter(pod, store)
    assert message == "" and claim_state is not None and claim_state.to_allocate == ()
    state = CycleState(data={NAME: claim_state})
    plan = plan_claims(state, 0, pod)
    assert plan is not None and plan.allocate == () and [c.name for c in plan.reserve] == ["shared"]
    assume_claims(store, plan)  # nothing to allocate: nothing in flight
    assert store.in_flight_for(pod.key) == {}


def test_a_full_claim_reserved_for_others_is_in_use() -> None:
    refs = [pod_ref(f"q{i}", f"uid-q{i}") for i in range(256)]
    full = resource_claim("full", status=allocated(result("gpus", "gpu-0"), reserved_for=refs))
    store = store_with(full)
    pod = parse_pod(pod_with_claims("p", [{"name": "gpus", "resourceClaimName": "full"}]))
    assert pre_filter(pod, store) == ("resourceclaim in use", None)


def test_a_pod_without_claims_costs_nothing() -> None:
    pod = parse_pod(pod_with_claims("p", []))
    assert pod.resource_claims is None
    assert pre_filter(pod, DraStore()) == ("", None)
    assert isinstance(PodClaimState((), ()), PodClaimState)


def test_a_device_allocated_with_admin_access_stays_free_for_others() -> None:
    admin = allocated(result("gpus", "gpu-0", adminAccess=True), result("gpus", "gpu-1"))
    store = store_with(resource_claim("monitor", status=admin))
    assert store.in_use() == {(DRIVER, "node-a", "gpu-1")}
