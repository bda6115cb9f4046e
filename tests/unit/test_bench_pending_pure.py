"""hack.bench.pending: each run's pending pods lined up with what the other runs did."""

from __future__ import annotations

from hack.bench.pending import (
    NO_CONDITION,
    PENDING,
    NodeKind,
    RunPlacements,
    occupancy_lines,
    pending_rows,
    reason_counts,
    render_pending,
    scheduled_false_message,
)

FIT = "0/1000 nodes are available: 1000 Insufficient nvidia.com/gpu."


def runs() -> list[RunPlacements]:
    ours = RunPlacements(
        "gpu-scheduler",
        {"p-1": "n-1"},
        {"p-2": f"Unschedulable: {FIT}", "p-3": f"Unschedulable: {FIT}"},
    )
    theirs = RunPlacements("kube-scheduler", {"p-1": "n-4", "p-2": "n-7"}, {"p-3": FIT})
    return [ours, theirs]


def test_rows_say_where_the_other_runs_placed_each_pending_pod() -> None:
    rows = pending_rows(runs(), {"p-2": "gang"}, {"p-2": 8, "p-3": 4})
    assert [(r.run, r.pod, r.kind, r.gpus) for r in rows] == [
        ("gpu-scheduler", "p-2", "gang", 8),
        ("gpu-scheduler", "p-3", "plain", 4),
        ("kube-scheduler", "p-3", "plain", 4),
    ]
    assert rows[0].elsewhere == {"kube-scheduler": "n-7"}
    assert rows[1].elsewhere == {"kube-scheduler": PENDING}
    assert rows[2].elsewhere == {"gpu-scheduler": PENDING}


def test_counts_group_by_kind_and_reason_without_the_node_total() -> None:
    rows = pending_rows(runs(), {"p-2": "gang"}, {})
    counts = reason_counts(rows, "kube-scheduler")
    reason = "Unschedulable: 1000 Insufficient nvidia.com/gpu."
    assert counts == {
        ("gpu-scheduler", "gang", reason, True): 1,
        ("gpu-scheduler", "plain", reason, False): 1,
    }
    assert reason_counts(rows, "kube-scheduler")[("gpu-scheduler", "gang", FIT, True)] == 0
    stripped = reason_counts(pending_rows([runs()[1], runs()[0]], {}, {}), "gpu-scheduler")
    assert stripped == {("kube-scheduler", "plain", "1000 Insufficient nvidia.com/gpu.", False): 1}


def test_rendered_lines_summarize_then_list_each_pod() -> None:
    lines = render_pending(pending_rows(runs(), {}, {"p-2": 8}), "kube-scheduler")
    assert "pending there too" in lines[0] and "bound by kube-scheduler" in lines[1]
    assert lines[2].startswith("  gpu-scheduler p-2 plain 8 GPUs | kube-scheduler: n-7 |")


def test_the_scheduled_false_condition_is_read_or_its_absence_said() -> None:
    pod = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": FIT,
                },
            ]
        }
    }
    assert scheduled_false_message(pod) == f"Unschedulable: {FIT}"
    assert scheduled_false_message({"status": {}}) == NO_CONDITION


def test_occupancy_counts_nodes_by_state_and_gpus_by_pod_size() -> None:
    run = RunPlacements("r", {"a": "big-0", "b": "big-0", "c": "big-1", "d": "small-0"}, {})
    kinds = [
        NodeKind("Big", 8, ("big-0", "big-1", "big-2")),
        NodeKind("Small", 2, ("small-0",)),
    ]
    lines = occupancy_lines([run], kinds, {"a": 4, "b": 4, "c": 1, "d": 2})
    assert lines[0].split("|")[0].split() == [
        "r",
        "Big",
        "3",
        "nodes:",
        "1",
        "untouched",
        "1",
        "partly",
        "used",
        "1",
        "full",
    ]
    assert lines[0].endswith("GPUs held by pod size: 1x1 4x8")
    assert "0 untouched" in lines[1] and "1 full" in lines[1] and lines[1].endswith("2x2")
