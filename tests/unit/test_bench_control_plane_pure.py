"""The control-plane benchmark's pure parts: arrival modes, settings overrides, ratios."""

from __future__ import annotations

import math

import pytest

from hack.bench.control_plane import overrides_of
from hack.bench.control_plane_model import Options, RunResult, mode_name, pod_manifest
from hack.bench.control_plane_report import ratios
from hack.bench.feature_workload import (
    GANG,
    GANG_SIZE,
    feature_kinds,
    gang_sizes,
    pod_group_manifest,
    with_features,
)
from scheduler.gangs.tracker import parse_pod_group
from scheduler.model.objects import parse_pod


def test_kube_scheduler_qps_defaults_high_enough_not_to_throttle() -> None:
    assert Options().qps == 400


def test_modes_are_the_burst_then_each_rate() -> None:
    assert Options().modes() == [None]
    assert Options(rates=(50.0, 100.0)).modes() == [None, 50.0, 100.0]
    assert Options(rates=(50.0,), burst=False).modes() == [50.0]
    assert [mode_name(m) for m in Options(rates=(50.0, 12.5)).modes()] == [
        "burst",
        "50/s",
        "12.5/s",
    ]


def test_overrides_nest_dotted_keys_and_read_yaml_scalars() -> None:
    assert overrides_of("binding.concurrency=64, binding.qps=150.5,logLevel=warning") == {
        "binding": {"concurrency": 64, "qps": 150.5},
        "logLevel": "warning",
    }
    assert overrides_of("") == {}


@pytest.mark.parametrize("text", ["binding.concurrency", "=3"])
def test_overrides_refuse_items_without_a_key_and_value(text: str) -> None:
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        overrides_of(text)


def result(run: str, mode: str, pods_per_s: float, p50: float) -> RunResult:
    return RunResult(
        nodes=10,
        run=run,
        pods=100,
        bound=100,
        pending=0,
        gpus_bound=100,
        seconds=1.0,
        pods_per_s=pods_per_s,
        p50_ms=p50,
        p99_ms=2 * p50,
        cpu_s=1.0,
        cpu_s_per_1000_pods=10.0,
        peak_rss_mib=100.0,
        multi_gpu_pods=0,
        one_domain_pods=0,
        one_domain_pct=None,
        mode=mode,
    )


def test_ratios_compare_each_gpu_scheduler_run_within_its_mode() -> None:
    runs = [
        result("ceiling", "burst", 100.0, 10.0),
        result("gpu-scheduler", "burst", 50.0, 40.0),
        result("qps", "burst", 90.0, 20.0),
        result("kube-scheduler", "burst", 80.0, 20.0),
        result("ceiling", "50/s", 50.0, 5.0),
        result("gpu-scheduler", "50/s", 50.0, 30.0),
        result("kube-scheduler", "50/s", 50.0, 10.0),
    ]
    rows = {(r["mode"], r["run"]): r for r in ratios(runs)}
    assert list(rows) == [("burst", "gpu-scheduler"), ("burst", "qps"), ("50/s", "gpu-scheduler")]
    assert rows["burst", "qps"]["gpu_vs_ceiling_pods_per_s"] == pytest.approx(0.9)
    assert rows["burst", "gpu-scheduler"]["gpu_vs_kube_p50"] == pytest.approx(2.0)
    assert rows["50/s", "gpu-scheduler"]["gpu_vs_kube_p50"] == pytest.approx(3.0)
    assert math.isclose(rows["50/s", "gpu-scheduler"]["gpu_vs_kube_pods_per_s"], 1.0)


def test_feature_mix_is_seeded_and_has_every_kind() -> None:
    kinds = feature_kinds(1000, seed=0)
    assert len(kinds) == 1000 and kinds == feature_kinds(1000, seed=0)
    assert kinds != feature_kinds(1000, seed=1)
    assert {kind for kind, _ in kinds} == {"plain", "preferred", "required", "spread", GANG}
    sizes = gang_sizes(kinds)
    assert sizes and all(1 <= n <= GANG_SIZE for n in sizes.values())
    assert sum(sizes.values()) == sum(1 for kind, _ in kinds if kind == GANG)
    for index, (kind, gang) in enumerate(kinds):  # members are consecutive
        if kind == GANG and sizes[gang] == GANG_SIZE and kinds[index - 1][1] != gang:
            assert [g for _, g in kinds[index : index + GANG_SIZE]] == [gang] * GANG_SIZE


def test_feature_manifests_are_pods_and_podgroups_the_scheduler_accepts() -> None:
    kinds = feature_kinds(200, seed=0)
    seen: dict[str, int] = {}
    for index, (kind, gang) in enumerate(kinds):
        pod = with_features(pod_manifest(f"p{index}", 2, "gpu-scheduler", {}), index, kind, gang)
        pod["metadata"]["namespace"] = "bench"
        info = parse_pod(pod)
        assert info.errors == () and info.unsupported == ()
        seen[kind] = seen.get(kind, 0) + 1
        if kind == "required":
            assert info.pod_affinity is not None and info.pod_affinity.required_affinity
        if kind == "spread":
            assert info.spread_constraints
        assert info.pod_group == gang
    assert set(seen) == {"plain", "preferred", "required", "spread", "gang"}
    for gang, members in gang_sizes(kinds).items():
        group = parse_pod_group({**pod_group_manifest(gang, members), "metadata": {"name": gang}})
        assert group.errors == () and group.gang and group.min_count == members


def test_ratios_add_a_row_of_each_at_its_defaults_with_a_kube_defaults_run() -> None:
    """With a kube-scheduler at its client defaults in the mode, gpu-scheduler's default run is
    compared with it too; the variants only with kube-scheduler at the benchmark's QPS."""
    runs = [
        result("gpu-scheduler", "burst", 60.0, 40.0),
        result("qps400", "burst", 90.0, 20.0),
        result("kube-scheduler", "burst", 80.0, 20.0),
        result("kube-defaults", "burst", 30.0, 80.0),
    ]
    rows = [(r["run"], r["baseline"], r["gpu_vs_kube_pods_per_s"]) for r in ratios(runs)]
    assert rows == [
        ("gpu-scheduler", "kube-scheduler", pytest.approx(0.75)),
        ("qps400", "kube-scheduler", pytest.approx(1.125)),
        ("gpu-scheduler", "kube-defaults", pytest.approx(2.0)),
    ]
