"""The fault suite's invariant checker on plain pod and node dicts."""

from __future__ import annotations

from typing import Any

from hack.faults.invariants import (
    GPU_ANNOTATION,
    IDLE_SECONDS,
    IDLE_THRESHOLD,
    MIN_PRIORITY,
    TOLERATION,
    USAGE_ANNOTATION,
    Eviction,
    check_binds,
    check_capacity,
    check_eviction,
    check_fitting_bound,
    check_gpu_indices,
    check_needless_evictions,
    check_reserved_gpus,
    check_stale_writes,
    check_state,
    evictions_from_log,
    mean_usage,
    parse_records,
    pdb_forbids,
    pod_requests,
    pods_on_missing_nodes,
)

T0 = 1_700_000_000.0
T0_ISO = "2023-11-14T22:13:20Z"


def node(
    name: str, gpus: int = 8, cpu: str = "8", memory: str = "64Gi", **extra: Any
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    allocatable.update(extra.pop("allocatable", {}))
    return {
        "metadata": {"name": name, "labels": {"pool": "a", **extra.pop("labels", {})}},
        "spec": extra.pop("spec", {}),
        "status": {"allocatable": allocatable},
    }


def pod(
    name: str,
    gpus: int = 1,
    on: str | None = None,
    indices: str | None = None,
    phase: str = "Running",
    scheduler: str = "ours",
    cpu: str = "100m",
    **extra: Any,
) -> dict[str, Any]:
    annotations = dict(extra.pop("annotations", {}))
    if indices is not None:
        annotations[GPU_ANNOTATION] = indices
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    limits.update(extra.pop("limits", {}))
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "nodeSelector": {"pool": "a"},
        "containers": [
            {
                "name": "main",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": limits},
            }
        ],
        **extra.pop("spec", {}),
    }
    if on:
        spec["nodeName"] = on
    status: dict[str, Any] = {"phase": phase if on else "Pending"}
    if on:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0_ISO},
            {"type": "Ready", "status": "True"},
        ]
    metadata = {
        "name": name,
        "namespace": "ns",
        "annotations": annotations,
        "labels": extra.pop("labels", {}),
    }
    metadata.update(extra.pop("metadata", {}))
    return {"metadata": metadata, "spec": spec, "status": status}


def names(violations: list[Any]) -> list[tuple[str, str]]:
    return [(v.invariant, v.subject) for v in violations]


# -- requests ------------------------------------------------------------------------------------


def test_requests_count_limits_of_extended_resources_init_containers_and_overhead() -> None:
    p = pod("a", gpus=2, cpu="1500m")
    p["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "3"}, "limits": {"nvidia.com/gpu": "1"}}}
    ]
    p["spec"]["overhead"] = {"cpu": "250m"}
    requests = pod_requests(p)
    assert requests["cpu"] == 3250  # max(1500, 3000) + 250 millicores
    assert requests["nvidia.com/gpu"] == 2
    assert requests["memory"] == 2**30
    assert requests["pods"] == 1


# -- capacity ------------------------------------------------------------------------------------


def test_capacity_holds_when_full_and_fails_one_over() -> None:
    nodes = [node("n1", gpus=4)]
    full = [pod("a", 2, on="n1"), pod("b", 2, on="n1")]
    assert check_capacity(full, nodes) == []
    over = [*full, pod("c", 1, on="n1")]
    (violation,) = check_capacity(over, nodes)
    assert (violation.invariant, violation.subject) == ("over_capacity", "n1")
    assert "nvidia.com/gpu: 5 bound > 4 allocatable" in violation.detail


def test_capacity_counts_every_scheduler_and_terminating_but_not_finished_pods() -> None:
    nodes = [node("n1", gpus=2)]
    theirs = pod("theirs", 1, on="n1", scheduler="default-scheduler")
    leaving = pod("leaving", 1, on="n1", metadata={"deletionTimestamp": T0_ISO})
    done = pod("done", 2, on="n1", phase="Succeeded")
    assert check_capacity([theirs, leaving, done], nodes) == []
    assert names(check_capacity([theirs, leaving, pod("x", 1, on="n1")], nodes)) == [
        ("over_capacity", "n1")
    ]


def test_capacity_checks_cpu_memory_pods_and_mig_slices() -> None:
    mig = "nvidia.com/mig-1g.10gb"
    nodes = [node("n1", gpus=0, cpu="1", allocatable={mig: "2", "pods": "2"})]
    pods = [pod(f"p{i}", 0, on="n1", cpu="400m", limits={mig: "1"}) for i in range(3)]
    found = {v.detail.split(":")[0] for v in check_capacity(pods, nodes)}
    assert found == {"cpu", "pods", mig}


def test_pods_on_a_deleted_node_are_not_over_capacity() -> None:
    assert check_capacity([pod("a", 9, on="gone")], [node("n1")]) == []


# -- GPU indices ---------------------------------------------------------------------------------


def test_gpu_index_shared_by_two_pods_is_reported_once_per_index() -> None:
    nodes = [node("n1", gpus=4)]
    pods = [pod("a", 2, on="n1", indices="0,1"), pod("b", 2, on="n1", indices="1,2")]
    (violation,) = check_gpu_indices(pods, nodes)
    assert violation.subject == "n1"
    assert violation.detail == "GPU 1 held by ns/a, ns/b"


def test_gpu_index_reuse_after_a_pod_finished_is_fine_and_out_of_range_is_not() -> None:
    nodes = [node("n1", gpus=2)]
    pods = [
        pod("old", 1, on="n1", indices="0", phase="Succeeded"),
        pod("new", 1, on="n1", indices="0"),
    ]
    assert check_gpu_indices(pods, nodes) == []
    (violation,) = check_gpu_indices([pod("far", 1, on="n1", indices="5")], nodes)
    assert "GPU 5" in violation.detail and "not one of 2" in violation.detail


# -- binds ---------------------------------------------------------------------------------------


def test_a_pod_bound_twice_in_the_logs_is_reported() -> None:
    records = [
        {"event": "pod_bound", "pod": "ns/a", "node": "n1"},
        {"event": "pod_placed", "pod": "ns/a", "node": "n1"},
        {"event": "pod_bound", "pod": "ns/b", "node": "n1"},
        {"event": "pod_bound", "pod": "ns/a", "node": "n1"},
    ]
    pods = [pod("a", on="n1"), pod("b", on="n1")]
    assert names(check_binds(records, pods)) == [("bound_twice", "ns/a")]


def test_a_bind_logged_to_another_node_than_the_api_says_is_reported() -> None:
    records = [{"event": "pod_bound", "pod": "ns/a", "node": "n2"}]
    assert names(check_binds(records, [pod("a", on="n1")])) == [("bound_elsewhere", "ns/a")]
    assert check_binds(records, []) == []  # deleted since: nothing to compare


def test_check_state_combines_the_instant_invariants() -> None:
    nodes = [node("n1", gpus=1)]
    pods = [pod("a", 1, on="n1", indices="0"), pod("b", 1, on="n1", indices="0")]
    found = {v.invariant for v in check_state(pods, nodes)}
    assert found == {"over_capacity", "gpu_shared"}


# -- fitting pending pods ------------------------------------------------------------------------


def test_a_pending_pod_that_fits_is_reported_and_one_that_does_not_is_not() -> None:
    nodes = [node("n1", gpus=4)]
    bound = pod("a", 2, on="n1")
    assert names(check_fitting_bound([bound, pod("fits", 2)], nodes, ["ours"])) == [
        ("fitting_pending", "ns/fits")
    ]
    assert check_fitting_bound([bound, pod("big", 4)], nodes, ["ours"]) == []


def test_fitting_ignores_other_schedulers_selected_away_tainted_cordoned_and_deleting() -> None:
    free = node("n1", gpus=8)
    others = pod("others", 1, scheduler="default-scheduler")
    elsewhere = pod("elsewhere", 1, spec={"nodeSelector": {"pool": "b"}})
    deleting = pod("deleting", 1, metadata={"deletionTimestamp": T0_ISO})
    assert check_fitting_bound([others, elsewhere, deleting], [free], ["ours"]) == []
    tainted = node("n2", spec={"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]})
    cordoned = node("n3", spec={"unschedulable": True})
    assert check_fitting_bound([pod("p", 1)], [tainted, cordoned], ["ours"]) == []
    tolerant = pod("t", 1, spec={"tolerations": [{"key": "k", "operator": "Exists"}]})
    assert names(check_fitting_bound([tolerant], [tainted], ["ours"])) == [
        ("fitting_pending", "ns/t")
    ]


# -- evictions -----------------------------------------------------------------------------------


def priority_class(
    name: str, minimum: int = 500, toleration: int = 0, threshold: int = 10
) -> dict[str, Any]:
    annotations = {
        MIN_PRIORITY: str(minimum),
        TOLERATION: str(toleration),
        IDLE_SECONDS: "10",
        IDLE_THRESHOLD: str(threshold),
    }
    return {"metadata": {"name": name, "annotations": annotations}, "value": 1000}


def victim(
    name: str = "v", usage: str = "constant:util=0", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return pod(
        name,
        2,
        on="n1",
        annotations={USAGE_ANNOTATION: usage},
        labels=labels or {},
        spec={"priorityClassName": "idle-ok"},
    )


CLASSES = {
    "idle-ok": priority_class("idle-ok"),
    "tolerant": priority_class("tolerant", toleration=3600),
}


def test_an_idle_eligible_victim_is_a_good_eviction() -> None:
    assert check_eviction(Eviction(victim(), T0 + 60, 500), CLASSES) == []


def test_busy_victim_policyless_victim_and_low_preemptor_are_bad_evictions() -> None:
    busy = Eviction(victim(usage="constant:util=70"), T0 + 60, 500)
    assert "busy: usage 70 %" in check_eviction(busy, CLASSES)[0].detail
    aliased = Eviction(victim(usage="periodic:period=1,duty=0.5,level=100"), T0 + 60, 500)
    assert "busy" in check_eviction(aliased, CLASSES)[0].detail
    plain = victim()
    plain["spec"]["priorityClassName"] = "protected"
    (violation,) = check_eviction(Eviction(plain, T0 + 60, 500), CLASSES)
    assert violation.detail == "PriorityClass 'protected' has no valid policy"
    (low,) = check_eviction(Eviction(victim(), T0 + 60, 100), CLASSES)
    assert low.detail == "preemptor priority 100 < minimum 500"


def test_a_victim_within_its_toleration_is_a_bad_eviction() -> None:
    young = victim()
    young["spec"]["priorityClassName"] = "tolerant"
    (violation,) = check_eviction(Eviction(young, T0 + 60, 500), CLASSES)
    assert violation.detail == "within toleration 3600 s (ran 60.0 s)"
    assert check_eviction(Eviction(young, T0 + 3601, 500), CLASSES) == []


def test_pdb_protection_follows_min_available_and_max_unavailable() -> None:
    guarded = victim("g1", labels={"app": "g"})
    other = victim("g2", labels={"app": "g"})
    min_one = {
        "metadata": {"name": "keep", "namespace": "ns"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "g"}}},
    }
    assert pdb_forbids(guarded, [min_one], [guarded]) == "keep"
    assert pdb_forbids(guarded, [min_one], [guarded, other]) is None
    none_down = {
        "metadata": {"name": "zero", "namespace": "ns"},
        "spec": {"maxUnavailable": "0%", "selector": {"matchLabels": {"app": "g"}}},
    }
    assert pdb_forbids(guarded, [none_down], [guarded, other]) == "zero"
    elsewhere = {"metadata": {"name": "keep", "namespace": "other"}, "spec": min_one["spec"]}
    assert pdb_forbids(guarded, [elsewhere], [guarded]) is None
    (violation,) = check_eviction(Eviction(guarded, T0 + 60, 500), CLASSES, [min_one], [guarded])
    assert violation.detail == "PodDisruptionBudget keep forbade it"


def test_mean_usage_of_scripted_shapes() -> None:
    assert mean_usage(None) == 0.0
    assert mean_usage("constant:util=30") == 30.0
    assert mean_usage("periodic:period=1,duty=0.1,level=100,phase=0.3") == 10.0
    assert mean_usage("trace:phase=train") is None


def test_evictions_join_log_records_with_the_pods_seen() -> None:
    lines = [
        "not json",
        '{"event": "reclaim_evict", "pod": "ns/v", "preemptor": "ns/p", "result": "evicted", '
        '"timestamp": "2023-11-14T22:14:20Z"}',
        '{"event": "reclaim_evict", "pod": "ns/w", "preemptor": "ns/p", "result": "blocked"}',
        '{"event": "reclaim_evict", "pod": "ns/ghost", "preemptor": "ns/p", "result": "evicted"}',
    ]
    records = list(parse_records(lines))
    preemptor = pod("p", 2, spec={"priority": 500})
    evictions, unknown = evictions_from_log(records, {"ns/v": victim(), "ns/p": preemptor})
    assert names(unknown) == [("bad_eviction", "ns/ghost")]
    (eviction,) = evictions
    assert eviction.evicted_at == T0 + 60
    assert eviction.preemptor_priority == 500
    assert check_eviction(eviction, CLASSES) == []


def test_writes_after_a_pause_past_the_lease_are_stale_until_elected_again() -> None:
    records = [
        {"event": "pod_bound", "pod": "ns/before", "timestamp": "2023-11-14T22:13:10Z"},
        {"event": "pod_bound", "pod": "ns/stale", "timestamp": "2023-11-14T22:13:21Z"},
        {
            "event": "reclaim_evict",
            "pod": "ns/v",
            "result": "evicted",
            "timestamp": "2023-11-14T22:13:22Z",
        },
        {
            "event": "reclaim_evict",
            "pod": "ns/w",
            "result": "gone",
            "timestamp": "2023-11-14T22:13:22Z",
        },
        {"event": "leader_elected", "timestamp": "2023-11-14T22:13:30Z"},
        {"event": "pod_bound", "pod": "ns/fine", "timestamp": "2023-11-14T22:13:31Z"},
    ]
    found = check_stale_writes(records, since=T0)
    assert [(v.subject, v.detail) for v in found] == [
        ("ns/stale", "bound after losing the Lease"),
        ("ns/v", "evicted after losing the Lease"),
    ]


def test_pods_on_missing_nodes_are_ours_only() -> None:
    pods = [pod("a", on="gone"), pod("b", on="n1"), pod("c", on="gone", scheduler="theirs")]
    assert pods_on_missing_nodes(pods, [node("n1")], ["ours"]) == ["ns/a"]


def test_an_eviction_whose_preemptor_did_not_land_there_is_needless() -> None:
    records = [
        {
            "event": "reclaim_evict",
            "pod": "ns/v1",
            "preemptor": "ns/p",
            "node": "n1",
            "result": "evicted",
        },
        {
            "event": "reclaim_evict",
            "pod": "ns/v2",
            "preemptor": "ns/q",
            "node": "n1",
            "result": "evicted",
        },
        {
            "event": "reclaim_evict",
            "pod": "ns/v3",
            "preemptor": "ns/r",
            "node": "n1",
            "result": "blocked",
        },
        {
            "event": "reclaim_evict",
            "pod": "ns/v4",
            "preemptor": "ns/gone",
            "node": "n1",
            "result": "evicted",
        },
    ]
    pods = [pod("p", on="n1"), pod("q"), pod("r")]
    found = check_needless_evictions(records, pods)
    assert [(v.subject, v.detail) for v in found] == [
        ("ns/v2", "evicted on n1 for ns/q, which is still pending")
    ]


def test_gpus_the_scheduler_keeps_reserved_for_no_bound_pod_are_reported() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("p", gpus=2, on="a"), pod("q", gpus=1, on="a", phase="Succeeded")]
    assert check_reserved_gpus({"a": 2.0, "b": 0.0, "gone": 5.0}, pods, nodes) == []
    (found,) = check_reserved_gpus({"a": 2.0, "b": 7.0}, pods, nodes)
    assert (found.invariant, found.subject) == ("reserved_gpus", "b")
    assert "counts 7 GPUs allocated, bound pods hold 0" in found.detail


def test_an_answer_after_the_pause_to_a_write_sent_before_it_is_not_stale() -> None:
    binding = "/api/v1/namespaces/ns/pods/{}/binding"
    records = [
        {"event": "write_failed", "path": binding.format("early"), "sent": True,
         "sent_at": "2023-11-14T22:13:19Z", "timestamp": "2023-11-14T22:13:21Z"},
        {"event": "pod_bound", "pod": "ns/early", "timestamp": "2023-11-14T22:13:21Z"},
        {"event": "write_failed", "path": binding.format("never"), "sent": False,
         "sent_at": None, "timestamp": "2023-11-14T22:13:21Z"},
        {"event": "write_done", "path": binding.format("late"), "status": 201,
         "sent_at": "2023-11-14T22:13:22Z", "timestamp": "2023-11-14T22:13:22Z"},
        {"event": "pod_bound", "pod": "ns/late", "timestamp": "2023-11-14T22:13:22Z"},
        {"event": "leader_elected", "timestamp": "2023-11-14T22:13:30Z"},
        {"event": "write_done", "path": binding.format("after"), "status": 201,
         "sent_at": "2023-11-14T22:13:31Z", "timestamp": "2023-11-14T22:13:31Z"},
    ]  # fmt: skip
    found = check_stale_writes(records, since=T0)
    assert [(v.subject, v.detail) for v in found] == [
        (binding.format("late"), "sent after losing the Lease"),
        ("ns/late", "bound after losing the Lease"),
    ]
