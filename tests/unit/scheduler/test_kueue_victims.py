"""Kueue victims: the pod -> Workload link, the whole-Workload rule, the Workload lookup among
API objects and the deactivation patch (pure), and the Reclaimer's decisions with in-memory
doubles: a Kueue victim's Workload is deactivated instead of the pod evicted, once per
Workload; one that cannot be found or patched is never evicted as a plain pod."""

from __future__ import annotations

from typing import Any

import pytest

import scheduler.postfilter.kueue_takeback as kueue_plugin
import scheduler.postfilter.reclaim as reclaim_plugin
from scheduler.kube.apierrors import APIError
from scheduler.kube.fence import LEASE_TERM_ANNOTATION
from scheduler.kube.kueue_workloads import (
    DEACTIVATED_BY_ANNOTATION,
    DEACTIVATED_IN_TERM_ANNOTATION,
    JOB_UID_LABEL,
    MAX_ANNOTATION_CHARS,
    WorkloadNotFound,
    WorkloadRef,
    deactivation_patch,
    match_workload,
)
from scheduler.model.objects import parse_pod
from scheduler.postfilter.kueue_takeback import WORKLOAD_DEACTIVATED
from scheduler.victims.kueue import (
    KueueOwner,
    kueue_owner,
    partial_workloads,
)
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.reclaim_doubles import Rig, make_rig, pending_pod, victim_pod

JOB_A = {"kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/controller-uid": "job-a"}
JOB_B = {"kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/controller-uid": "job-b"}
PREEMPTOR = parse_pod(pending_pod(uid="uid-preemptor"))


def pod_info(name: str, labels: Any = None, annotations: Any = None, uid: str = "") -> Any:
    pod = make_pod(name, annotations=annotations)
    pod["metadata"]["labels"] = dict(labels or {})
    if uid:
        pod["metadata"]["uid"] = uid
    return parse_pod(pod)


# -- the pod -> Workload link ------------------------------------------------------------------


def test_a_plain_pod_is_not_kueue_managed() -> None:
    labels = {"batch.kubernetes.io/controller-uid": "j"}  # a Job Kueue does not manage
    assert kueue_owner(pod_info("p", labels=labels)) is None


def test_an_admitted_job_pod_links_to_its_job_uid() -> None:
    labels = {**JOB_A, "controller-uid": "job-a"}
    owner = kueue_owner(pod_info("p", labels=labels))
    assert owner == KueueOwner("default", ("job-a",), "")
    assert owner.key == "default/job-a"


def test_pod_integration_links_to_the_pod_or_its_group() -> None:
    pod = pod_info("p", labels={"kueue.x-k8s.io/managed": "true"}, uid="pod-uid")
    assert kueue_owner(pod) == KueueOwner("default", ("pod-uid",), "")
    grouped = pod_info(
        "q", labels={"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/pod-group-name": "g"}
    )
    owner = kueue_owner(grouped)
    assert owner is not None and owner.workload_name == "g" and owner.key == "default/g"


def test_the_workload_annotation_names_the_workload() -> None:
    pod = pod_info("p", annotations={"kueue.x-k8s.io/workload": "job-x-1"})
    owner = kueue_owner(pod)
    assert owner is not None and owner.workload_name == "job-x-1"


def test_a_workload_with_a_pod_that_is_not_idle_is_kept_whole() -> None:
    a, b = KueueOwner("ns", ("job-a",)), KueueOwner("ns", ("job-b",))
    owners = {"ns/a1": a, "ns/a2": a, "ns/b1": b}
    excluded = partial_workloads(["ns/a1", "ns/b1", "ns/plain"], owners)
    assert list(excluded) == ["ns/a1"]
    assert "ns/a2" in excluded["ns/a1"]
    assert partial_workloads(["ns/a1", "ns/a2"], owners) == {}


# -- the lookup and the patch ------------------------------------------------------------------


def workload(name: str, uid: str, owner_uid: str = "", label: str = "", active: bool = True) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid}
    if owner_uid:
        metadata["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": owner_uid}]
    if label:
        metadata["labels"] = {JOB_UID_LABEL: label}
    return {"metadata": metadata, "spec": {"active": active}}


def test_the_workload_is_matched_by_owner_reference_label_or_name() -> None:
    items = [workload("w-other", "u0", "job-x"), workload("w-b", "u2", label="job-b"),
             workload("w-a", "u1", "job-a", active=False)]  # fmt: skip
    assert match_workload(items, ["job-a"]) == WorkloadRef("ns", "w-a", "u1", False)
    assert match_workload(items, ["job-b"]) == WorkloadRef("ns", "w-b", "u2", True)
    assert match_workload(items, ["nobody"]) is None
    assert match_workload(items, [], "w-other") == WorkloadRef("ns", "w-other", "u0", True)
    assert match_workload(items, [""]) is None  # an empty UID matches nothing


def test_the_patch_deactivates_only_that_workload_and_says_why() -> None:
    patch = deactivation_patch("u1", "x" * 1000, "ns/lease/holder/3")
    assert patch["spec"] == {"active": False}
    assert patch["metadata"]["uid"] == "u1"
    annotations = patch["metadata"]["annotations"]
    assert annotations[DEACTIVATED_IN_TERM_ANNOTATION] == "ns/lease/holder/3"
    assert LEASE_TERM_ANNOTATION not in annotations  # would fence Kueue's own later updates
    assert len(annotations[DEACTIVATED_BY_ANNOTATION]) == MAX_ANNOTATION_CHARS
    assert deactivation_patch("u1", "why") == deactivation_patch("u1", "why")
    assert (
        DEACTIVATED_IN_TERM_ANNOTATION
        not in deactivation_patch("u1", "why")["metadata"]["annotations"]
    )


# -- the Reclaimer's decisions -----------------------------------------------------------------


class Kueue:
    """The Workload adapter's double: Workloads by owner UID, patches recorded, failures
    scripted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.workloads = {
            "job-a": WorkloadRef("default", "w-a", "uid-wa", True),
            "job-b": WorkloadRef("default", "w-b", "uid-wb", True),
        }
        self.deactivated: list[str] = []
        self.refuse: Exception | None = None
        monkeypatch.setattr(kueue_plugin, "find_workload", self.find)
        monkeypatch.setattr(kueue_plugin, "deactivate_workload", self.deactivate)

    async def find(
        self, custom: Any, namespace: str, owner_uids: Any, name: str = ""
    ) -> WorkloadRef:
        for uid in owner_uids:
            if uid in self.workloads:
                return self.workloads[uid]
        raise WorkloadNotFound(f"no Workload in namespace {namespace} for {owner_uids}")

    async def deactivate(self, custom: Any, ref: WorkloadRef, why: str) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.deactivated.append(ref.name)


def rig(monkeypatch: pytest.MonkeyPatch, *pods: Any) -> tuple[Rig, Kueue]:
    """Nodes a (2 GPUs) and b (1 GPU), full with `pods`; the preemptor wants 1 GPU."""
    nodes = [make_node("a", gpus=2, domains="0-1"), make_node("b", gpus=1, domains="0")]
    return make_rig(monkeypatch, cluster(*nodes, pods=pods)), Kueue(monkeypatch)


async def test_an_idle_kueue_victim_is_taken_back_through_its_workload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, kueue = rig(
        monkeypatch,
        victim_pod("a1", "a", labels=JOB_A, gpu_indices="0"),
        victim_pod("a2", "a", labels=JOB_A, gpu_indices="1"),
        victim_pod("b1", "b", labels=JOB_B),
    )
    node = await r.attempt(PREEMPTOR)
    assert node in ("a", "b")
    assert r.api.evicted == []  # no pod of a Kueue Workload is evicted
    taken = "w-a" if node == "a" else "w-b"
    assert kueue.deactivated == [taken]  # once per Workload
    stats = r.reclaimer.stats
    assert stats.evictions[WORKLOAD_DEACTIVATED] >= 1 and stats.evictions["evicted"] == 0
    (workload_note,) = [n for k, name, _, n in r.recorder.events if k == "Workload"]
    assert "for pod uid-preemptor of priority" in workload_note
    victim_notes = [
        n for k, _, reason, n in r.recorder.events if (k, reason) == ("Pod", "Reclaimed")
    ]
    assert victim_notes and all(
        n.startswith(f"Kueue Workload {taken} deactivated: ") for n in victim_notes
    )
    assert all(n.endswith("reclaimed for pod uid-preemptor of priority 1000") for n in victim_notes)


async def test_a_kueue_victim_whose_workload_is_missing_is_not_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unknown = {**JOB_B, "batch.kubernetes.io/controller-uid": "job-gone"}
    r, kueue = rig(
        monkeypatch, victim_pod("a1", "a", gpus=2), victim_pod("b1", "b", labels=unknown)
    )
    r.usage.gpus["a1"] = 2
    # b (1 GPU to take) is the better node, but its victim's Workload cannot be found: a instead.
    assert await r.attempt(PREEMPTOR) == "a"
    assert r.api.evicted == ["a1"]
    assert kueue.deactivated == []
    assert r.reclaimer.stats.skips["kueue_workload_unavailable"] == 1
    (note,) = [n for _, name, reason, n in r.recorder.events if name == "b1"]
    assert "its Kueue Workload could not be found" in note
    assert "job-gone" in note


async def test_a_refused_workload_patch_evicts_nothing_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, kueue = rig(monkeypatch, victim_pod("a1", "a", gpus=2, labels=JOB_A), victim_pod("b1", "b"))
    r.usage.gpus["a1"] = 2
    kueue.refuse = APIError(403, "workloads is forbidden", "Forbidden")
    r.api.results["b1"] = reclaim_plugin.EvictionResult.BLOCKED
    assert await r.attempt(PREEMPTOR) is None
    assert r.api.evicted == ["b1"]  # only the plain victim was tried, and refused too
    assert kueue.deactivated == []
    assert r.reclaimer.stats.evictions["failed"] == 1
    assert r.cache.reservation(PREEMPTOR.key) is None
    (note,) = [n for _, name, reason, n in r.recorder.events if name == "a1"]
    assert "deactivating its Kueue Workload default/w-a failed: 403" in note


async def test_a_kueue_victim_with_a_busy_sibling_is_not_weighed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    protected = victim_pod("a2", "a", labels=JOB_A, gpu_indices="1", klass="protected")
    r, kueue = rig(
        monkeypatch, victim_pod("a1", "a", labels=JOB_A, gpu_indices="0"), protected,
        victim_pod("b1", "b"),
    )  # fmt: skip
    assert await r.attempt(PREEMPTOR) == "b"
    assert r.api.evicted == ["b1"]
    assert kueue.deactivated == []
