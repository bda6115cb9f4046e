"""The DRA invariants of the fault suite (`hack.faults.dra_invariants`) on plain
ResourceClaim and Pod JSON."""

from __future__ import annotations

from typing import Any

from hack.faults.dra_invariants import (
    check_claims,
    check_held,
    check_pods_claims,
    check_unreserved,
    claim_names,
)
from hack.faults.dra_scenarios import dra_pod, extended_pod, one_gpu_template
from hack.faults.invariants import used_on_nodes
from tests.dra_objects import allocated, pod_ref, resource_claim, result

SHARE_A = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a01"
SHARE_B = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a02"


def claim(
    name: str, *results: dict[str, Any], pod: str | None = None, version: str = "1"
) -> dict[str, Any]:
    reserved = [pod_ref(pod, f"uid-{pod}")] if pod else []
    metadata = {"uid": f"uid-{name}", "resourceVersion": version}
    return resource_claim(
        name, status=allocated(*results, reserved_for=reserved), metadata=metadata
    )


def unallocated(name: str) -> dict[str, Any]:
    return resource_claim(name, metadata={"uid": f"uid-{name}", "resourceVersion": "1"})


def pod(name: str, node: str | None) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec}


def test_claims_on_their_own_devices_reserved_for_bound_pods_are_fine() -> None:
    claims = [claim("a", result("gpus", "gpu-0"), pod="pa"), claim("b", result("gpus", "gpu-1"))]
    assert check_claims(claims, [pod("pa", "node-a")]) == []


def test_a_device_in_two_claims_is_shared_unless_their_shares_differ() -> None:
    (found,) = check_claims(
        [claim("a", result("gpus", "gpu-0")), claim("b", result("gpus", "gpu-0"))], []
    )
    assert (found.invariant, found.subject) == ("device_shared", "gpu.nvidia.com/node-a/gpu-0")
    assert "default/a" in found.detail and "default/b" in found.detail
    shares = [
        claim("a", result("gpus", "gpu-0", shareID=SHARE_A)),
        claim("b", result("gpus", "gpu-0", shareID=SHARE_B)),
        claim("m", result("gpus", "gpu-0", adminAccess=True)),
    ]
    assert check_claims(shares, []) == []


def test_a_claim_reserved_for_an_unbound_pod_is_stranded_a_deleted_pod_is_not() -> None:
    claims = [
        claim("a", result("gpus", "gpu-0"), pod="waiting"),
        claim("b", result("gpus", "gpu-1"), pod="deleted"),  # the controller's to clean up
    ]
    (found,) = check_claims(claims, [pod("waiting", None)])
    assert (found.invariant, found.subject) == ("claim_stranded", "default/a")


def test_the_probe_pod_takes_its_gpu_through_the_template() -> None:
    probe = dra_pod("p", "sched", {"k": "v"})
    assert probe["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": one_gpu_template()["metadata"]["name"]}
    ]
    assert probe["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]


def test_a_claim_allocated_for_nobody_in_two_lists_in_a_row_is_unreserved() -> None:
    lonely = claim("lonely", result("gpus", "gpu-0"))
    (found,) = check_unreserved([lonely], [lonely, claim("new", result("gpus", "gpu-1"))])
    assert (found.invariant, found.subject) == ("claim_unreserved", "default/lonely")
    # once only, reserved, or not allocated: not a leak
    assert check_unreserved([], [lonely]) == []
    assert check_unreserved([lonely], [claim("lonely", result("gpus", "gpu-0"), pod="p")]) == []
    assert check_unreserved([lonely], [unallocated("lonely")]) == []


def test_mid_fault_only_a_stranded_claim_unchanged_between_two_lists_counts() -> None:
    before = claim("a", result("gpus", "gpu-0"), pod="waiting", version="7")
    rewritten = claim("a", result("gpus", "gpu-0"), pod="waiting", version="9")
    pods = [pod("waiting", None)]
    assert check_held([before], [rewritten], pods) == []  # a retry wrote it meanwhile
    (found,) = check_held([before], [before], pods)
    assert (found.invariant, found.subject) == ("claim_stranded", "default/a")
    assert check_held([before], [before], [pod("waiting", "node-a")]) == []


def bound_pod(name: str, *claims: dict[str, Any], **status: Any) -> dict[str, Any]:
    found = pod(name, "node-a")
    found["spec"].update(schedulerName="ours", resourceClaims=list(claims))
    found["status"] = status
    return found


def test_a_bound_pod_needs_each_claim_allocated_and_reserved_for_it() -> None:
    template = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    plain = {"name": "fixed", "resourceClaimName": "fixed-claim"}
    statuses = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    extended = {"resourceClaimName": "p-extended", "requestMappings": []}
    ok = bound_pod(
        "p", template, plain, resourceClaimStatuses=statuses, extendedResourceClaimStatus=extended
    )
    assert claim_names(ok) == ({"p-gpu-x", "fixed-claim", "p-extended"}, [])
    claims = [
        claim("p-gpu-x", result("gpus", "gpu-0"), pod="p"),
        claim("fixed-claim", result("gpus", "gpu-1"), pod="p"),
        claim("p-extended", result("gpus", "gpu-2"), pod="p"),
    ]
    assert check_pods_claims([ok], claims, {"ours"}) == []
    broken = [
        claim("p-gpu-x", result("gpus", "gpu-0"), pod="other"),
        unallocated("fixed-claim"),
    ]
    (found,) = check_pods_claims([ok], broken, {"ours"})
    assert (found.invariant, found.subject) == ("pod_without_claims", "default/p")
    assert found.detail == (
        "fixed-claim not allocated; p-extended missing; p-gpu-x not reserved for it"
    )


def test_only_our_bound_live_pods_are_judged_and_a_template_claim_must_be_generated() -> None:
    template = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    (found,) = check_pods_claims([bound_pod("p", template)], [], {"ours"})
    assert found.detail == "template claim 'gpu' not generated"
    assert check_pods_claims([bound_pod("p", template)], [], {"theirs"}) == []
    pending = bound_pod("p", template)
    del pending["spec"]["nodeName"]
    going = bound_pod("q", template)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    not_needed = bound_pod("r", template, resourceClaimStatuses=[{"name": "gpu"}])
    assert check_pods_claims([pending, going, not_needed], [], {"ours"}) == []


def test_extended_resources_served_by_a_claim_take_no_node_allocatable() -> None:
    limits = {"nvidia.com/gpu": "1"}
    served = extended_pod("e", "ours", {})
    served["spec"]["nodeName"] = "node-a"
    served["status"] = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": "e-extended",
            "requestMappings": [
                {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "r"}
            ],
        }
    }
    plain = extended_pod("d", "ours", {})
    plain["spec"]["nodeName"] = "node-a"
    assert served["spec"]["containers"][0]["resources"]["limits"] == limits
    used = used_on_nodes([served, plain])["node-a"]
    assert used["nvidia.com/gpu"] == 1  # the device-plugin pod only
