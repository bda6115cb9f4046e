"""The pure half of VolumeBinding: parsing claims, volumes and classes, kube-scheduler's
FindMatchingVolume for one claim, distinct PVs for a pod's claims, and the store's assumptions."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.fields import FieldError
from scheduler.model.volumes import (
    Claim,
    ClaimRef,
    Volume,
    VolumeStore,
    find_matching_volume,
    match_claims,
    parse_claim,
    parse_class,
    parse_volume,
    pod_claims,
)
from tests.volume_objects import make_claim, make_class, make_volume


def claim(name: str = "c", **kwargs: Any) -> Claim:
    return parse_claim(make_claim(name, kwargs.pop("storage_class", "local"), **kwargs))


def volume(name: str, **kwargs: Any) -> Volume:
    return parse_volume(make_volume(name, kwargs.pop("storage_class", "local"), **kwargs))


def always(_: Volume) -> bool:
    return True


def names(found: Volume | None) -> str | None:
    return found.name if found is not None else None


# -- parsing ----------------------------------------------------------------------------------


def test_a_claim_is_bound_only_with_a_volume_name_and_bind_completed() -> None:
    assert claim(volume_name="pv", bind_completed=True).bound
    assert not claim(volume_name="pv").bound
    assert not claim(bind_completed=True).bound


def test_claim_fields() -> None:
    parsed = claim(
        "data",
        request="2Gi",
        access_modes=["ReadWriteOnce", "ReadOnlyMany"],
        annotations={"volume.beta.kubernetes.io/storage-class": "beta"},
    )
    assert (parsed.key, parsed.class_name, parsed.request) == ("default/data", "beta", 2 << 30)
    assert parsed.access_modes == {"ReadWriteOnce", "ReadOnlyMany"}
    assert parsed.volume_mode == "Filesystem"
    assert parse_claim({}).class_name == ""


def test_a_malformed_request_is_an_error_not_a_crash() -> None:
    parsed = claim(request="lots")
    assert parsed.request == 0
    assert parsed.errors and "spec.resources.storage" in parsed.errors[0]


def test_volume_fields_and_node_affinity() -> None:
    parsed = volume("pv", capacity="10Gi", node="n1", claim=("ns", "c"), claim_uid="u")
    assert parsed.capacity == 10 << 30
    assert parsed.claim_ref == ClaimRef("ns", "c", "u")
    assert parsed.node_terms is not None
    [term] = parsed.node_terms
    assert [(r.key, r.operator, r.values) for r in term.expressions] == [
        ("kubernetes.io/hostname", "In", ("n1",))
    ]
    assert volume("free").node_terms is None


def test_class_fields() -> None:
    parsed = parse_class(
        make_class("fast", provisioner="csi.example.com", allowed_topologies=[("zone", ["a"])])
    )
    assert parsed.wait_for_first_consumer and parsed.provisions
    [term] = parsed.allowed_topologies
    assert [(r.key, r.operator, r.values) for r in term.expressions] == [("zone", "In", ("a",))]
    assert not parse_class(make_class("local")).provisions
    assert not parse_class(make_class("now", wait_for_first_consumer=False)).wait_for_first_consumer


def test_pod_claims_in_order_without_duplicates_and_a_missing_name_is_an_error() -> None:
    errors: list[FieldError] = []
    spec = {
        "volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "x"}},
            {"name": "b", "emptyDir": {}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "y"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "x"}},
            {"name": "e", "persistentVolumeClaim": {}},
        ]
    }
    assert pod_claims(spec, errors) == ("x", "y")
    assert [e.field for e in errors] == ["spec.volumes[4].persistentVolumeClaim.claimName"]


# -- FindMatchingVolume -----------------------------------------------------------------------


def test_the_smallest_large_enough_volume_is_chosen() -> None:
    pvs = [
        volume("big", capacity="10Gi"),
        volume("small", capacity="1Gi"),
        volume("mid", capacity="3Gi"),
    ]
    assert names(find_matching_volume(claim(request="2Gi"), pvs, always)) == "mid"


@pytest.mark.parametrize(
    ("pv", "why"),
    [
        (dict(capacity="512Mi"), "too small"),
        (dict(access_modes=["ReadOnlyMany"]), "access modes"),
        (dict(volume_mode="Block"), "volume mode"),
        (dict(phase="Released"), "not available"),
        (dict(phase=None), "no phase yet"),
        (dict(claim=("default", "other")), "bound to another claim"),
        (dict(storage_class="slow"), "another class"),
        (dict(labels={"tier": "cold"}), "selector"),
    ],
)
def test_volumes_that_do_not_match(pv: dict[str, Any], why: str) -> None:
    wanted = claim(selector={"matchLabels": {"tier": "hot"}})
    labels = pv.pop("labels", {"tier": "hot"})
    candidate = volume("pv", labels=labels, **pv)
    assert find_matching_volume(wanted, [candidate], always) is None, why
    assert find_matching_volume(wanted, [volume("ok", labels={"tier": "hot"})], always) is not None


def test_node_affinity_decides_per_node() -> None:
    pvs = [volume("a", node="n1"), volume("b", node="n2")]
    on_n2 = find_matching_volume(claim(), pvs, lambda v: v.name == "b")
    assert names(on_n2) == "b"
    assert find_matching_volume(claim(), pvs, lambda v: False) is None


def test_a_volume_prebound_to_the_claim_wins_whatever_its_size_and_phase() -> None:
    pvs = [
        volume("small", capacity="1Gi"),
        volume("mine", capacity="50Gi", phase="Pending", claim=("default", "c")),
    ]
    assert names(find_matching_volume(claim(), pvs, always)) == "mine"


def test_a_prebound_volume_that_does_not_fit_the_node_leaves_the_claim_without_one() -> None:
    pvs = [volume("mine", claim=("default", "c")), volume("other")]
    assert find_matching_volume(claim(), pvs, lambda v: v.name != "mine") is None


def test_a_claim_ref_with_another_uid_is_another_claim() -> None:
    pvs = [volume("pv", claim=("default", "c"), claim_uid="old")]
    assert find_matching_volume(claim(), pvs, always) is None


# -- distinct volumes for a pod's claims ------------------------------------------------------


def test_claims_take_distinct_volumes_smallest_claim_first() -> None:
    small, large = claim("small", request="1Gi"), claim("large", request="4Gi")
    pvs = [volume("pv4", capacity="4Gi"), volume("pv8", capacity="8Gi")]
    chosen, left = match_claims([large, small], lambda c: pvs, always)
    assert {k: v.name for k, v in chosen.items()} == {
        "default/small": "pv4",
        "default/large": "pv8",
    }
    assert left == []


def test_a_volume_is_never_given_to_two_claims() -> None:
    first, second = claim("a"), claim("b")
    pvs = [volume("only")]
    chosen, left = match_claims([first, second], lambda c: pvs, always)
    assert [v.name for v in chosen.values()] == ["only"]
    assert [c.name for c in left] == ["b"]


# -- the store --------------------------------------------------------------------------------


def test_an_assumed_volume_shows_until_the_informer_delivers_a_newer_version() -> None:
    store = VolumeStore()
    store.put_volume(volume("pv", version="5"))
    taken = Volume(**{**store.volumes["pv"].__dict__, "claim_ref": ClaimRef("default", "c", "u")})
    store.assume_volume("default/pod", taken)
    assert store.volume("pv") == taken
    assert store.put_volume(volume("pv", version="5")) is False  # a relist: same version
    assert store.volume("pv") == taken
    store.put_volume(volume("pv", version="6"))  # the write (or anyone's change) landed
    assert store.volume("pv") == store.volumes["pv"]
    assert store.revert("default/pod") == 0


def test_revert_gives_back_only_that_pods_assumptions() -> None:
    store = VolumeStore()
    store.put_volume(volume("a"))
    store.put_volume(volume("b"))
    ref = ClaimRef("default", "c")
    store.assume_volume("ns/p1", Volume(**{**store.volumes["a"].__dict__, "claim_ref": ref}))
    store.assume_volume("ns/p2", Volume(**{**store.volumes["b"].__dict__, "claim_ref": ref}))
    assert store.revert("ns/p1") == 1
    assert store.volume("a") == store.volumes["a"]
    assert store.volume("b") is not None and store.volume("b").claim_ref == ref  # type: ignore[union-attr]


def test_volumes_of_class_follow_class_changes_and_deletes() -> None:
    store = VolumeStore()
    store.put_volume(volume("b"))
    store.put_volume(volume("a"))
    store.put_volume(volume("c", storage_class="other"))
    assert [v.name for v in store.volumes_of_class("local")] == ["a", "b"]
    store.put_volume(volume("a", storage_class="other", version="2"))
    assert store.drop_volume("b")
    assert [v.name for v in store.volumes_of_class("local")] == []
    assert [v.name for v in store.volumes_of_class("other")] == ["a", "c"]


def test_only_changes_scheduling_reads_count() -> None:
    store = VolumeStore()
    assert store.put_claim(claim(version="1"))
    assert not store.put_claim(claim(version="2"))  # only the version moved
    assert store.put_claim(claim(version="3", volume_name="pv"))
    assert store.put_class(parse_class(make_class("local")))
    assert not store.put_class(parse_class(make_class("local")))
    assert store.drop_class("local") and not store.drop_class("local")
