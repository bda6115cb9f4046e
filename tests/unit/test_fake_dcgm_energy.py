"""Power and energy of the fake dcgm-exporter: the counter integrates power exactly."""

from __future__ import annotations

import random
from typing import Any

import pytest

from hack.fake_dcgm.holders import assign
from hack.fake_dcgm.model import EnergyMeter, Fleet, PhysicalGpu, build_fleet
from hack.fake_dcgm.power import H200, UNKNOWN, model_for
from hack.fake_dcgm.trace import load_trace
from tests.datasets import H200_TRACE_CSV
from tests.unit.test_fake_dcgm_builders import FB, USAGE, Json, node, pod

TRACE_CSV = H200_TRACE_CSV
CREATED = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # CREATED as epoch seconds


def fleet_of(*pods: Json, profiling: bool = False, **node_args: Any) -> Fleet:
    trace = load_trace(TRACE_CSV)
    return build_fleet(assign([node(**node_args)], list(pods)), trace, profiling)


def gpu(fleet: Fleet, index: int) -> PhysicalGpu:
    return next(g for g in fleet.gpus if g.index == index)


def test_power_models() -> None:
    # The H200 values are the README's measured means.
    assert (H200.no_process_w, H200.idle_w, H200.max_w) == (77.0, 118.0, 690.0)
    assert H200.power_w(0) == 118.0
    assert H200.power_w(50) == pytest.approx(404.0)
    assert H200.power_w(150) == 690.0
    assert model_for("NVIDIA-H100-80GB-HBM3").max_w == 700.0
    assert model_for("NVIDIA-A100-SXM4-80GB").idle_w == 60.0
    assert model_for("Some-Other-GPU") is UNKNOWN
    assert model_for(None) is UNKNOWN
    assert UNKNOWN.no_process_w < UNKNOWN.idle_w


def test_energy_gives_the_true_mean_power_while_the_util_gauge_aliases_to_zero() -> None:
    fleet = fleet_of(
        pod("loader", created=CREATED, annotations={USAGE: "periodic:period=3,duty=0.1,level=100"})
    )
    gpu0 = gpu(fleet, 0)
    meter = EnergyMeter()
    rng = random.Random(7)
    start = T0 + 1000.0
    now = start
    meter.advance(fleet.gpus, now)
    while now < start + 300.0:
        now = min(now + 0.1 + rng.uniform(-0.04, 0.04), start + 300.0)  # jittered ticks
        meter.advance(fleet.gpus, now)
    mean_power = meter.total_mj(gpu0.key) / 1000.0 / 300.0
    analytic = H200.idle_w + (H200.max_w - H200.idle_w) * 0.1  # 175.2 W
    assert mean_power == pytest.approx(analytic, rel=0.01)
    assert mean_power == pytest.approx(
        analytic, rel=1e-6
    )  # exact up to float rounding of epoch times
    # Close to the 185 W the real H200 drew for this phase (README).
    assert mean_power == pytest.approx(185.0, rel=0.1)

    # A 1 s poll aligned to the 3 s period never sees the 0.3 s bursts, like NVML on the H200.
    polls = [gpu0.reading(start + k + 0.5) for k in range(300)]
    assert {r.util_pct for r in polls} == {0.0}
    assert {r.power_w for r in polls} == {H200.idle_w}
    # The profiling-style mean over whole periods does see the duty.
    assert gpu0.mean_util(start, start + 30.0) == pytest.approx(10.0)


def test_trace_energy_is_the_sum_of_the_trace_power() -> None:
    trace = load_trace(TRACE_CSV)
    rows = trace["bursty_training_50pct"]
    fleet = fleet_of(
        pod("b", created=CREATED, annotations={USAGE: "trace:phase=bursty_training_50pct"})
    )
    meter = EnergyMeter()
    meter.advance(fleet.gpus, T0)
    for k in range(1, 1001):
        meter.advance(fleet.gpus, T0 + k * len(rows) / 1000)
    assert meter.total_mj(("g-0", 0)) / 1000 == pytest.approx(sum(r.power_w for r in rows))


def test_unheld_gpus_draw_no_process_power_and_counters_start_at_zero() -> None:
    fleet = fleet_of()
    meter = EnergyMeter()
    meter.advance(fleet.gpus, T0)
    assert meter.total_mj(("g-0", 3)) == 0.0
    meter.advance(fleet.gpus, T0 + 10)
    assert meter.total_mj(("g-0", 3)) == pytest.approx(77.0 * 10 * 1000)
    assert meter.total_mj(("elsewhere", 0)) == 0.0


def test_meter_never_decreases_and_does_not_credit_gaps() -> None:
    held = fleet_of(pod("p", created=CREATED, annotations={USAGE: "constant:util=100"}))
    empty = Fleet((), ())
    meter = EnergyMeter()
    meter.advance(held.gpus, T0)
    meter.advance(held.gpus, T0 + 1)
    assert meter.total_mj(("g-0", 0)) == pytest.approx(690_000)
    meter.advance(held.gpus, T0 + 0.5)  # clock went back: nothing added
    assert meter.total_mj(("g-0", 0)) == pytest.approx(690_000)
    meter.advance(empty.gpus, T0 + 2)  # node gone: total kept
    meter.advance(held.gpus, T0 + 100)  # back: resumes without the gap
    meter.advance(held.gpus, T0 + 101)
    assert meter.total_mj(("g-0", 0)) == pytest.approx(2 * 690_000)


def test_time_sliced_gpu_reads_the_max_of_its_holders_and_sums_fb() -> None:
    fleet = fleet_of(
        pod("a", annotations={USAGE: "constant:util=30", FB: "1000", "gpu-scheduler.io/gpus": "2"}),
        pod("b", annotations={USAGE: "constant:util=70", FB: "500", "gpu-scheduler.io/gpus": "2"}),
    )
    reading = gpu(fleet, 2).reading(T0)
    assert reading.util_pct == 70.0
    assert reading.power_w == pytest.approx(H200.power_w(70))
    assert reading.fb_used_mib == 1500.0
    assert [h.pod for h in gpu(fleet, 2).holders] == ["a", "b"]


def test_fb_annotation_overrides_the_trace_and_bad_text_falls_back() -> None:
    fleet = fleet_of(
        pod("t", annotations={USAGE: "trace:phase=idle_holder_20GiB", FB: "4096"}),
        pod("u", created="2026-01-01T00:00:01Z", annotations={FB: "lots"}),
        pod("v", created="2026-01-01T00:00:02Z", annotations={USAGE: "constant:util=200"}),
    )
    assert gpu(fleet, 0).reading(T0).fb_used_mib == 4096.0
    assert (
        gpu(fleet, 0).reading(T0 + 5).power_w
        == load_trace(TRACE_CSV)["idle_holder_20GiB"][5].power_w
    )
    assert gpu(fleet, 1).reading(T0).fb_used_mib == 0.0
    assert gpu(fleet, 2).reading(T0).util_pct == 0.0
    assert gpu(fleet, 2).reading(T0).power_w == H200.idle_w
    assert len(fleet.problems) == 2
    assert "pod ns/u: annotation fake-dcgm.gpu-scheduler.io/fb-used-mib='lots'" in fleet.problems[0]
    assert "util='200' is outside [0, 100]; treating it as util 0" in fleet.problems[1]


def test_mig_gpu_power_weighs_instances_by_slices() -> None:
    fleet = fleet_of(
        pod(
            "small",
            gpus=1,
            resource="nvidia.com/mig-1g.18gb",
            annotations={USAGE: "constant:util=100"},
        ),
        pod(
            "big",
            gpus=1,
            resource="nvidia.com/mig-3g.71gb",
            annotations={USAGE: "constant:util=50"},
        ),
        gpus=2,
        mig={"1g.18gb": 4, "3g.71gb": 1},
    )
    mig_gpu = gpu(fleet, 2)
    expected_util = 100 * 1 / 7 + 50 * 3 / 7
    reading = mig_gpu.reading(T0)
    assert reading.util_pct == pytest.approx(expected_util)
    assert reading.power_w == pytest.approx(H200.power_w(expected_util))
    assert mig_gpu.energy_j(T0, T0 + 2) == pytest.approx(2 * H200.power_w(expected_util))
    empty = fleet_of(gpus=2, mig={"1g.18gb": 4})
    assert gpu(empty, 2).reading(T0).power_w == H200.no_process_w
