"""The fake exporter on nodes whose device plugin time-slices GPUs: physical GPUs from the
labels, replicas held per GPU, and utilization per GPU or per process."""

from __future__ import annotations

from hack.fake_dcgm.holders import PER_PROCESS_ANNOTATION, assign, is_fake_gpu_node, node_sharing
from tests.unit.test_fake_dcgm_builders import GPUS, USAGE, Json, node, pod
from tests.unit.test_fake_dcgm_holders import held, only
from tests.unit.test_fake_dcgm_render import scrape


def shared(gpus: int = 2, replicas: int = 2, renamed: bool = False, **kwargs: object) -> Json:
    """A fake node whose device plugin advertises `replicas` per GPU."""
    raw = node(gpus=gpus * replicas, product="NVIDIA-H100-80GB-HBM3-SHARED", **kwargs)  # type: ignore[arg-type]
    raw["metadata"]["labels"] |= {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.count": str(gpus),
    }
    if renamed:
        for key in ("capacity", "allocatable"):
            raw["status"][key]["nvidia.com/gpu.shared"] = raw["status"][key].pop("nvidia.com/gpu")
    return raw


def test_a_shared_node_has_its_physical_gpus_and_model_name() -> None:
    result = assign([shared()], [])
    view = only(result)
    assert [g.index for g in view.gpus] == [0, 1]
    assert view.product == "NVIDIA-H100-80GB-HBM3"
    assert is_fake_gpu_node(shared(renamed=True))
    sharing = node_sharing(shared(renamed=True))
    assert sharing is not None and sharing.resource == "nvidia.com/gpu.shared"


def test_replicas_are_held_as_annotated_then_where_fewest_pods_are() -> None:
    pods = [
        pod("a", annotations={GPUS: "1"}),
        pod("b", annotations={GPUS: "1"}),
        pod("c", annotations={GPUS: "1"}),  # GPU 1 is full (2 replicas): falls back
        pod("d", created="2026-01-01T00:01:00Z"),
    ]
    result = assign([shared()], pods)
    assert held(result) == {0: ["c", "d"], 1: ["a", "b"]}
    assert any("no free replica" in p for p in result.problems)


def test_renamed_resource_is_counted() -> None:
    pods = [pod(n, resource="nvidia.com/gpu.shared") for n in ("a", "b", "c")]
    assert held(assign([shared(renamed=True)], pods)) == {0: ["a", "c"], 1: ["b"]}


def test_shared_gpu_utilization_is_the_gpus_or_per_process() -> None:
    pods = [  # same creation time: held in name order
        pod("idle", annotations={GPUS: "0", USAGE: "constant:util=0"}),
        pod("busy", annotations={GPUS: "0", USAGE: "constant:util=70"}),
    ]
    gpu_wide = scrape([shared()], pods).family("DCGM_FI_DEV_GPU_UTIL")
    assert [(s.get("gpu"), dict(s.labels).get("pod"), s.value) for s in gpu_wide] == [
        ("0", "busy", 70.0),
        ("0", "idle", 70.0),
        ("1", None, 0.0),
    ]
    per_process = scrape([shared(annotations={PER_PROCESS_ANNOTATION: "true"})], pods)
    util = per_process.family("DCGM_FI_DEV_GPU_UTIL")
    assert [(s.get("gpu"), dict(s.labels).get("pod"), s.value) for s in util] == [
        ("0", None, 70.0),
        ("0", "busy", 70.0),
        ("0", "idle", 0.0),
        ("1", None, 0.0),
    ]
    power = [s.value for s in per_process.family("DCGM_FI_DEV_POWER_USAGE") if s.get("gpu") == "0"]
    assert len(power) == 2 and power[0] == power[1]  # the GPU's, copied to each pod
