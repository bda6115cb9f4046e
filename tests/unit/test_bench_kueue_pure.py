"""The Kueue stranding benchmark's pure parts: the seeded Job stream, stranding, the metrics, and
the objects and handlers of the runner."""

from __future__ import annotations

import pytest

from hack.bench.kueue_metrics import (
    Mix,
    QueuedJob,
    StrandingMeter,
    fits,
    generate,
    percentile,
    ratios,
    stranded,
    summarize,
    window_s,
)
from hack.bench.kueue_stranding import (
    FLAVOR_LABEL,
    Admissions,
    Options,
    Pods,
    Run,
    details,
    job_manifest,
    live_bound,
    node_spec,
)
from hack.localcluster.kueue import QUEUE_LABEL


def test_the_stream_is_seeded_and_spread_over_the_queues() -> None:
    mix = Mix(jobs=40)
    first = generate(mix, 48, ["a", "b"], seed=3)
    assert first == generate(mix, 48, ["a", "b"], seed=3)
    assert first != generate(mix, 48, ["a", "b"], seed=4)
    assert [j.queue for j in first[:4]] == ["a", "b", "a", "b"]
    assert {(j.pods, j.gpus) for j in first} <= set(mix.shapes)
    assert all(mix.min_duration_s <= j.duration_s <= mix.max_duration_s for j in first)
    assert [j.arrival_s for j in first] == sorted(j.arrival_s for j in first)


@pytest.mark.parametrize("load", [0.5, 1.5, 3.0])
def test_the_arrival_rate_asks_load_times_the_capacity(load: float) -> None:
    jobs = generate(Mix(jobs=200, load=load), 48, ["a"], seed=0)
    asked = sum(j.total_gpus * j.duration_s for j in jobs)
    assert asked / window_s(jobs) == pytest.approx(load * 48)


def test_a_stream_without_queues_or_with_mismatched_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="queue"):
        generate(Mix(), 8, [], seed=0)
    with pytest.raises(ValueError, match="weights"):
        generate(Mix(weights=(1.0,)), 8, ["a"], seed=0)


def test_pods_fit_only_whole_on_one_node() -> None:
    assert fits(1, 8, [8, 0])
    assert not fits(1, 8, [4, 4])
    assert fits(2, 2, [3, 3])
    assert not fits(3, 2, [3, 3])
    assert fits(0, 8, [])
    assert not fits(1, 1, [])


def test_a_workload_is_stranded_only_when_the_free_gpus_add_up_but_are_scattered() -> None:
    free = {"n0": 3, "n1": 2, "n2": 3}  # 8 free, no node with 8
    waiting = {"big": (1, 8), "small": (2, 2), "too-big": (2, 8), "bound": (0, 8)}
    assert stranded(free, waiting) == {"big": 8}
    assert stranded({"n0": 8, "n1": 0}, {"big": (1, 8)}) == {}


def test_the_meter_keeps_each_workloads_worst_and_integrates_stranded_time() -> None:
    meter = StrandingMeter()
    meter.observe(0.0, {"n0": 4, "n1": 4}, {"big": (1, 8)})  # 8 scattered
    meter.observe(2.0, {"n0": 4, "n1": 2}, {"big": (1, 8), "x": (1, 1)})  # 6 < 8: not stranded
    meter.observe(3.0, {"n0": 8, "n1": 2}, {})
    meter.observe(5.0, {"n0": 8, "n1": 2}, {})
    assert meter.worst == {"big": 8}
    assert meter.stranded_gpu_s == pytest.approx(8 * 2.0)
    assert meter.pending_samples == [1, 2, 0, 0]
    assert meter.episodes == [(0.0, "big", (4, 4))]
    assert meter.stranded_s == {"big": pytest.approx(2.0)}


def test_summary_counts_per_admitted_workload() -> None:
    meter = StrandingMeter()
    meter.observe(0.0, {"n0": 4, "n1": 4}, {"a": (1, 8), "b": (1, 1)})
    meter.observe(1.0, {"n0": 8, "n1": 3}, {})
    admitted = {"a": 0.0, "b": 0.0, "c": 1.0, "d": 2.0}
    bound = {"a": 4.0, "b": 1.0, "c": 1.5}
    metrics = summarize("run", 5, admitted, bound, meter, (4, 3))
    assert metrics.admitted == 4 and metrics.completed == 3
    assert metrics.stranded_workloads == 1
    assert metrics.stranded_gpus_per_admitted == pytest.approx(8 / 4)
    assert metrics.stranded_gpu_s == pytest.approx(8.0)
    assert metrics.pending_mean == pytest.approx(1.0) and metrics.pending_max == 2
    assert metrics.admit_to_bound_p50_s == pytest.approx(1.0)
    assert metrics.admit_to_bound_p99_s == pytest.approx(4.0)
    assert metrics.one_domain_pct == pytest.approx(75.0)


def test_an_empty_run_has_no_rates() -> None:
    metrics = summarize("run", 0, {}, {}, StrandingMeter(), (0, 0))
    assert metrics.stranded_gpus_per_admitted is None
    assert metrics.admit_to_bound_p50_s is None and metrics.one_domain_pct is None
    assert metrics.pending_mean is None


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_ratios_divide_ours_by_theirs() -> None:
    meter = StrandingMeter()
    meter.observe(0.0, {"n0": 4, "n1": 4}, {"a": (1, 8)})
    theirs = summarize("kube", 2, {"a": 0.0, "b": 0.0}, {"a": 2.0, "b": 1.0}, meter, (2, 1))
    ours = summarize(
        "ours", 2, {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0}, StrandingMeter(), (2, 2)
    )
    row = ratios(ours, theirs)
    assert row["stranded_gpus_per_admitted"] == 0.0
    assert row["one_domain_pct"] == pytest.approx(2.0)
    assert row["admit_to_bound_p99_s"] == pytest.approx(0.5)
    assert row["stranded_gpu_s"] == 1.0  # 0 / 0: equal
    assert ratios(theirs, ours)["stranded_workloads"] is None  # 1 / 0


def test_the_job_is_queued_and_asks_its_gpus_as_requests_and_limits() -> None:
    job = job_manifest(QueuedJob("j-0001", "team-a", 2, 8, 0.0, 10.0), "gpu-scheduler")
    assert job["metadata"]["labels"] == {QUEUE_LABEL: "team-a"}
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["schedulerName"] == "gpu-scheduler"
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "8"
    spec = node_spec(Options(nodes=3, node_prefix="x-"))
    assert spec.count == 3 and spec.gpus == 8 and spec.labels[FLAVOR_LABEL]
    assert spec.node_names()[0] == "x-kb-h200-0"


def _workload(job: str, admitted: bool) -> dict[str, object]:
    conditions = [{"type": "Admitted", "status": "True" if admitted else "False"}]
    return {
        "metadata": {"name": f"job-{job}", "ownerReferences": [{"kind": "Job", "name": job}]},
        "status": {"conditions": conditions},
    }


def test_admissions_keep_the_first_time_a_workload_was_seen_admitted() -> None:
    times = iter([1.0, 2.0, 3.0])
    admissions = Admissions(lambda: next(times))
    admissions.on_add(_workload("a", admitted=False))
    assert admissions.at == {}
    admissions.on_update({}, _workload("a", admitted=True))
    admissions.on_update({}, _workload("a", admitted=True))
    assert admissions.at == {"a": 1.0}


def _pod(name: str, node: str | None, phase: str = "Running", deleting: bool = False) -> dict:  # type: ignore[type-arg]
    metadata: dict[str, object] = {
        "name": name,
        "labels": {"batch.kubernetes.io/job-name": name.rsplit("-", 1)[0]},
        "annotations": {"gpu-scheduler.io/gpus": "0,1"},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_live_bound_pods_leave_out_pending_terminal_and_deleting_ones() -> None:
    pods = [
        _pod("a-1", "n0"),
        _pod("b-1", None, phase="Pending"),
        _pod("c-1", "n1", phase="Succeeded"),
        _pod("d-1", "n1", deleting=True),
    ]
    assert live_bound(pods) == [("a", "a-1", "n0")]
    seen = Pods()
    for pod in pods:
        seen.on_add(pod)
    assert seen.order == ["a-1", "c-1", "d-1"] and seen.gpus["a-1"] == "0,1"


def test_details_name_each_stranding_episode() -> None:
    meter = StrandingMeter()
    meter.observe(0.0, {"n0": 4, "n1": 4}, {"j-0001": (1, 8)})
    meter.observe(1.5, {"n0": 8, "n1": 4}, {})
    metrics = summarize("gpu-scheduler", 1, {"j-0001": 0.0}, {"j-0001": 1.5}, meter, (0, 0))
    jobs = [QueuedJob("j-0001", "team-b", 1, 8, 0.0, 10.0)]
    assert details([Run(metrics, meter)], jobs) == [
        "gpu-scheduler: j-0001 (1 x 8 GPU, team-b) stranded at 0.0 s, free GPUs per node 4,4, "
        "1.5 s stranded in all"
    ]
