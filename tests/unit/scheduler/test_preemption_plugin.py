"""The PostFilter's second step, priority preemption, over a real cache and framework with
in-memory API doubles: idle reclaim first, then the lowest-priority busy pods; Never; the
setting; budgets falling back to another node; events; the terminating-victim wait."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.kube.eviction import EvictionResult
from scheduler.model.objects import parse_pod
from tests.unit.scheduler.builders import cluster, make_node, make_pod
from tests.unit.scheduler.reclaim_doubles import (
    make_rig,
    pdb,
    pending_pod,
    victim_pod,
)

BUSY_CLASS = "batch"
"""A class without reclaim policy: its pods are never idle-reclaimed, only preempted."""


def busy_pod(name: str, node: str, priority: int, *, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    pod = victim_pod(name, node, gpus=gpus, klass=BUSY_CLASS, **kw)
    pod["spec"]["priority"] = priority
    return pod


def preemptor(**kw: Any) -> Any:
    return parse_pod(pending_pod(uid="uid-preemptor", **kw))


def one_gpu_nodes(*names: str) -> list[dict[str, Any]]:
    return [make_node(n, gpus=1, domains="0") for n in names]


async def test_lowest_priority_busy_pod_is_preempted_with_kube_scheduler_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        *one_gpu_nodes("a", "b"), pods=[busy_pod("pa", "a", 500), busy_pod("pb", "b", 100)]
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    pod = preemptor()
    assert await rig.attempt(pod) == "b"
    assert rig.api.evicted == ["pb"]
    assert rig.api.nominated == [("preemptor", "b")]
    assert rig.cache.reservation(pod.key) is not None
    assert rig.reclaimer.nominated_node(pod) == "b"
    victim_events = [e for e in rig.recorder.events if e[1] == "pb"]
    assert victim_events == [("Pod", "pb", "Preempted", "Preempted by pod uid-preemptor on node b")]
    (note,) = rig.recorder.notes("Preempting")
    assert "1 pod(s) on node b" in note and "1 of priority 100" in note


async def test_idle_pods_are_taken_before_busy_lower_priority_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Node a: a busy pod of the lowest priority; node b: an idle pod whose class allows reclaim.
    cache = cluster(
        *one_gpu_nodes("a", "b"), pods=[busy_pod("busy", "a", 1), victim_pod("idle", "b")]
    )
    rig = make_rig(monkeypatch, cache, preemption=True)
    assert await rig.attempt(preemptor()) == "b"
    assert rig.api.evicted == ["idle"]
    assert rig.recorder.reasons("idle") == ["Reclaimed"]
    assert "Preempting" not in [e[2] for e in rig.recorder.events]


async def test_preemption_follows_when_idle_reclaim_finds_nothing_idle_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(*one_gpu_nodes("a"), pods=[busy_pod("busy", "a", 1)])
    rig = make_rig(monkeypatch, cache, preemption=True)
    assert await rig.attempt(preemptor()) == "a"
    assert rig.api.evicted == ["busy"]
    assert rig.reclaimer.stats.skips["no_eligible_pods"] == 1


async def test_never_policy_never_preempts_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cluster(*one_gpu_nodes("a"), pods=[busy_pod("busy", "a", 1)])
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    raw = pending_pod(uid="uid-preemptor")
    raw["spec"]["preemptionPolicy"] = "Never"
    assert await rig.attempt(parse_pod(raw)) is None
    assert rig.api.evicted == [] and rig.api.nominated == []
    (note,) = rig.recorder.notes("FailedScheduling")
    assert note.endswith("preemption: not eligible due to preemptionPolicy=Never.")
    assert note.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")


async def test_setting_off_never_preempts(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cluster(*one_gpu_nodes("a"), pods=[busy_pod("busy", "a", 1)])
    rig = make_rig(monkeypatch, cache, mode="off", preemption=False)
    assert not rig.reclaimer.enabled
    assert await rig.attempt(preemptor()) is None
    rig = make_rig(monkeypatch, cache, mode="enforce", preemption=False)
    assert await rig.attempt(preemptor()) is None
    assert rig.api.evicted == []


async def test_equal_and_higher_priority_pods_are_never_victims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        *one_gpu_nodes("a", "b"), pods=[busy_pod("same", "a", 1000), busy_pod("more", "b", 2000)]
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    assert await rig.attempt(preemptor()) is None
    assert rig.api.evicted == []
    assert rig.reclaimer.preemption.outcomes == {"no_victims": 1}


async def test_budget_refusal_drops_the_node_and_preempts_on_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The guarded pod on a has the lower priority, so a is the best node by priority; the
    # API server refuses its eviction (429): the reservation goes, b is tried.
    cache = cluster(
        *one_gpu_nodes("a", "b"),
        pods=[
            busy_pod("guarded", "a", 100, labels={"app": "db"}),
            busy_pod("other", "b", 200),
        ],
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=1))
    rig.api.results["guarded"] = EvictionResult.BLOCKED
    pod = preemptor()
    assert await rig.attempt(pod) == "b"
    assert rig.api.evicted == ["guarded", "other"]
    assert rig.api.nominated == [("preemptor", "a"), ("preemptor", "b")]
    reservation = rig.cache.reservation(pod.key)
    assert reservation is not None and reservation.node == "b"
    assert rig.recorder.reasons("guarded") == []
    assert any("preemption on node a stopped" in n for n in rig.recorder.notes("ReclaimSkipped"))


async def test_node_needing_a_budget_violation_comes_after_one_that_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(
        *one_gpu_nodes("a", "b"),
        pods=[busy_pod("guarded", "a", 1, labels={"app": "db"}), busy_pod("other", "b", 900)],
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    rig.pdbs.on_add(pdb("db", {"app": "db"}, allowed=0))
    assert await rig.attempt(preemptor()) == "b"
    assert rig.api.evicted == ["other"]


async def test_minimal_set_keeps_the_more_important_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two GPUs, each held by a pod of lower priority; the preemptor needs one: only the lower.
    cache = cluster(
        make_node("a", gpus=2, domains="0-1"),
        pods=[
            busy_pod("low", "a", 10, gpu_indices="0"),
            busy_pod("mid", "a", 50, gpu_indices="1"),
        ],
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    assert await rig.attempt(preemptor()) == "a"
    assert rig.api.evicted == ["low"]


async def test_nvlink_domain_decides_the_victims(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 GPUs in two NVLink domains {0,1} and {2,3}; GPUs 1 and 2 free. The 2-GPU preemptor
    # requires one domain: evicting the lowest-priority pod (GPU 0) completes domain 0, and the
    # reservation holds GPUs 0 and 1.
    cache = cluster(
        make_node("a", gpus=4, domains="0-1,2-3"),
        pods=[
            busy_pod("d0", "a", 10, gpu_indices="0"),
            busy_pod("d1", "a", 20, gpu_indices="3"),
        ],
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    pod = parse_pod(make_pod("preemptor", gpus=2, priority=1000, nvlink_policy="required"))
    assert await rig.attempt(pod) == "a"
    assert rig.api.evicted == ["d0"]
    reservation = rig.cache.reservation(pod.key)
    assert reservation is not None and sorted(reservation.gpus) == [0, 1]


async def test_cpu_only_preemptor_never_takes_an_idle_gpu_pod_that_frees_no_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Node a: 1 CPU. Two idle pods whose class allows reclaim: one holds the GPU and no CPU, the
    # other 900m CPU and no GPU. The preemptor needs 500m CPU only: the victims must hold what
    # it is missing, so only the CPU holder goes, although the GPU pod is taken first in
    # reclaim's order (GPU count descending) and frees nothing the preemptor lacks.
    idle_gpu = victim_pod("idle-gpu", "a")
    idle_gpu["spec"]["containers"][0]["resources"]["requests"].pop("cpu", None)
    idle_cpu = victim_pod("idle-cpu", "a", gpus=0)
    idle_cpu["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
    cache = cluster(make_node("a", gpus=1, domains="0", cpu="1"), pods=[idle_gpu, idle_cpu])
    rig = make_rig(monkeypatch, cache, preemption=True)
    pod = parse_pod(make_pod("preemptor", gpus=0, cpu="500m", priority=1000))
    assert await rig.attempt(pod) == "a"
    assert rig.api.evicted == ["idle-cpu"]
    assert rig.reclaimer.preemption.outcomes == {}


async def test_cpu_only_preemptor_preempts_the_pod_holding_cpu_not_the_gpu_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = victim_pod("idle-gpu", "a")
    idle["spec"]["priority"] = 1
    holder = make_pod("holder", gpus=0, cpu="900m", node="a", priority=100)
    holder["status"] = {"phase": "Running", "startTime": "2024-05-01T10:00:00Z"}
    cache = cluster(make_node("a", gpus=1, domains="0", cpu="1"), pods=[idle, holder])
    rig = make_rig(monkeypatch, cache, preemption=True)
    pod = parse_pod(make_pod("preemptor", gpus=0, cpu="500m", priority=1000))
    assert await rig.attempt(pod) == "a"
    assert rig.api.evicted == ["holder"]


async def test_no_second_preemption_while_a_victim_terminates_on_the_nominated_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = cluster(*one_gpu_nodes("a", "b"), pods=[busy_pod("pa", "a", 1), busy_pod("pb", "b", 2)])
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    pod = preemptor()
    assert await rig.attempt(pod) == "a"
    terminating = busy_pod("pa", "a", 1)
    terminating["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
    cache.add_pod(parse_pod(terminating))
    rig.clock[0] += 60  # past the cooldown, within the reservation
    assert await rig.attempt(pod) is None
    assert rig.api.evicted == ["pa"]
    assert rig.reclaimer.preemption.outcomes == {"planned": 1, "wait": 1}
    assert rig.recorder.notes("FailedScheduling")[-1].endswith(
        "preemption: not eligible due to a terminating pod on the nominated node."
    )


async def test_the_dry_run_stops_after_kube_schedulers_candidate_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 150 full one-GPU nodes: 10 % is below the floor of 100, so 100 nodes are evaluated.
    names = [f"n{i:03}" for i in range(150)]
    cache = cluster(
        *one_gpu_nodes(*names), pods=[busy_pod(f"p{n}", n, 1 + i) for i, n in enumerate(names)]
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    evaluated: set[str] = set()
    fits = rig.reclaimer.preemption.fits_without

    def counting(pod: Any, node: str, removed: frozenset[str]) -> bool:
        evaluated.add(node)
        return fits(pod, node, removed)

    rig.reclaimer.preemption.fits_without = counting
    assert await rig.attempt(preemptor()) == "n000"  # the lowest victim priority among them
    assert len(evaluated) == 100


async def test_each_search_reports_the_chosen_plans_victim_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Feeds scheduler_preemption_attempts_total and scheduler_preemption_victims.
    cache = cluster(
        make_node("a", gpus=2, domains="0-1"),
        pods=[busy_pod("a0", "a", 10, gpu_indices="0"), busy_pod("a1", "a", 20, gpu_indices="1")],
    )
    rig = make_rig(monkeypatch, cache, mode="off", preemption=True)
    attempts: list[int] = []
    rig.reclaimer.preemption.on_attempt = attempts.append
    assert await rig.attempt(preemptor(gpus=2)) == "a"
    assert attempts == [2]

    guarded = cluster(*one_gpu_nodes("b"), pods=[busy_pod("b0", "b", 5000)])
    rig = make_rig(monkeypatch, guarded, mode="off", preemption=True)
    rig.reclaimer.preemption.on_attempt = attempts.append
    assert await rig.attempt(preemptor()) is None
    assert attempts == [2, 0]
