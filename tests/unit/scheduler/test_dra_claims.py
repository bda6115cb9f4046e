"""ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1) parsed into records: requests
(exactly, firstAvailable), constraints, config, the allocation and reservations; every bad field
reported under its path; and the claim names of a pod's spec.resourceClaims."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.model.claims import (
    DELETE_PROTECTION_FINALIZER,
    PodClaim,
    parse_resource_claim,
    parse_resource_claim_template,
    pod_claim_names,
)
from scheduler.model.device_taints import DeviceToleration
from scheduler.model.fields import FieldError, sorted_errors
from tests.dra_objects import (
    DELETE,
    DRIVER,
    allocated,
    changed,
    claim_spec,
    claim_template,
    exact,
    opaque,
    pod_ref,
    pod_with_claims,
    request,
    resource_claim,
    result,
    toleration,
)
from tests.fuzzing import MAX_MESSAGE

GiB = 2**30
H100_ONLY = f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')"
SHARE = "5bd1c4a2-3e61-4c8a-9f0e-2b7d6a1f9c33"

SPEC = claim_spec(
    request(
        "gpus",
        exact(
            count=2,
            expressions=(f"device.capacity['{DRIVER}'].memory.compareTo(quantity('80Gi')) >= 0",),
            tolerations=[toleration("gpu.nvidia.com/xid", "Exists", effect="NoExecute")],
            capacity={"requests": {"memory": "40Gi"}},
        ),
    ),
    request(
        "fallback",
        None,
        exact(name="h200", count=1),
        exact(name="h100", count=2, expressions=(H100_ONLY,)),
    ),
    request("monitor", exact(mode="All", adminAccess=True)),
    constraints=[
        {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
        {"requests": ["gpus", "fallback/h100"], "distinctAttribute": f"{DRIVER}/uuid"},
    ],
    config=[opaque(requests=["gpus", "fallback"])],
)
STATUS = allocated(
    result("gpus", "gpu-0", tolerations=[toleration("gpu.nvidia.com/xid", "Exists")]),
    result("gpus", "gpu-1", shareID=SHARE, consumedCapacity={"memory": "40Gi"}),
    result("fallback/h200", "gpu-2"),
    result("monitor", "gpu-3", adminAccess=True),
    reserved_for=[pod_ref("trainer", "uid-trainer")],
    allocationTimestamp="2026-11-27T12:30:00Z",
)
CLAIM = resource_claim(
    "trainer-gpus",
    "team-a",
    SPEC,
    status=STATUS,
    metadata={
        "uid": "claim-uid",
        "resourceVersion": "42",
        "finalizers": [DELETE_PROTECTION_FINALIZER],
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "trainer",
                "uid": "uid-trainer",
                "controller": True,
            }
        ],
    },
)


def only_error(errors: tuple[FieldError, ...], field: str, fragment: str) -> None:
    assert any(e.field == field and fragment in e.message for e in errors), errors
    assert all(len(str(e)) <= MAX_MESSAGE for e in errors)
    assert len(sorted_errors(errors)) <= 1024


def test_a_claim_with_every_kind_of_request() -> None:
    claim = parse_resource_claim(CLAIM)
    assert claim.errors == ()
    assert (claim.key, claim.uid, claim.resource_version) == (
        "team-a/trainer-gpus",
        "claim-uid",
        "42",
    )
    gpus, fallback, monitor = claim.spec.requests
    assert gpus.exactly is not None and gpus.alternatives == (("gpus", gpus.exactly),)
    assert (gpus.exactly.device_class_name, gpus.exactly.count) == (DRIVER, 2)
    assert gpus.exactly.allocation_mode == "ExactCount" and not gpus.exactly.admin_access
    assert gpus.exactly.capacity_requests == {"memory": 40 * GiB}
    assert gpus.exactly.tolerations == (
        DeviceToleration("gpu.nvidia.com/xid", "Exists", "", "NoExecute"),
    )
    assert "compareTo(quantity('80Gi'))" in gpus.exactly.selectors[0]
    assert fallback.exactly is None
    assert [ref for ref, _ in fallback.alternatives] == ["fallback/h200", "fallback/h100"]
    assert [sub.count for sub in fallback.first_available] == [1, 2]
    assert fallback.first_available[1].selectors == (H100_ONLY,)
    assert monitor.exactly is not None
    assert (monitor.exactly.allocation_mode, monitor.exactly.count) == ("All", 0)
    assert monitor.exactly.admin_access
    match, distinct = claim.spec.constraints
    assert (match.requests, match.match_attribute) == (("gpus",), "resource.kubernetes.io/pcieRoot")
    assert (distinct.distinct_attribute, distinct.match_attribute) == (f"{DRIVER}/uuid", "")
    assert claim.spec.config[0].requests == ("gpus", "fallback")
    assert claim.spec.request_refs == {
        "gpus",
        "fallback",
        "fallback/h200",
        "fallback/h100",
        "monitor",
    }


def test_the_status_of_an_allocated_claim() -> None:
    claim = parse_resource_claim(CLAIM)
    allocation = claim.allocation
    assert allocation is not None
    assert [(r.request, r.device) for r in allocation.results] == [
        ("gpus", "gpu-0"),
        ("gpus", "gpu-1"),
        ("fallback/h200", "gpu-2"),
        ("monitor", "gpu-3"),
    ]
    first, shared, _, monitor = allocation.results
    assert first.device_id == (DRIVER, "node-a", "gpu-0")
    assert first.tolerations == (DeviceToleration("gpu.nvidia.com/xid", "Exists", "", ""),)
    assert (shared.share_id, shared.consumed_capacity) == (SHARE, {"memory": 40 * GiB})
    assert monitor.admin_access and not first.admin_access
    assert allocation.config[0].source == "FromClaim"
    assert allocation.node_selector is not None
    assert allocation.node_selector.matches("node-a", {})
    assert not allocation.node_selector.matches("node-b", {})
    assert allocation.allocated_at is not None and allocation.allocated_at.minute == 30
    assert claim.reserved_for[0].is_pod and claim.reserved_for_pod("uid-trainer")
    assert claim.finalizers == (DELETE_PROTECTION_FINALIZER,) and not claim.deleting
    assert claim.controller is not None and claim.controller.uid == "uid-trainer"


def test_a_pending_and_a_deleted_claim() -> None:
    pending = parse_resource_claim(resource_claim("c"))
    assert pending.errors == () and pending.allocation is None and pending.reserved_for == ()
    deleted = parse_resource_claim(
        resource_claim("c", metadata={"deletionTimestamp": "2026-11-27T12:00:00Z"})
    )
    assert deleted.deleting and deleted.controller is None


def test_served_defaults_are_applied_when_missing() -> None:
    spec = claim_spec(request("r", {"deviceClassName": DRIVER}))
    parsed = parse_resource_claim(resource_claim("c", spec=spec))
    exactly = parsed.spec.requests[0].exactly
    assert parsed.errors == () and exactly is not None
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)
    tolerating = claim_spec(request("r", exact(tolerations=[{"key": "k", "value": "v"}])))
    parsed_toleration = parse_resource_claim(resource_claim("c", spec=tolerating))
    assert parsed_toleration.spec.requests[0].exactly is not None
    assert parsed_toleration.spec.requests[0].exactly.tolerations[0].operator == "Equal"


def test_a_template_holds_a_claim_spec() -> None:
    template = parse_resource_claim_template(claim_template("gpus", "team-a", SPEC))
    assert template.errors == ()
    assert (template.namespace, template.name) == ("team-a", "gpus")
    assert template.spec == parse_resource_claim(CLAIM).spec
    broken = changed(claim_template("gpus"), ("spec", "spec", "devices", "requests", 0, "name"), "")
    only_error(
        parse_resource_claim_template(broken).errors,
        "spec.spec.devices.requests[0].name",
        "required",
    )


# -- every bad field is reported under its path ----------------------------------------------

R0 = ("spec", "devices", "requests", 0)
EX0 = (*R0, "exactly")
SUB = ("spec", "devices", "requests", 1, "firstAvailable")
C0 = ("spec", "devices", "constraints", 0)
RES = ("status", "allocation", "devices", "results")

BAD_CLAIMS: list[tuple[str, tuple[Any, ...], Any, str, str]] = [
    (
        "requests not a list",
        ("spec", "devices", "requests"),
        {},
        "spec.devices.requests",
        "must be a list",
    ),
    (
        "too many requests",
        ("spec", "devices", "requests"),
        [request(f"r{i}", exact()) for i in range(33)],
        "spec.devices.requests",
        "at most 32",
    ),
    ("request without name", (*R0, "name"), DELETE, "spec.devices.requests[0].name", "is required"),
    (
        "request name not a label",
        (*R0, "name"),
        "GPUs",
        "spec.devices.requests[0].name",
        "DNS label",
    ),
    (
        "duplicate request",
        ("spec", "devices", "requests", 1, "name"),
        "gpus",
        "spec.devices.requests[1].name",
        "duplicate request",
    ),
    (
        "exactly and firstAvailable",
        (*R0, "firstAvailable"),
        [exact(name="x")],
        "spec.devices.requests[0]",
        "exactly one of exactly and firstAvailable",
    ),
    (
        "neither",
        EX0,
        DELETE,
        "spec.devices.requests[0]",
        "exactly one of exactly and firstAvailable",
    ),
    (
        "no class",
        (*EX0, "deviceClassName"),
        DELETE,
        "spec.devices.requests[0].exactly.deviceClassName",
        "is required",
    ),
    (
        "class not a subdomain",
        (*EX0, "deviceClassName"),
        "GPU Class",
        "spec.devices.requests[0].exactly.deviceClassName",
        "DNS subdomain",
    ),
    (
        "unknown mode",
        (*EX0, "allocationMode"),
        "Some",
        "spec.devices.requests[0].exactly.allocationMode",
        "ExactCount or All",
    ),
    (
        "zero count",
        (*EX0, "count"),
        0,
        "spec.devices.requests[0].exactly.count",
        "greater than zero",
    ),
    (
        "negative count",
        (*EX0, "count"),
        -2,
        "spec.devices.requests[0].exactly.count",
        "integer from 0",
    ),
    (
        "count with All",
        (*EX0, "allocationMode"),
        "All",
        "spec.devices.requests[0].exactly.count",
        "must not be set",
    ),
    (
        "admin access not a bool",
        (*EX0, "adminAccess"),
        "yes",
        "spec.devices.requests[0].exactly.adminAccess",
        "boolean",
    ),
    (
        "selector without cel",
        (*EX0, "selectors", 0),
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel",
        "is required",
    ),
    (
        "unknown toleration operator",
        (*EX0, "tolerations", 0, "operator"),
        "Like",
        "spec.devices.requests[0].exactly.tolerations[0].operator",
        "Equal or Exists",
    ),
    (
        "Exists with a value",
        (*EX0, "tolerations", 0, "value"),
        "v",
        "spec.devices.requests[0].exactly.tolerations[0].value",
        "must be empty",
    ),
    (
        "unknown toleration effect",
        (*EX0, "tolerations", 0, "effect"),
        "Sometimes",
        "spec.devices.requests[0].exactly.tolerations[0].effect",
        "NoSchedule",
    ),
    (
        "toleration key not a label",
        (*EX0, "tolerations", 0, "key"),
        "a b",
        "spec.devices.requests[0].exactly.tolerations[0].key",
        "label name",
    ),
    (
        "too many tolerations",
        (*EX0, "tolerations"),
        [toleration("k")] * 17,
        "spec.devices.requests[0].exactly.tolerations",
        "at most 16",
    ),
    (
        "capacity not a quantity",
        (*EX0, "capacity", "requests", "memory"),
        "much",
        "spec.devices.requests[0].exactly.capacity.requests[memory]",
        "invalid quantity",
    ),
    (
        "capacity name not an identifier",
        (*EX0, "capacity", "requests"),
        {"mem ory": "1"},
        "spec.devices.requests[0].exactly.capacity.requests[mem ory]",
        "C identifier",
    ),
    (
        "nine alternatives",
        SUB,
        [exact(name=f"s{i}") for i in range(9)],
        "spec.devices.requests[1].firstAvailable",
        "at most 8",
    ),
    (
        "alternative without name",
        (*SUB, 0, "name"),
        DELETE,
        "spec.devices.requests[1].firstAvailable[0].name",
        "is required",
    ),
    (
        "duplicate alternative",
        (*SUB, 1, "name"),
        "h200",
        "spec.devices.requests[1].firstAvailable[1].name",
        "duplicate subrequest",
    ),
    (
        "alternative without class",
        (*SUB, 0, "deviceClassName"),
        DELETE,
        "spec.devices.requests[1].firstAvailable[0].deviceClassName",
        "is required",
    ),
    (
        "constraint without attribute",
        (*C0, "matchAttribute"),
        DELETE,
        "spec.devices.constraints[0]",
        "exactly one of matchAttribute",
    ),
    (
        "constraint with both",
        (*C0, "distinctAttribute"),
        f"{DRIVER}/uuid",
        "spec.devices.constraints[0]",
        "exactly one of matchAttribute",
    ),
    (
        "unqualified attribute",
        (*C0, "matchAttribute"),
        "pcieRoot",
        "spec.devices.constraints[0].matchAttribute",
        "separated by '/'",
    ),
    (
        "unknown request",
        (*C0, "requests"),
        ["nope"],
        "spec.devices.constraints[0].requests[0]",
        "name of a request",
    ),
    (
        "subrequest of an exact request",
        (*C0, "requests"),
        ["gpus/x"],
        "spec.devices.constraints[0].requests[0]",
        "name of a request",
    ),
    (
        "repeated request",
        (*C0, "requests"),
        ["gpus", "gpus"],
        "spec.devices.constraints[0].requests",
        "must not repeat",
    ),
    (
        "too many constraints",
        ("spec", "devices", "constraints"),
        [{"matchAttribute": "a.b/c"}] * 33,
        "spec.devices.constraints",
        "at most 32",
    ),
    (
        "config for no request",
        ("spec", "devices", "config", 0, "requests"),
        ["nope"],
        "spec.devices.config[0].requests[0]",
        "name of a request",
    ),
    (
        "config without driver",
        ("spec", "devices", "config", 0, "opaque", "driver"),
        DELETE,
        "spec.devices.config[0].opaque.driver",
        "is required",
    ),
    (
        "reserved but not allocated",
        ("status", "allocation"),
        DELETE,
        "status.reservedFor",
        "not allocated",
    ),
    (
        "too many results",
        RES,
        [result("gpus", f"gpu-{i}") for i in range(33)],
        "status.allocation.devices.results",
        "at most 32",
    ),
    (
        "result for no request",
        (*RES, 0, "request"),
        "nope",
        "status.allocation.devices.results[0].request",
        "name of a request",
    ),
    (
        "result without driver",
        (*RES, 0, "driver"),
        DELETE,
        "status.allocation.devices.results[0].driver",
        "is required",
    ),
    (
        "result pool not a name",
        (*RES, 0, "pool"),
        "Node A",
        "status.allocation.devices.results[0].pool",
        "DNS subdomains",
    ),
    (
        "result device not a label",
        (*RES, 0, "device"),
        "GPU 0",
        "status.allocation.devices.results[0].device",
        "DNS label",
    ),
    (
        "share not a UUID",
        (*RES, 1, "shareID"),
        "share-1",
        "status.allocation.devices.results[1].shareID",
        "UUID",
    ),
    (
        "consumed not a quantity",
        (*RES, 1, "consumedCapacity", "memory"),
        [],
        "status.allocation.devices.results[1].consumedCapacity[memory]",
        "quantity",
    ),
    (
        "config without source",
        ("status", "allocation", "devices", "config", 0, "source"),
        DELETE,
        "status.allocation.devices.config[0].source",
        "is required",
    ),
    (
        "config of an unknown source",
        ("status", "allocation", "devices", "config", 0, "source"),
        "FromUser",
        "status.allocation.devices.config[0].source",
        "FromClass or FromClaim",
    ),
    (
        "allocation time not a time",
        ("status", "allocation", "allocationTimestamp"),
        "now",
        "status.allocation.allocationTimestamp",
        "timestamp",
    ),
    (
        "allocation selector bad",
        (
            "status",
            "allocation",
            "nodeSelector",
            "nodeSelectorTerms",
            0,
            "matchFields",
            0,
            "operator",
        ),
        "Exists",
        "status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].operator",
        "In or NotIn",
    ),
    (
        "consumer without uid",
        ("status", "reservedFor", 0, "uid"),
        DELETE,
        "status.reservedFor[0].uid",
        "is required",
    ),
    (
        "consumer without resource",
        ("status", "reservedFor", 0, "resource"),
        DELETE,
        "status.reservedFor[0].resource",
        "is required",
    ),
    (
        "same consumer twice",
        ("status", "reservedFor"),
        [pod_ref("a", "u"), pod_ref("b", "u")],
        "status.reservedFor[1].uid",
        "duplicate consumer",
    ),
    (
        "too many consumers",
        ("status", "reservedFor"),
        [pod_ref(f"p{i}", f"u{i}") for i in range(257)],
        "status.reservedFor",
        "at most 256",
    ),
    (
        "finalizers not a list",
        ("metadata", "finalizers"),
        "x",
        "metadata.finalizers",
        "must be a list",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [case[1:] for case in BAD_CLAIMS],
    ids=[case[0] for case in BAD_CLAIMS],
)
def test_a_bad_claim_field_is_reported_under_its_path(
    path: tuple[Any, ...], value: Any, field: str, fragment: str
) -> None:
    only_error(parse_resource_claim(changed(CLAIM, path, value)).errors, field, fragment)


def test_a_bad_request_is_left_out_of_the_spec() -> None:
    parsed = parse_resource_claim(changed(CLAIM, (*EX0, "count"), 0))
    assert [r.name for r in parsed.spec.requests] == ["fallback", "monitor"]
    assert [e.field for e in parsed.errors] == ["spec.devices.requests[0].exactly.count"]
    assert len(parsed.spec.constraints) == 2  # "gpus" is still a name of the claim


def test_huge_claims_give_bounded_errors() -> None:
    many = [request("R" * 100_000, {"deviceClassName": "C" * 100_000})] * 32
    parsed = parse_resource_claim(changed(CLAIM, ("spec", "devices", "requests"), many))
    assert len(parsed.errors) <= 32
    assert all(len(str(error)) <= MAX_MESSAGE for error in parsed.errors)


def test_capacity_requests_keep_the_published_spelling() -> None:
    spec = claim_spec(request("r", exact(capacity={"requests": {f"{DRIVER}/memory": "1Gi"}})))
    exactly = parse_resource_claim(resource_claim("c", spec=spec)).spec.requests[0].exactly
    assert exactly is not None and exactly.capacity_requests == {f"{DRIVER}/memory": Decimal(GiB)}


# -- the claim names of a pod ----------------------------------------------------------------

WAITING = 'pod "team-a/trainer": ResourceClaim not created yet'


@pytest.mark.parametrize(
    ("claims", "statuses", "expected"),
    [
        (
            [{"name": "gpu", "resourceClaimName": "shared-gpus"}],
            [],
            [PodClaim("gpu", "shared-gpus")],
        ),
        (
            [{"name": "gpu", "resourceClaimTemplateName": "gpus"}],
            [{"name": "gpu", "resourceClaimName": "trainer-gpu-x7k2p"}],
            [PodClaim("gpu", "trainer-gpu-x7k2p", from_template=True)],
        ),
        (
            [{"name": "gpu", "resourceClaimTemplateName": "gpus"}],
            [{"name": "gpu"}],
            [PodClaim("gpu", "", from_template=True)],
        ),
        (
            [{"name": "gpu", "resourceClaimTemplateName": "gpus"}],
            [{"name": "other", "resourceClaimName": "x"}],
            [PodClaim("gpu", waiting=WAITING)],
        ),
        (
            [
                {"name": "a", "resourceClaimName": "ca"},
                {"name": "b", "resourceClaimTemplateName": "t"},
                {"name": "c", "resourceClaimTemplateName": "t"},
            ],
            [{"name": "c", "resourceClaimName": "cc"}],
            [PodClaim("a", "ca"), PodClaim("b", waiting=WAITING), PodClaim("c", "cc", True)],
        ),
    ],
    ids=["direct", "template-created", "template-not-needed", "template-waiting", "mixed"],
)
def test_pod_claim_names(
    claims: list[dict[str, Any]], statuses: list[dict[str, Any]], expected: list[PodClaim]
) -> None:
    found = pod_claim_names(pod_with_claims("trainer", claims, statuses, namespace="team-a"))
    assert found.errors == ()
    assert list(found.claims) == expected
    assert found.names == tuple(c.claim_name for c in expected if c.claim_name)
    assert found.waiting == next((c.waiting for c in expected if c.waiting), "")


def test_a_pod_without_claims_waits_for_nothing() -> None:
    found = pod_claim_names({"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert found.claims == () and found.waiting == "" and found.errors == ()


def test_an_entry_with_neither_field_is_an_error_and_waits_with_upstreams_words() -> None:
    found = pod_claim_names(pod_with_claims("trainer", [{"name": "gpu"}], namespace="team-a"))
    only_error(found.errors, "spec.resourceClaims[0]", "one of resourceClaimName")
    assert found.waiting == (
        'pod "team-a/trainer", spec.resourceClaim "gpu": none of the supported fields are set'
    )


def test_an_entry_with_both_fields_is_an_error_and_uses_the_claim_name() -> None:
    both = {"name": "gpu", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}
    found = pod_claim_names(pod_with_claims("p", [both]))
    only_error(found.errors, "spec.resourceClaims[0]", "at most one of")
    assert found.names == ("c",)


@pytest.mark.parametrize(
    ("pod", "field", "fragment"),
    [
        (
            pod_with_claims("p", [{"resourceClaimName": "c"}]),
            "spec.resourceClaims[0].name",
            "is required",
        ),
        (
            pod_with_claims("p", [{"name": "GPU", "resourceClaimName": "c"}]),
            "spec.resourceClaims[0].name",
            "DNS label",
        ),
        (pod_with_claims("p", ["gpu"]), "spec.resourceClaims[0]", "must be an object"),
        (
            pod_with_claims("p", [{"name": "g", "resourceClaimName": 5}]),
            "spec.resourceClaims[0].resourceClaimName",
            "string",
        ),
        (
            pod_with_claims("p", [], [{"resourceClaimName": "c"}]),
            "status.resourceClaimStatuses[0].name",
            "is required",
        ),
        ({"spec": {"resourceClaims": {}}}, "spec.resourceClaims", "must be a list"),
    ],
)
def test_bad_pod_claim_fields_are_reported(pod: dict[str, Any], field: str, fragment: str) -> None:
    only_error(pod_claim_names(pod).errors, field, fragment)
