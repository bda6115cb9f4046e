"""The DRA fault families' pure parts, without a cluster: the workload's pods, the refusing
policy, the plain claims, and the soak's plan naming every family."""

from __future__ import annotations

from typing import Any, cast

from hack.faults.dra_faults import (
    REFUSED,
    DraWorkload,
    plain_claim,
    refusing_policy,
)
from hack.faults.dra_scenarios import one_gpu_template
from hack.faults.soak import DRA_FAMILIES, FAMILIES, plan
from hack.faults.workload import WORKLOAD_LABEL, WorkloadSpec


def workload(seed: int) -> DraWorkload:
    spec = WorkloadSpec("sched", "ns", {"pool": "ns"}, seed=seed)
    return DraWorkload(cast(Any, None), spec, pause_s=0.1)


def test_the_dra_workload_mixes_template_and_extended_pods_by_seed() -> None:
    stream = workload(7)
    pods = [stream.manifest(f"w-{i}") for i in range(40)]
    extended = [p for p in pods if "resourceClaims" not in p["spec"]]
    assert 4 <= len(extended) <= 20  # about 30 %
    for pod in pods:
        assert pod["metadata"]["labels"] == {WORKLOAD_LABEL: "w"}  # churn lists by it
        assert pod["spec"]["nodeSelector"] == {"pool": "ns"}
        assert pod["spec"]["schedulerName"] == "sched"
    assert extended[0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    replay = workload(7)
    again = [replay.manifest(f"w-{i}") for i in range(40)]
    assert again == pods


def test_the_policy_refuses_bindings_of_matching_names_in_one_namespace() -> None:
    policy, binding = refusing_policy("p", "ns", REFUSED)
    spec = policy["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods/binding"], ["CREATE"])
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ns"}
    }
    assert spec["validations"][0]["expression"] == "!object.metadata.name.matches('[147]$')"
    assert binding["spec"] == {"policyName": "p", "validationActions": ["Deny"]}


def test_a_plain_claim_asks_what_the_template_asks() -> None:
    claim = plain_claim("c")
    assert claim["metadata"] == {"name": "c"}
    assert claim["spec"] == one_gpu_template()["spec"]["spec"]


def test_the_soak_plans_every_family_and_dra_names_the_dra_ones() -> None:
    assert set(plan(2000, 10)) == set(FAMILIES)
    assert DRA_FAMILIES == (
        "dra-resets",
        "dra-refused",
        "dra-deleted",
        "dra-slices",
        "dra-sole-stop",
    )
