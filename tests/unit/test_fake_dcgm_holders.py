"""Who holds which GPU and MIG instance, decided from plain Node and Pod JSON."""

from __future__ import annotations

from hack.fake_dcgm.holders import MIG_GPU_ANNOTATION as MIG
from hack.fake_dcgm.holders import Assignment, NodeGpus, assign
from tests.unit.test_fake_dcgm_builders import GPUS, USAGE, node, pod


def held(result: Assignment, node_name: str = "g-0") -> dict[int, list[str]]:
    """GPU index -> names of its holders."""
    view = next(n for n in result.nodes if n.name == node_name)
    return {g.index: [h.pod for h in g.holders] for g in view.gpus}


def only(result: Assignment) -> NodeGpus:
    assert len(result.nodes) == 1
    return result.nodes[0]


def test_annotation_wins_over_creation_order() -> None:
    result = assign(
        [node(gpus=4)],
        [
            pod("early", created="2026-01-01T00:00:00Z", gpus=2),
            pod("late", created="2026-01-01T00:05:00Z", gpus=2, annotations={GPUS: "0,1"}),
        ],
    )
    assert held(result) == {0: ["late"], 1: ["late"], 2: ["early"], 3: ["early"]}
    assert result.problems == ()


def test_fallback_gives_lowest_free_indices_by_creation_time_then_name() -> None:
    result = assign(
        [node(gpus=8)],
        [
            pod("c", created="2026-01-01T00:00:02Z", gpus=1),
            pod("b", created="2026-01-01T00:00:01Z", gpus=2),
            pod("a", created="2026-01-01T00:00:02Z", gpus=1),
            pod("pinned", created="2026-01-01T00:00:09Z", gpus=1, annotations={GPUS: "1"}),
        ],
    )
    assert held(result) == {
        0: ["b"],
        1: ["pinned"],
        2: ["b"],
        3: ["a"],
        4: ["c"],
        5: [],
        6: [],
        7: [],
    }


def test_holder_carries_container_start_time_and_annotations() -> None:
    result = assign(
        [node(gpus=1)],
        [pod("p", started="2026-01-01T00:00:10Z", annotations={USAGE: "constant:util=5"})],
    )
    holder = only(result).gpus[0].holders[0]
    assert (holder.namespace, holder.pod, holder.container) == ("ns", "p", "main")
    assert holder.start_time == 1767225610.0  # status.startTime wins over creationTimestamp
    assert holder.usage == "constant:util=5"
    assert holder.uid == "uid-ns-p"


def test_limits_or_requests_are_summed_over_containers() -> None:
    two = pod("two", gpus=1)
    two["spec"]["containers"].append(
        {"name": "other", "resources": {"requests": {"nvidia.com/gpu": "2"}}}
    )
    result = assign([node(gpus=4)], [two])
    assert held(result) == {0: ["two"], 1: ["two"], 2: ["two"], 3: []}


def test_bad_annotations_fall_back_to_the_lowest_free_gpus_and_are_reported() -> None:
    cases = {
        "x,1": "is not a comma-separated list of integers",
        "9": "names an index outside the node's whole GPUs [0, 1, 2, 3]",
        "2,2": "lists an index twice",
        "1,2": "names 2 GPUs but the pod requests 1",
        "²": "is not a comma-separated list of integers",
    }
    for text, reason in cases.items():
        result = assign(
            [node(gpus=4)],
            [
                pod("owner", gpus=1, annotations={GPUS: "0"}),
                pod("odd", gpus=1, annotations={GPUS: text}),
            ],
        )
        assert held(result) == {0: ["owner"], 1: ["odd"], 2: [], 3: []}, text
        (problem,) = result.problems
        assert problem.startswith(f"pod ns/odd: annotation {GPUS}={text!r} {reason}")


def test_annotated_pods_may_share_a_gpu() -> None:
    result = assign(
        [node(gpus=2)],
        [pod("a", annotations={GPUS: "1"}), pod("b", annotations={GPUS: "1"}), pod("c")],
    )
    assert held(result) == {0: ["c"], 1: ["a", "b"]}


def test_finished_unbound_and_foreign_pods_hold_nothing() -> None:
    result = assign(
        [node("g-0", gpus=2), node("g-1", gpus=1)],
        [
            pod("done", phase="Succeeded", annotations={GPUS: "0"}),
            pod("failed", phase="Failed"),
            pod("pending", node_name=None),
            pod("elsewhere", node_name="cpu-node"),
            pod("there", node_name="g-1", created="2026-01-01T00:00:05Z"),
            pod("here", created="2026-01-01T00:00:05Z"),
            pod("no-gpu", gpus=0),
        ],
    )
    assert held(result, "g-0") == {0: ["here"], 1: []}
    assert held(result, "g-1") == {0: ["there"]}


def test_pod_that_does_not_fit_holds_nothing() -> None:
    result = assign(
        [node(gpus=2)], [pod("a", gpus=1), pod("big", gpus=2, created="2026-02-01T00:00:00Z")]
    )
    assert held(result) == {0: ["a"], 1: []}
    assert result.problems == ("pod ns/big: requests 2 GPUs but only 1 are free; it holds none",)


def test_mig_instances_follow_whole_gpus_and_creation_order() -> None:
    result = assign(
        [node(gpus=2, mig={"2g.35gb": 2, "1g.18gb": 3})],
        [
            pod("m2", resource="nvidia.com/mig-1g.18gb", gpus=2, created="2026-01-01T00:00:02Z"),
            pod("m1", resource="nvidia.com/mig-1g.18gb", gpus=1, created="2026-01-01T00:00:01Z"),
            pod("big", resource="nvidia.com/mig-2g.35gb", gpus=1),
            pod("late", resource="nvidia.com/mig-1g.18gb", gpus=1, created="2026-01-01T00:09:00Z"),
            pod("whole", gpus=1),
        ],
    )
    view = only(result)
    assert view.mig_gpu_index == 2
    assert [g.index for g in view.gpus] == [0, 1]
    instances = [
        (i.gpu_index, i.profile, i.instance_id, i.holder.pod if i.holder else None)
        for i in view.mig
    ]
    assert instances == [
        (2, "1g.18gb", 1, "m1"),
        (2, "1g.18gb", 2, "m2"),
        (2, "1g.18gb", 3, "m2"),
        (2, "2g.35gb", 4, "big"),
        (2, "2g.35gb", 5, None),
    ]
    assert view.mig[0].holder is not None and view.mig[0].holder.container == "main"
    assert result.problems == (
        "pod ns/late: requests 1 nvidia.com/mig-1g.18gb but only 0 are free; it holds none",
    )


def test_mig_gpu_annotation_moves_the_mig_gpu() -> None:
    moved = only(assign([node(gpus=3, mig={"1g.18gb": 7}, annotations={MIG: "0"})], []))
    assert moved.mig_gpu_index == 0
    assert [g.index for g in moved.gpus] == [1, 2, 3]
    assert [i.instance_id for i in moved.mig] == list(range(1, 8))
    bad = assign([node(gpus=3, mig={"1g.18gb": 1}, annotations={MIG: "first"})], [])
    assert only(bad).mig_gpu_index == 3
    assert (
        "annotation fake-dcgm.gpu-scheduler.io/mig-gpu='first' is not an index" in bad.problems[0]
    )


def test_node_facts() -> None:
    result = assign(
        [
            node("a", gpus=1, annotations={"fake-dcgm.gpu-scheduler.io/profiling": "True"}),
            node("b", gpus=1, product=None),
            node("no-gpus", gpus=0),
        ],
        [],
    )
    assert [(n.name, n.product, n.profiling) for n in result.nodes] == [
        ("a", "NVIDIA-H200", True),
        ("b", None, False),
    ]


def test_garbage_objects_do_not_raise() -> None:
    weird_pod = pod("w")
    weird_pod["spec"]["containers"] = [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "-1"}}},
        "x",
    ]
    weird_node = node("n", gpus=2)
    weird_node["status"]["capacity"]["nvidia.com/gpu"] = "lots"
    result = assign([weird_node, {"metadata": None}, {}], [weird_pod, {}, {"spec": "x"}])
    assert [n.name for n in result.nodes] == []
    assert result.problems == ("node n: nvidia.com/gpu capacity 'lots' ignored",)
