"""The pure parts of the DRA differential: generation, FitError messages, verdicts, the cache
gpu-scheduler's side builds from listed objects, and the state fingerprint."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from hack.differential.compare import (
    FitMessage,
    Outcome,
    compare_messages,
    parse_fit_message,
)
from hack.differential.dra_generate import ADMIN_LABEL, DRA_FEATURES, DraScenario, generate_dra
from hack.differential.dra_ours import DraState, as_before, build_dra_cache, dra_verdict
from hack.differential.dra_run import dra_fingerprint
from hack.differential.ours import framework
from hack.localcluster import dra

Json = dict[str, Any]
UID = "uid-candidate"


def test_generation_is_seeded_and_uses_every_feature() -> None:
    one, again, other = generate_dra(3, 12, 40), generate_dra(3, 12, 40), generate_dra(4, 12, 40)
    assert [c.manifest for c in one.candidates] == [c.manifest for c in again.candidates]
    assert [c.claims for c in one.candidates] == [c.claims for c in again.candidates]
    assert [c.manifest for c in one.candidates] != [c.manifest for c in other.candidates]
    assert len(one.nodes) == 12 and len(one.candidates) == 40
    used = {f for c in generate_dra(1, 40, 300).candidates for f in c.features}
    assert used == set(DRA_FEATURES)


def _requests(spec: Json) -> list[Json]:
    found: list[Json] = []
    for request in spec["devices"]["requests"]:
        found.extend(request.get("firstAvailable") or [request.get("exactly")])
    return found


def test_generated_objects_keep_to_what_the_api_server_accepts_and_the_scenario_owns() -> None:
    scenario = generate_dra(1, 40, 300)
    admin = {
        n["metadata"]["name"] for n in scenario.namespaces if ADMIN_LABEL in n["metadata"]["labels"]
    }
    assert admin == {scenario.admin_namespace}
    pools = {s["spec"]["pool"]["name"] for s in scenario.slices}
    devices = {
        (s["spec"]["pool"]["name"], d["name"]): d
        for s in scenario.slices
        for d in s["spec"]["devices"]
    }
    # DeviceTaintRules name the scenario's own pools, never the whole cluster.
    assert all(r["spec"]["deviceSelector"]["pool"] in pools for r in scenario.taint_rules)
    # Existing claims hold distinct, untainted devices of their node, stamped as schedulers do.
    held = [
        (r["pool"], r["device"])
        for c in scenario.existing_claims
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(held) == len(set(held)) and all(h in devices for h in held)
    assert not any(devices[h].get("taints") for h in held)
    assert all(c["status"]["allocation"]["allocationTimestamp"] for c in scenario.existing_claims)
    templates = {t["metadata"]["name"]: t for t in scenario.templates}
    extended = [c for c in scenario.candidates if "extended-resource" in c.features]
    assert 0 < len(extended) < len(scenario.candidates) // 4
    for candidate in extended:  # nvidia.com/gpu, requests equal to limits, no claim
        assert not candidate.claims and "resourceClaims" not in candidate.manifest["spec"]
        [container] = candidate.manifest["spec"]["containers"]
        amounts = container["resources"]
        assert amounts["requests"]["nvidia.com/gpu"] == amounts["limits"]["nvidia.com/gpu"]
    for candidate in scenario.candidates:
        specs = [c["spec"] for c in candidate.claims]
        for entry in candidate.manifest["spec"].get("resourceClaims", ()):
            if "resourceClaimTemplateName" in entry:
                template = templates[entry["resourceClaimTemplateName"]]
                assert template["metadata"]["namespace"] == candidate.namespace
                specs.append(template["spec"]["spec"])
        assert all(c["metadata"]["namespace"] == candidate.namespace for c in candidate.claims)
        for request in itertools.chain.from_iterable(_requests(s) for s in specs):
            if request.get("adminAccess"):
                assert candidate.namespace == scenario.admin_namespace
            assert ("count" in request) == (request["allocationMode"] == "ExactCount")


def test_fit_messages_are_taken_apart_as_kube_scheduler_writes_them() -> None:
    head = "0/12 nodes are available:"
    histogram = (
        f"{head} 1 node(s) had untolerated taint {{dedicated: gpu}}, 11 cannot allocate all claims."
    )
    assert parse_fit_message(histogram) == FitMessage(
        12, {"node(s) had untolerated taint {dedicated: gpu}": 1, "cannot allocate all claims": 11}
    )
    prefilter = f"{head} request r0: device class x does not exist."
    assert parse_fit_message(prefilter) == FitMessage(
        12, {}, "request r0: device class x does not exist"
    )
    assert parse_fit_message('running Filter plugin "DynamicResources": no such key') is None
    # Order does not matter, counts and the node total do.
    reordered = f"{head} 11 cannot allocate all claims, 1 node(s) had untolerated taint(s)."
    assert compare_messages(reordered, histogram) == ""  # the taint's name is not compared
    two_taints = f"{head} 11 cannot allocate all claims, 1 node(s) had untolerated taint {{a: b}}."
    assert compare_messages(reordered, two_taints) == ""
    fewer = f"{head} 12 cannot allocate all claims."
    assert compare_messages(reordered, fewer)
    assert compare_messages(histogram, histogram.replace("0/12", "0/13"))
    assert compare_messages(histogram, prefilter)


def test_a_message_difference_fails_the_pod() -> None:
    """gpu-scheduler once skipped the allocator on a node where an allocated claim is not
    available and said "resourceclaim not available on the node" where kube-scheduler, which
    allocates first, says "cannot allocate all claims": such a difference is a disagreement."""
    head = "0/12 nodes are available:"
    kube = f"{head} 4 cannot allocate all claims, 8 resourceclaim not available on the node."
    order = f"{head} 1 cannot allocate all claims, 11 resourceclaim not available on the node."
    empty: frozenset[str] = frozenset()
    differs = Outcome("a/p", ("claim",), empty, empty, kube_message=kube, ours_message=order)
    same = Outcome("a/r", ("claim",), empty, empty, kube_message=kube, ours_message=kube)
    assert [o.verdict for o in (differs, same)] == ["disagree", "agree"]


def _state(scenario: DraScenario, claims: list[Json], pods: list[Json]) -> DraState:
    slices = copy.deepcopy(scenario.slices)
    for body in slices:
        body["metadata"]["ownerReferences"][0]["uid"] = "node-uid"
    classes = [dra.gpu_device_class(), *scenario.device_classes]
    return DraState(
        scenario.nodes, pods, scenario.namespaces, classes, slices, claims, scenario.taint_rules
    )


def _pod(namespace: str, claims: list[Json]) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "uid": UID},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": claims,
        },
    }


def _claim(name: str, namespace: str, count: int, class_name: str = dra.GPU_CLASS) -> Json:
    request = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "r0", "exactly": request}]}},
    }


def test_ours_judges_claims_against_the_listed_state_with_the_candidates_claims_as_created() -> (
    None
):
    scenario = generate_dra(5, 10, 0)
    namespace = scenario.namespace_names[0]
    gpu_nodes = {s["spec"]["nodeName"] for s in scenario.slices}
    names = {n["metadata"]["name"] for n in scenario.nodes}
    profile = framework()
    # The reference has allocated the candidate's claim meanwhile: gpu-scheduler must not see it.
    own = _claim("own", namespace, 1)
    own["status"] = {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": UID}],
    }
    cache = build_dra_cache(_state(scenario, [own], []), "x/p", {f"{namespace}/own"}, UID)
    answer = dra_verdict(
        _pod(namespace, [{"name": "c", "resourceClaimName": "own"}]), cache, profile
    )
    assert answer.feasible and answer.feasible <= gpu_nodes and not answer.error
    assert answer.feasible | set(answer.first_failure) == names
    # A class that does not exist: the PreFilter message, for every node.
    absent = _claim("absent", namespace, 1, class_name="no-such-class")
    cache = build_dra_cache(_state(scenario, [absent], []), "x/p", {f"{namespace}/absent"}, UID)
    answer = dra_verdict(
        _pod(namespace, [{"name": "c", "resourceClaimName": "absent"}]), cache, profile
    )
    assert not answer.feasible
    expected = "request r0: device class no-such-class does not exist"
    assert answer.message == f"0/{len(names)} nodes are available: {expected}."
    # More GPUs than any node has: a FitError histogram over every node.
    huge = _claim("huge", namespace, 16)
    cache = build_dra_cache(_state(scenario, [huge], []), "x/p", {f"{namespace}/huge"}, UID)
    answer = dra_verdict(
        _pod(namespace, [{"name": "c", "resourceClaimName": "huge"}]), cache, profile
    )
    parsed = parse_fit_message(answer.message)
    assert parsed is not None and sum(parsed.reasons.values()) == len(names)


def test_as_before_resets_own_claims_and_drops_only_the_candidates_reservation() -> None:
    other = {"resource": "pods", "name": "held", "uid": "uid-held"}
    mine = {"resource": "pods", "name": "p", "uid": UID}
    claim: Json = {
        "metadata": {"name": "c", "namespace": "n", "finalizers": ["f"]},
        "status": {"allocation": {"devices": {}}, "reservedFor": [other, mine]},
    }
    assert as_before(claim, True, UID)["status"] == {}
    assert "finalizers" not in as_before(claim, True, UID)["metadata"]
    kept = as_before(claim, False, UID)
    assert kept["status"]["reservedFor"] == [other] and kept["status"]["allocation"]
    assert claim["status"]["reservedFor"] == [other, mine]  # not modified in place


def test_fingerprint_ignores_the_candidates_claims_and_reservations_only() -> None:
    scenario = generate_dra(5, 6, 0)
    held = copy.deepcopy(scenario.existing_claims)
    base = dra_fingerprint(_state(scenario, held, []), "n/p", set(), "")
    reserved = copy.deepcopy(held)
    reserved[0]["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": UID}]
    own = _claim("own", "n", 2)
    own["status"] = {"allocation": {"devices": {"results": []}}}
    after = _state(scenario, [*reserved, own], [])
    assert dra_fingerprint(after, "n/p", {"n/own"}, UID) == base
    assert dra_fingerprint(after, "n/p", set(), UID) != base  # a claim nobody expected
    freed = copy.deepcopy(held)
    del freed[0]["status"]["allocation"]
    assert dra_fingerprint(_state(scenario, freed, []), "n/p", set(), "") != base
    tainted = _state(scenario, held, [])
    rules = [*tainted.rules, {"metadata": {"name": "extra"}, "spec": {}}]
    changed = DraState(*tainted.__dict__.values())
    object.__setattr__(changed, "rules", rules)
    assert dra_fingerprint(changed, "n/p", set(), "") != base
