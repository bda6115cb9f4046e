"""The idle verdict: never call a working pod idle (H200 recording, sharing, coverage, caution)."""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.signals import GpuWindow
from reclaim.usage import (
    CALIBRATION_MARGIN_W,
    DEFAULT_POWER_MODELS,
    FloatArray,
    PowerModel,
    Verdict,
    counter_increase,
    gpu_estimates,
    idle_verdict,
    window_from_samples,
)
from tests.datasets import H200_TRACE_CSV

H200_CSV = H200_TRACE_CSV
MODEL = "NVIDIA H200"
REPLAY_MODELS = {MODEL: PowerModel(idle_w=120.0, max_w=700.0)}
INTERVAL_S = 1.0
WINDOW_S = 60.0
NEED = int(0.8 * WINDOW_S / INTERVAL_S)
FLOOR_W = 120.0 + CALIBRATION_MARGIN_W
"""A power floor that calibrates REPLAY_MODELS' H200 to exactly its nominal 120 W idle draw."""
Phases = Mapping[str, dict[str, FloatArray]]


@pytest.fixture(scope="module")
def h200_phases() -> Phases:
    phases: dict[str, dict[str, list[float]]] = {}
    with H200_CSV.open(newline="") as handle:
        for row in csv.DictReader(handle):
            phase = phases.setdefault(row["phase"], {"t_s": [], "util": [], "power": []})
            phase["t_s"].append(float(row["t_s"]))
            phase["util"].append(float(row["gpu_util_pct"]))
            phase["power"].append(float(row["power_w"]))
    return {
        name: {key: np.asarray(values) for key, values in columns.items()}
        for name, columns in phases.items()
    }


def phase_window(phases: Phases, name: str, *, power: bool = True) -> GpuWindow:
    phase = phases[name]
    t = phase["t_s"]
    return window_from_samples(
        t,
        end_s=float(t[-1]),
        window_s=float(t[-1] - t[0]) + INTERVAL_S,
        gpu="0",
        model=MODEL,
        util_pct=phase["util"],
        power_w=phase["power"] if power else None,
    )


def verdict_of(
    window: GpuWindow, threshold: float, models: Mapping[str, PowerModel] = REPLAY_MODELS
) -> Verdict:
    return idle_verdict([window], threshold, models, scrape_interval_s=INTERVAL_S)


def test_h200_idle_holder_is_idle_and_training_busy_at_threshold_10(h200_phases: Phases) -> None:
    assert verdict_of(phase_window(h200_phases, "idle_holder_20GiB"), 10.0).idle
    for busy in ("steady_training", "bursty_training_50pct", "dataloader_bound_10pct"):
        verdict = verdict_of(phase_window(h200_phases, busy), 10.0)
        assert not verdict.idle, busy
        assert verdict.usage_pct is not None and verdict.usage_pct >= 10.0


def test_h200_dataloader_bound_is_busy_at_5_although_util_reads_0(h200_phases: Phases) -> None:
    assert np.all(h200_phases["dataloader_bound_10pct"]["util"] == 0.0)
    verdict = verdict_of(phase_window(h200_phases, "dataloader_bound_10pct"), 5.0)
    assert not verdict.idle
    assert verdict.estimates["util"] == 0.0
    # The GPU's own floor (119.2 W) calibrates its idle draw; the estimate is at least the mean's.
    idle_w = 119.2 - CALIBRATION_MARGIN_W
    assert verdict.estimates["power"] >= 100 * (185.408 - idle_w) / (700 - idle_w) - 0.01


def test_h200_power_separates_periodic_phases_near_their_duty(h200_phases: Phases) -> None:
    model = DEFAULT_POWER_MODELS[MODEL]  # 118 W idle holder, 690 W steady
    means = []
    for name in ("bursty_training_50pct", "dataloader_bound_10pct", "sporadic_inference_4pct"):
        window = phase_window(h200_phases, name)
        assert window.power_mean_w is not None
        means.append(model.duty_pct(window.power_mean_w, model.calibrated_idle_w(min_power(name))))
        estimate = verdict_of(window, 50.0, {MODEL: model}).estimates["power"]
        assert estimate >= means[-1]  # a sub-window peak can only raise it
    assert [round(v) for v in means] == [53, 12, 6]


def min_power(name: str) -> float:
    with H200_CSV.open(newline="") as handle:
        return min(float(row["power_w"]) for row in csv.DictReader(handle) if row["phase"] == name)


def test_h200_util_only_windows_are_never_idle(h200_phases: Phases) -> None:
    for name in h200_phases:
        verdict = verdict_of(phase_window(h200_phases, name, power=False), 100.0)
        assert not verdict.idle, name


@given(st.floats(0.0, 100.0), st.integers(0, 200), st.floats(0.0, 100.0))
def test_util_alone_never_idle(util: float, samples: int, threshold: float) -> None:
    window = GpuWindow("0", MODEL, WINDOW_S, util_samples=samples, util_mean_pct=util)
    assert not verdict_of(window, threshold).idle


def test_no_power_model_means_util_cannot_decide_but_engine_can() -> None:
    base = GpuWindow(
        "0",
        "Unknown GPU",
        WINDOW_S,
        util_samples=60,
        util_mean_pct=0.0,
        power_samples=60,
        power_mean_w=100.0,
    )
    verdict = verdict_of(base, 10.0)
    assert not verdict.idle
    assert "power" not in verdict.estimates
    assert "no power model" in verdict.reason
    with_engine = dataclasses.replace(base, engine_samples=60, engine_mean=0.02)
    assert verdict_of(with_engine, 10.0).idle


def test_energy_counter_catches_what_power_samples_alias() -> None:
    # Power sampled only between bursts reads the idle holder; the counter integrates the bursts.
    idle_w, busy_mean_w = 120.0, 185.0
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=60,
        util_mean_pct=0.0,
        power_samples=60,
        power_mean_w=idle_w,
        energy_samples=61,
        energy_increase_mj=busy_mean_w * WINDOW_S * 1000,
        energy_span_s=WINDOW_S,
        power_floor_w=FLOOR_W,
    )
    verdict = verdict_of(window, 5.0)
    assert not verdict.idle
    assert verdict.estimates["energy"] == pytest.approx(100 * (185 - 120) / 580)
    assert verdict.estimates["power"] == 0.0


def test_stuck_energy_counter_does_not_hide_power() -> None:
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        power_samples=60,
        power_mean_w=400.0,
        energy_samples=61,
        energy_increase_mj=0.0,
        energy_span_s=WINDOW_S,
    )
    assert not verdict_of(window, 10.0).idle


def test_energy_needs_two_samples_spanning_the_window() -> None:
    base = GpuWindow("0", MODEL, WINDOW_S, energy_samples=2, energy_increase_mj=0.0)
    assert not verdict_of(dataclasses.replace(base, energy_span_s=10.0), 10.0).idle
    assert verdict_of(dataclasses.replace(base, energy_span_s=WINDOW_S * 0.8), 10.0).idle
    assert not verdict_of(
        dataclasses.replace(base, energy_samples=1, energy_span_s=WINDOW_S), 10.0
    ).idle
    # Span unknown (Prometheus increase()): the samples' count must cover the window.
    assert not verdict_of(base, 10.0).idle
    assert verdict_of(dataclasses.replace(base, energy_samples=NEED), 10.0).idle


def test_too_few_samples_is_not_idle() -> None:
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=NEED - 1,
        util_mean_pct=0.0,
        power_samples=NEED - 1,
        power_mean_w=120.0,
        engine_samples=NEED - 1,
        engine_mean=0.0,
    )
    verdict = verdict_of(window, 10.0)
    assert not verdict.idle
    assert verdict.usage_pct is None
    assert "insufficient samples" in verdict.reason
    assert verdict_of(dataclasses.replace(window, power_samples=NEED), 10.0).idle


def test_no_windows_is_not_idle() -> None:
    assert not idle_verdict([], 10.0, REPLAY_MODELS, scrape_interval_s=1.0).idle


def test_mig_only_engine_counts() -> None:
    quiet_gpu = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=60,
        util_mean_pct=0.0,
        power_samples=60,
        power_mean_w=120.0,
        mig_instance="3",
    )
    verdict = verdict_of(quiet_gpu, 10.0)
    assert not verdict.idle
    assert verdict.estimates == {}
    assert "GR_ENGINE_ACTIVE" in verdict.reason
    idle_instance = dataclasses.replace(quiet_gpu, engine_samples=60, engine_mean=0.01)
    assert verdict_of(idle_instance, 10.0).idle
    # The whole GPU is busy (other instances work); only this instance's engine speaks for it.
    busy_gpu = dataclasses.replace(idle_instance, util_mean_pct=100.0, power_mean_w=690.0)
    assert verdict_of(busy_gpu, 10.0).idle
    working = dataclasses.replace(idle_instance, engine_mean=0.3)
    assert not verdict_of(working, 10.0).idle


def test_time_sliced_gpu_usage_is_not_divided() -> None:
    # 30 % duty on a GPU shared by 4 pods: each pod is charged 30 %, not 7.5 %.
    power = 120.0 + 0.3 * 580.0
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        power_samples=60,
        power_mean_w=power,
        sharing_pods=4,
        power_floor_w=FLOOR_W,
    )
    verdict = verdict_of(window, 10.0)
    assert not verdict.idle
    assert verdict.usage_pct == pytest.approx(30.0)
    idle = dataclasses.replace(window, power_mean_w=121.0)
    assert verdict_of(idle, 10.0).idle


def test_every_gpu_must_be_idle() -> None:
    idle = GpuWindow(
        "0", MODEL, WINDOW_S, power_samples=60, power_mean_w=120.0, power_floor_w=FLOOR_W
    )
    busy = dataclasses.replace(idle, gpu="1", power_mean_w=600.0)
    verdict = idle_verdict([idle, busy], 10.0, REPLAY_MODELS, scrape_interval_s=1.0)
    assert not verdict.idle
    assert verdict.usage_pct == pytest.approx(100 * 480 / 580)
    assert [g.idle for g in verdict.gpus] == [True, False]
    assert idle_verdict([idle, idle], 10.0, REPLAY_MODELS, scrape_interval_s=1.0).idle


def test_threshold_is_strict() -> None:
    window = GpuWindow("0", MODEL, WINDOW_S, engine_samples=60, engine_mean=0.1)
    assert not verdict_of(window, 10.0).idle
    assert verdict_of(window, 10.5).idle
    assert not verdict_of(dataclasses.replace(window, engine_mean=0.0), 0.0).idle


def test_describe_quotes_every_estimate() -> None:
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=60,
        util_mean_pct=0.0,
        power_samples=60,
        power_mean_w=120.0 + 0.018 * 580,
        power_floor_w=FLOOR_W,
    )
    assert verdict_of(window, 10.0).describe() == "usage 1.8 % (util 0.0 %, power 1.8 %)"


@pytest.mark.parametrize(
    ("threshold", "interval", "coverage"),
    [(-1.0, 1.0, 0.8), (101.0, 1.0, 0.8), (10.0, 0.0, 0.8), (10.0, 1.0, 0.0)],
)
def test_bad_arguments_raise(threshold: float, interval: float, coverage: float) -> None:
    with pytest.raises(ValueError):
        idle_verdict([], threshold, {}, scrape_interval_s=interval, min_coverage=coverage)


def test_power_model_validation() -> None:
    with pytest.raises(ValueError):
        PowerModel(idle_w=200.0, max_w=100.0)
    with pytest.raises(ValueError):
        PowerModel(idle_w=math.nan, max_w=100.0)
    assert PowerModel(100.0, 200.0).duty_pct(50.0) == 0.0
    assert PowerModel(100.0, 200.0).duty_pct(250.0) == 100.0


def test_counter_increase_counts_resets() -> None:
    assert counter_increase(np.array([10.0, 15.0, 3.0, 8.0])) == 5.0 + 3.0 + 5.0
    assert counter_increase(np.array([7.0])) == 0.0


def test_window_from_samples_energy_is_exact_and_windowed() -> None:
    t = np.arange(0.0, 121.0)  # 0..120 s
    power = np.full(t.shape, 120.0)
    watts = np.where((t % 3) < 0.3, 700.0, 120.0)  # true draw; counter integrates it
    energy = np.concatenate(([0.0], np.cumsum(watts[1:]) * 1000.0))  # mJ, 1 s steps
    util = np.zeros(t.shape)
    util[::7] = np.nan
    window = window_from_samples(
        t, end_s=120.0, window_s=60.0, model=MODEL, util_pct=util, power_w=power, energy_mj=energy
    )
    inside = (t > 60.0) & (t <= 120.0)
    assert window.power_samples == 60
    assert window.util_samples == int(np.count_nonzero(inside & np.isfinite(util)))
    assert window.energy_samples == 60
    assert window.energy_span_s == 59.0
    assert window.energy_increase_mj == pytest.approx(float(np.sum(watts[62:121])) * 1000.0)
    with pytest.raises(ValueError):
        window_from_samples(t, end_s=1.0, window_s=1.0, util_pct=np.zeros(3))


# Property tests: caution is monotone.

SAMPLE_COUNTS = st.sampled_from([0, 10, 48, 60])


@st.composite
def windows(draw: st.DrawFn) -> GpuWindow:
    return GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=draw(SAMPLE_COUNTS),
        util_mean_pct=draw(st.floats(0.0, 100.0)),
        power_samples=draw(SAMPLE_COUNTS),
        power_mean_w=draw(st.floats(0.0, 800.0)),
        energy_samples=draw(SAMPLE_COUNTS),
        energy_increase_mj=draw(st.floats(0.0, 800.0 * WINDOW_S * 1000)),
        energy_span_s=draw(st.none() | st.floats(0.0, WINDOW_S)),
        engine_samples=draw(SAMPLE_COUNTS),
        engine_mean=draw(st.floats(0.0, 1.0)),
        mig_instance=draw(st.none() | st.just("1")),
        sharing_pods=draw(st.integers(1, 4)),
        util_peak_pct=draw(st.none() | st.floats(0.0, 100.0)),
        power_peak_w=draw(st.none() | st.floats(0.0, 800.0)),
        energy_peak_w=draw(st.none() | st.floats(0.0, 800.0)),
        engine_peak=draw(st.none() | st.floats(0.0, 1.0)),
        power_floor_w=draw(st.none() | st.floats(0.0, 800.0)),
        history_s=draw(st.none() | st.floats(0.0, 2 * WINDOW_S)),
    )


def scaled(window: GpuWindow, factor: float) -> GpuWindow:
    assert window.util_mean_pct is not None and window.power_mean_w is not None
    assert window.energy_increase_mj is not None and window.engine_mean is not None
    return dataclasses.replace(
        window,
        util_mean_pct=window.util_mean_pct * factor,
        power_mean_w=window.power_mean_w * factor,
        energy_increase_mj=window.energy_increase_mj * factor,
        engine_mean=window.engine_mean * factor,
        util_peak_pct=None if window.util_peak_pct is None else window.util_peak_pct * factor,
        power_peak_w=None if window.power_peak_w is None else window.power_peak_w * factor,
        energy_peak_w=None if window.energy_peak_w is None else window.energy_peak_w * factor,
        engine_peak=None if window.engine_peak is None else window.engine_peak * factor,
    )


@given(windows(), windows(), st.floats(1.0, 10.0), st.floats(0.0, 100.0))
def test_scaling_signals_up_never_turns_busy_into_idle(
    first: GpuWindow, second: GpuWindow, factor: float, threshold: float
) -> None:
    second = dataclasses.replace(second, gpu="1")
    before = idle_verdict([first, second], threshold, REPLAY_MODELS, scrape_interval_s=1.0)
    after = idle_verdict(
        [scaled(first, factor), scaled(second, factor)],
        threshold,
        REPLAY_MODELS,
        scrape_interval_s=1.0,
    )
    if not before.idle:
        assert not after.idle


SIGNAL_FIELDS = {
    "util": ("util_samples", "util_mean_pct", 100.0),
    "power": ("power_samples", "power_mean_w", 800.0),
    "energy": ("energy_samples", "energy_increase_mj", 800.0 * WINDOW_S * 1000),
    "engine": ("engine_samples", "engine_mean", 1.0),
}
PEAK_FIELDS = {
    "util": ("util_peak_pct", 100.0),
    "power": ("power_peak_w", 800.0),
    "energy": ("energy_peak_w", 800.0),
    "engine": ("engine_peak", 1.0),
}


def without(window: GpuWindow, signal: str) -> GpuWindow:
    count, value, _ = SIGNAL_FIELDS[signal]
    changes: dict[str, Any] = {count: 0, value: None}
    return dataclasses.replace(window, **changes)


@given(windows(), st.sampled_from(sorted(SIGNAL_FIELDS)), st.floats(0.0, 100.0))
def test_adding_a_signal_never_turns_a_measured_busy_into_idle(
    window: GpuWindow, signal: str, threshold: float
) -> None:
    fewer = without(window, signal)
    before = verdict_of(fewer, threshold)
    after = verdict_of(window, threshold)
    if before.usage_pct is not None and before.usage_pct >= threshold:
        assert not after.idle
    if signal == "util" and not before.idle:
        assert not after.idle  # utilization can only prove busy


@given(
    windows(), st.sampled_from(sorted(SIGNAL_FIELDS)), st.floats(0.0, 1.0), st.floats(0.0, 100.0)
)
def test_raising_one_signal_never_turns_busy_into_idle(
    window: GpuWindow, signal: str, fraction: float, threshold: float
) -> None:
    _, field, top = SIGNAL_FIELDS[signal]
    current = getattr(window, field)
    raised = dataclasses.replace(window, **{field: current + (top - current) * fraction})
    if not verdict_of(window, threshold).idle:
        assert not verdict_of(raised, threshold).idle


@given(windows())
def test_estimates_stay_within_percent(window: GpuWindow) -> None:
    for value in gpu_estimates(window, REPLAY_MODELS[MODEL], 1.0).values():
        assert 0.0 <= value <= 100.0


@given(windows(), st.sampled_from(sorted(PEAK_FIELDS)), st.floats(0.0, 1.0), st.floats(0.0, 100.0))
def test_raising_or_adding_a_peak_never_turns_busy_into_idle(
    window: GpuWindow, signal: str, fraction: float, threshold: float
) -> None:
    field, top = PEAK_FIELDS[signal]
    current = getattr(window, field) or 0.0
    raised = dataclasses.replace(window, **{field: current + (top - current) * fraction})
    if not verdict_of(window, threshold).idle:
        assert not verdict_of(raised, threshold).idle


@given(windows(), st.floats(0.0, 100.0))
def test_a_peak_never_makes_a_window_idle(window: GpuWindow, threshold: float) -> None:
    no_peaks = dataclasses.replace(
        window, util_peak_pct=None, power_peak_w=None, energy_peak_w=None, engine_peak=None
    )
    if not verdict_of(no_peaks, threshold).idle:
        assert not verdict_of(window, threshold).idle
