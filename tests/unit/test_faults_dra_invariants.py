"""The DRA invariants of the fault suite (`hack.faults.dra_scenarios.check_claims`) on plain
ResourceClaim and Pod JSON."""

from __future__ import annotations

from typing import Any

from hack.faults.dra_scenarios import check_claims, dra_pod, one_gpu_template
from tests.dra_objects import allocated, pod_ref, resource_claim, result

SHARE_A = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a01"
SHARE_B = "1c6a8e4c-0d6b-4f59-9d3e-6a1f1c2b3a02"


def claim(name: str, *results: dict[str, Any], pod: str | None = None) -> dict[str, Any]:
    reserved = [pod_ref(pod, f"uid-{pod}")] if pod else []
    return resource_claim(name, status=allocated(*results, reserved_for=reserved))


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
