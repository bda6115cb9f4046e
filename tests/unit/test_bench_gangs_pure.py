"""The gang benchmark's pure parts: the seeded job mix, the objects it creates, and its metrics."""

from __future__ import annotations

import itertools
import math

import pytest

from hack.bench.gang_metrics import (
    JobOutcome,
    PodOutcome,
    partial_gpu_seconds,
    ratios,
    replay_gpus,
    start_time,
    summarize,
)
from hack.bench.gang_workload import (
    GPU_SIZES,
    RACK_LABEL,
    BenchNode,
    Job,
    Mix,
    bench_nodes,
    generate,
    member_room,
    rack_specs,
    window_s,
)
from hack.bench.gangs import GroupConditions, PodTimeline, job_pods, pod_group_manifest
from topology.domains import parse_domains

BIG = BenchNode("big", 8, "rack-0", parse_domains("0-3,4-7", 8))
SMALL = BenchNode("small", 2, "rack-1", parse_domains("0-1", 2))


def gang(name: str = "g", members: int = 2, gpus: int = 2, rack_bound: bool = False) -> Job:
    return Job(name, members, gpus, True, rack_bound, 0.0, 10.0)


def outcome(job: Job, created: float, *pods: PodOutcome) -> JobOutcome:
    return JobOutcome(job, created, pods)


def pod(
    name: str, gpus: int, bound: float | None, node: str | None = "big", freed: float | None = None
) -> PodOutcome:
    return PodOutcome(name, gpus, bound, node if bound is not None else None, None, freed)


# -- the job mix -------------------------------------------------------------------------------


def test_racks_label_every_node_and_hold_the_seed_types() -> None:
    nodes = bench_nodes(rack_specs(3, 6))
    assert len(nodes) == 18
    assert sorted({n.rack for n in nodes}) == ["rack-0", "rack-1", "rack-2"]
    per_rack = [sorted(n.gpus for n in nodes if n.rack == r) for r in ("rack-0", "rack-2")]
    assert per_rack == [[2, 2, 4, 4, 8, 8]] * 2
    assert all(n.name.startswith(f"r{n.rack[-1]}-") for n in nodes)


def test_every_gang_fits_an_empty_cluster_twice_or_its_rack_once() -> None:
    nodes = bench_nodes(rack_specs(4, 6))
    jobs = generate(Mix(jobs=300), nodes, seed=3)
    racks = {n.rack for n in nodes}
    smallest_rack = {
        size: min(member_room([n.gpus for n in nodes if n.rack == r], size) for r in racks)
        for size in GPU_SIZES
    }
    everywhere = {size: member_room([n.gpus for n in nodes], size) for size in GPU_SIZES}
    gangs = [j for j in jobs if j.gang]
    assert gangs and any(j.rack_bound for j in gangs) and any(not j.gang for j in jobs)
    for job in gangs:
        assert 2 <= job.members <= 16
        limit = smallest_rack[job.gpus] if job.rack_bound else everywhere[job.gpus] // 2
        assert job.members <= limit, job
    assert {j.gpus for j in gangs} == set(GPU_SIZES)


def test_jobs_arrive_steadily_at_the_rate_that_asks_load_times_capacity() -> None:
    nodes = bench_nodes(rack_specs(2, 3))
    mix = Mix(jobs=50, load=2.0)
    jobs = generate(mix, nodes, seed=1)
    gaps = {round(b.arrival_s - a.arrival_s, 9) for a, b in itertools.pairwise(jobs)}
    assert len(gaps) == 1
    asked = sum(j.total_gpus * j.duration_s for j in jobs)
    capacity = sum(n.gpus for n in nodes)
    assert asked / window_s(jobs) == pytest.approx(mix.load * capacity)
    assert all(mix.min_duration_s <= j.duration_s <= mix.max_duration_s for j in jobs)


def test_the_same_seed_gives_the_same_jobs_and_another_seed_others() -> None:
    nodes = bench_nodes(rack_specs(2, 3))
    assert generate(Mix(jobs=20), nodes, 7) == generate(Mix(jobs=20), nodes, 7)
    assert generate(Mix(jobs=20), nodes, 7) != generate(Mix(jobs=20), nodes, 8)


def test_pods_name_their_pod_group_only_in_the_gang_runs() -> None:
    job = gang("g-0001", members=3, gpus=4, rack_bound=True)
    with_groups = job_pods(job, "gpu-scheduler", {"type": "kwok"}, groups=True)
    plain = job_pods(job, "default-scheduler", {"type": "kwok"}, groups=False)
    assert [p["metadata"]["name"] for p in with_groups] == ["g-0001-0", "g-0001-1", "g-0001-2"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in with_groups} == {"g-0001"}
    assert all("schedulingGroup" not in p["spec"] for p in plain)
    assert plain[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    group = pod_group_manifest(job)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK_LABEL}]}
    assert "schedulingConstraints" not in pod_group_manifest(gang(rack_bound=False))["spec"]


def test_the_pod_watch_keeps_the_first_binding_and_the_deletion() -> None:
    now = iter([1.0, 2.0, 3.0, 4.0])
    timeline = PodTimeline(clock=lambda: next(now))
    pending = {"metadata": {"name": "p"}, "spec": {}}
    bound = {
        "metadata": {"name": "p", "annotations": {"gpu-scheduler.io/gpus": "0,1"}},
        "spec": {"nodeName": "n1"},
    }
    timeline.on_add(pending)
    timeline.on_update(pending, bound)
    timeline.on_update(bound, bound)
    timeline.on_delete(bound)
    assert (timeline.at, timeline.node, timeline.gpus) == (
        {"p": 1.0},
        {"p": "n1"},
        {"p": "0,1"},
    )
    assert timeline.deleted_at == {"p": 2.0}


def test_only_pod_groups_marked_initially_scheduled_true_count() -> None:
    def group(name: str, status: str) -> dict[str, object]:
        condition = {"type": "PodGroupInitiallyScheduled", "status": status}
        return {"metadata": {"name": name}, "status": {"conditions": [condition]}}

    seen = GroupConditions()
    seen.on_add(group("a", "False"))
    seen.on_add({"metadata": {"name": "b"}})
    seen.on_update(group("c", "False"), group("c", "True"))
    assert seen.scheduled == {"c"}


# -- metrics -----------------------------------------------------------------------------------


def test_a_gang_starts_when_its_last_member_is_bound_before_the_end() -> None:
    job = gang(members=3)
    bound = outcome(job, 0.0, pod("a", 2, 1.0), pod("b", 2, 3.0), pod("c", 2, 2.0))
    assert start_time(bound, end_s=10.0) == 3.0
    assert start_time(bound, end_s=2.5) is None
    assert start_time(outcome(job, 0.0, pod("a", 2, 1.0), pod("b", 2, None)), 10.0) is None


def test_a_gang_bound_within_the_burst_allowance_holds_nothing_partially() -> None:
    job = outcome(gang(), 0.0, pod("a", 2, 5.0), pod("b", 2, 5.4))
    assert partial_gpu_seconds(job, end_s=20.0, burst_s=0.5) == (0.0, pytest.approx(0.4))


def test_a_slowly_completed_gang_counts_every_bound_member_until_it_started() -> None:
    job = outcome(gang(members=3), 0.0, pod("a", 2, 1.0), pod("b", 2, 4.0), pod("c", 2, 11.0))
    held, spread = partial_gpu_seconds(job, end_s=20.0, burst_s=2.0)
    assert held == pytest.approx(2 * 10 + 2 * 7) and spread == pytest.approx(10.0)


def test_a_gang_that_never_started_holds_its_members_to_the_end_or_their_deletion() -> None:
    job = outcome(
        gang(members=3), 0.0, pod("a", 4, 2.0), pod("b", 4, 6.0, freed=8.0), pod("c", 4, None)
    )
    held, _ = partial_gpu_seconds(job, end_s=12.0, burst_s=2.0)
    assert held == pytest.approx(4 * 10 + 4 * 2)
    assert partial_gpu_seconds(outcome(gang(), 0.0, pod("a", 2, None)), 12.0, 2.0) == (0.0, 0.0)


def test_gpus_without_annotation_are_replayed_as_the_best_free_choice() -> None:
    nodes = {"big": BIG}
    first = outcome(gang("g1"), 0.0, pod("a", 2, 1.0, freed=5.0), pod("b", 2, 2.0))
    second = outcome(gang("g2", members=1, gpus=4), 0.0, pod("c", 4, 3.0), pod("d", 2, 6.0))
    chosen = replay_gpus([first, second], nodes, end_s=10.0)
    assert chosen == {"a": (0, 1), "b": (2, 3), "c": (4, 5, 6, 7), "d": (0, 1)}
    annotated = PodOutcome("e", 2, 1.0, "big", "6,7", None)
    assert replay_gpus([outcome(gang("g3", 1), 0.0, annotated)], nodes, 10.0) == {"e": (6, 7)}


def test_summary_of_one_packed_gang_and_one_spread_gang() -> None:
    packed = outcome(gang("g1", members=2, gpus=2), 0.0, pod("a", 2, 1.0), pod("b", 2, 1.1))
    spread = outcome(
        gang("g2", members=2, gpus=2, rack_bound=True),
        2.0,
        pod("c", 2, 3.0),
        pod("d", 2, 3.2, node="small"),
    )
    m = summarize("run", [packed, spread], [BIG, SMALL], end_s=60.0, burst_s=1.0)
    assert (m.gangs, m.gangs_started, m.partial_gangs, m.partial_gpu_s) == (2, 2, 0, 0.0)
    assert m.gangs_per_min == pytest.approx(2.0)
    assert (m.start_p50_s, m.start_p99_s) == (pytest.approx(1.1), pytest.approx(1.2))
    assert m.one_node_pct == pytest.approx(75.0) and m.one_rack_pct == pytest.approx(75.0)
    assert m.one_domain_pct == pytest.approx(75.0) and m.domain_members == 4
    assert m.member_domain_pct == pytest.approx(100.0) and m.multi_gpu_members == 4
    assert (m.rack_bound_started, m.rack_bound_in_one_rack) == (1, 0)
    assert m.max_spread_s == pytest.approx(0.2)


def test_idle_gpus_are_averaged_over_the_time_some_gang_waits() -> None:
    single = JobOutcome(Job("s", 1, 4, False, False, 0.0, 5.0), 0.0, (pod("s", 4, 0.0, freed=5.0),))
    waiting = outcome(gang("g", members=2, gpus=4), 0.0, pod("a", 4, 6.0), pod("b", 4, 6.0))
    m = summarize("run", [single, waiting], [BIG], end_s=10.0)
    assert m.waiting_s == pytest.approx(6.0)
    assert m.idle_gpus_while_waiting == pytest.approx((4 * 5 + 8 * 1) / 6)
    assert m.idle_pct_while_waiting == pytest.approx(100 * (28 / 6) / 8)
    assert m.singles_bound == 1 and m.one_domain_pct == pytest.approx(50.0)  # 4 GPUs a domain
    assert m.member_domain_pct == pytest.approx(100.0)


def test_a_member_whose_gpus_span_two_domains_is_not_inside_one() -> None:
    g2 = BenchNode("g2", 4, "rack-0", parse_domains("0-1,2-3", 4))
    holders = outcome(
        gang("h", members=2, gpus=1),
        0.0,
        PodOutcome("x", 1, 0.5, "g2", "0", None),
        PodOutcome("y", 1, 0.5, "g2", "2", None),
    )
    members = outcome(
        gang("g", members=2, gpus=2), 0.0, pod("a", 2, 1.0, node="g2"), pod("b", 2, 1.0)
    )
    m = summarize("run", [holders, members], [g2, BIG], end_s=10.0)
    # GPUs 1 and 3 are left on g2, one in each domain: a spans both, b on big is in one
    assert m.member_domain_pct == pytest.approx(50.0) and m.multi_gpu_members == 2
    assert m.one_domain_pct == pytest.approx(100 * (1 + 1) / 4)


def test_nothing_bound_gives_no_numbers_rather_than_zeros() -> None:
    m = summarize("run", [outcome(gang(), 0.0, pod("a", 2, None), pod("b", 2, None))], [BIG], 10.0)
    assert m.gangs_started == 0 and m.start_p50_s is None and m.one_node_pct is None
    assert m.idle_gpus_while_waiting == pytest.approx(8.0) and m.max_spread_s is None


def test_ratios_are_ours_over_theirs_and_equal_zeros_are_even() -> None:
    job = outcome(gang(), 0.0, pod("a", 2, 1.0), pod("b", 2, 9.0))
    theirs = summarize("kube", [job], [BIG], 20.0, burst_s=1.0)
    ours = summarize("gpu", [outcome(gang(), 0.0, pod("a", 2, 1.0), pod("b", 2, 1.0))], [BIG], 20.0)
    row = ratios(ours, theirs)
    assert row["partial_gpu_s"] == 0.0 and row["gangs_per_min"] == 1.0
    assert row["start_p50_s"] == pytest.approx(1.0 / 9.0)
    assert ratios(ours, ours)["partial_gpu_s"] == 1.0
    assert ratios(theirs, ours)["partial_gpu_s"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in row.values())
