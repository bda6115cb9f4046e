"""Coverage at production scrape intervals, the configured coverage, the energy counter's edge
cases, and non-finite readings: none of them may make a working or unmeasured GPU idle."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from reclaim.signals import GpuWindow
from reclaim.usage import (
    CALIBRATION_MARGIN_W,
    DEFAULT_MIN_COVERAGE,
    PowerModel,
    counter_cumulative,
    counter_increase,
    gpu_estimates,
    idle_verdict,
    required_samples,
    window_from_samples,
)

MODEL = "NVIDIA H200"
IDLE_W, MAX_W = 118.0, 690.0
MODELS = {MODEL: PowerModel(idle_w=IDLE_W, max_w=MAX_W)}
FLOOR_W = IDLE_W + CALIBRATION_MARGIN_W
WINDOW_S = 3600.0
THRESHOLD_PCT = 10.0


def idle(window: GpuWindow, scrape_s: float, min_coverage: float = DEFAULT_MIN_COVERAGE) -> bool:
    return idle_verdict(
        [window], THRESHOLD_PCT, MODELS, scrape_interval_s=scrape_s, min_coverage=min_coverage
    ).idle


def quiet(samples: int) -> GpuWindow:
    """An idle GPU whose power gauge has `samples` readings in the hour."""
    return GpuWindow(
        "0", MODEL, WINDOW_S, power_samples=samples, power_mean_w=IDLE_W, power_floor_w=FLOOR_W
    )


@pytest.mark.parametrize(("scrape_s", "expected"), [(30.0, 120), (15.0, 240), (60.0, 60)])
def test_coverage_counts_scrapes_at_production_intervals(scrape_s: float, expected: int) -> None:
    assert WINDOW_S / scrape_s == expected
    need = math.ceil(DEFAULT_MIN_COVERAGE * expected)  # 96 of 120 at 30 s, 192 of 240 at 15 s
    assert required_samples(WINDOW_S, scrape_s, DEFAULT_MIN_COVERAGE) == pytest.approx(need)
    assert idle(quiet(need), scrape_s)
    assert not idle(quiet(need - 1), scrape_s)


@pytest.mark.parametrize("scrape_s", [30.0, 15.0])
def test_coverage_from_samples_at_production_intervals(scrape_s: float) -> None:
    t = np.arange(scrape_s, WINDOW_S + scrape_s / 2, scrape_s)  # (n,) a full hour of scrapes
    power = np.full(t.shape, IDLE_W)  # (n,)
    full = window_from_samples(t, end_s=WINDOW_S, window_s=WINDOW_S, model=MODEL, power_w=power)
    assert full.power_samples == int(WINDOW_S / scrape_s)
    assert idle(full, scrape_s)
    # A quarter of the scrapes lost (exporter down): under 80 %, not idle.
    power[: len(t) // 4 + 1] = np.nan
    gappy = window_from_samples(t, end_s=WINDOW_S, window_s=WINDOW_S, model=MODEL, power_w=power)
    assert not idle(gappy, scrape_s)


def test_the_configured_coverage_is_the_one_applied() -> None:
    half = quiet(60)  # half of the hour's 120 scrapes at 30 s
    assert not idle(half, 30.0)
    assert idle(half, 30.0, min_coverage=0.5)
    nearly = quiet(110)
    assert idle(nearly, 30.0)
    assert not idle(nearly, 30.0, min_coverage=1.0)
    # Also for the energy counter's span.
    energy = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        energy_samples=2,
        energy_increase_mj=IDLE_W * 1800.0 * 1000.0,
        energy_span_s=1800.0,
        power_floor_w=FLOOR_W,
    )
    assert not idle(energy, 30.0)
    assert idle(energy, 30.0, min_coverage=0.5)
    assert gpu_estimates(energy, MODELS[MODEL], 30.0, 0.5) != {}
    assert gpu_estimates(energy, MODELS[MODEL], 30.0) == {}


def test_a_repeated_energy_reading_is_no_reset() -> None:
    assert counter_increase(np.array([5.0, 5.0, 7.0])) == 2.0
    assert counter_increase(np.array([5.0, 5.0])) == 0.0
    assert counter_increase(np.array([9.0, 2.0])) == 2.0  # a drop is a reset
    # A busy GPU's counter (690 W) read twice at the same value (a stalled exporter repeats its
    # last reading): the increase is the rest, not the counter's whole value again.
    mj = np.array([1e9, 1e9 + 690e3 * 30, 1e9 + 690e3 * 30, 1e9 + 690e3 * 90])
    t = np.array([0.0, 30.0, 60.0, 90.0])
    window = window_from_samples(t, end_s=90.0, window_s=91.0, model=MODEL, energy_mj=mj)
    assert window.energy_increase_mj == pytest.approx(690e3 * 90)


def test_two_energy_readings_give_their_increase() -> None:
    assert counter_increase(np.array([1000.0, 4000.0])) == 3000.0
    assert counter_increase(np.array([1000.0])) == 0.0
    t = np.array([0.0, 3600.0])
    busy = np.array([0.0, 400.0 * 3600.0 * 1000.0])  # 400 W for the hour
    window = window_from_samples(t, end_s=3600.0, window_s=3600.5, model=MODEL, energy_mj=busy)
    assert window.energy_samples == 2
    assert window.energy_span_s == 3600.0
    estimate = gpu_estimates(
        dataclasses.replace(window, power_floor_w=FLOOR_W), MODELS[MODEL], 3600.0
    )
    assert estimate["energy"] == pytest.approx(100 * (400 - IDLE_W) / (MAX_W - IDLE_W))


NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize(
    ("count", "mean"),
    [
        ("power_samples", "power_mean_w"),
        ("engine_samples", "engine_mean"),
        ("util_samples", "util_mean_pct"),
    ],
)
def test_a_non_finite_gauge_is_missing_never_idle(count: str, mean: str, value: float) -> None:
    fields: dict[str, Any] = {count: 120, mean: value}
    window = GpuWindow("0", MODEL, WINDOW_S, power_floor_w=FLOOR_W, **fields)
    assert gpu_estimates(window, MODELS[MODEL], 30.0) == {}
    assert not idle(window, 30.0)


@pytest.mark.parametrize("value", NON_FINITE)
def test_non_finite_energy_or_span_is_missing(value: float) -> None:
    base = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        energy_samples=120,
        energy_increase_mj=IDLE_W * WINDOW_S * 1000.0,
        energy_span_s=WINDOW_S,
        power_floor_w=FLOOR_W,
    )
    assert idle(base, 30.0)
    assert not idle(dataclasses.replace(base, energy_increase_mj=value), 30.0)
    assert not idle(dataclasses.replace(base, energy_span_s=value), 30.0)


def test_non_finite_samples_are_dropped_not_read_as_zero() -> None:
    t = np.arange(30.0, WINDOW_S + 15.0, 30.0)  # (120,)
    engine = np.full(t.shape, math.nan)  # (120,)
    window = window_from_samples(
        t, end_s=WINDOW_S, window_s=WINDOW_S, model=MODEL, engine_active=engine
    )
    assert (window.engine_samples, window.engine_mean, window.engine_peak) == (0, None, None)
    assert not idle(window, 30.0)
    power = np.full(t.shape, math.inf)  # (120,)
    window = window_from_samples(t, end_s=WINDOW_S, window_s=WINDOW_S, model=MODEL, power_w=power)
    assert (window.power_samples, window.power_floor_w) == (0, None)
    assert not idle(window, 30.0)


def test_duty_of_nan_is_nan_not_zero() -> None:
    assert math.isnan(MODELS[MODEL].duty_pct(math.nan))
    assert MODELS[MODEL].duty_pct(math.inf) == 100.0


def test_an_unmeasured_gpu_keeps_the_pod_busy() -> None:
    """A pod holding two GPUs with samples for one: the other may be working."""
    window = quiet(120)
    assert idle_verdict([window], THRESHOLD_PCT, MODELS, scrape_interval_s=30.0, held_gpus=1).idle
    verdict = idle_verdict([window], THRESHOLD_PCT, MODELS, scrape_interval_s=30.0, held_gpus=2)
    assert not verdict.idle
    assert verdict.reason == "not idle: samples for 1 of the pod's 2 GPUs"
    both = [window, dataclasses.replace(window, gpu="1")]
    assert idle_verdict(both, THRESHOLD_PCT, MODELS, scrape_interval_s=30.0, held_gpus=2).idle
    # A MIG instance is no whole GPU.
    mig = GpuWindow("7", MODEL, WINDOW_S, engine_samples=120, engine_mean=0.0, mig_instance="3")
    assert idle_verdict([mig], THRESHOLD_PCT, MODELS, scrape_interval_s=30.0, held_gpus=0).idle
    assert not idle_verdict([mig], THRESHOLD_PCT, MODELS, scrape_interval_s=30.0, held_gpus=1).idle


def test_the_energy_counter_is_read_from_the_gpus_own_idle_draw() -> None:
    """An H100 idling at 70 W (30 W under its model) at 10 % duty: 133 W on the counter, while
    its power gauge, sampled between bursts, reads its idle draw."""
    h100 = PowerModel(idle_w=100.0, max_w=700.0)
    window = GpuWindow(
        "0",
        "H100",
        WINDOW_S,
        power_samples=120,
        power_mean_w=70.0,
        energy_samples=120,
        energy_increase_mj=133.0 * WINDOW_S * 1000.0,
        energy_span_s=WINDOW_S,
        power_floor_w=70.0,
    )
    estimates = gpu_estimates(window, h100, 30.0)
    assert estimates["energy"] == pytest.approx(100 * (133 - 65) / (700 - 65))
    assert estimates["power"] == pytest.approx(100 * 5 / 635)
    verdict = idle_verdict([window], THRESHOLD_PCT, {"H100": h100}, scrape_interval_s=30.0)
    assert not verdict.idle


@pytest.mark.parametrize("signal", ["util", "engine"])
def test_exactly_the_needed_samples_count_for_every_gauge(signal: str) -> None:
    need = int(DEFAULT_MIN_COVERAGE * WINDOW_S / 30.0)  # 96
    if signal == "util":  # utilization can prove busy
        window = dataclasses.replace(quiet(120), util_samples=need, util_mean_pct=50.0)
        assert not idle(window, 30.0)
        assert idle(dataclasses.replace(window, util_samples=need - 1), 30.0)
    else:  # the engine alone can prove idle
        window = GpuWindow("0", MODEL, WINDOW_S, engine_samples=need, engine_mean=0.0)
        assert idle(window, 30.0)
        assert not idle(dataclasses.replace(window, engine_samples=need - 1), 30.0)


def test_counter_edge_cases() -> None:
    assert counter_increase(np.array([])) == 0.0
    np.testing.assert_array_equal(
        counter_cumulative(np.array([5.0, 7.0, 2.0, 2.0])), [0.0, 2.0, 4.0, 4.0]
    )
    np.testing.assert_array_equal(counter_cumulative(np.array([5.0])), [0.0])


def test_power_model_bounds() -> None:
    with pytest.raises(ValueError, match="finite"):
        PowerModel(100.0, math.inf)
    with pytest.raises(ValueError, match="finite"):
        PowerModel(math.nan, 100.0)
    with pytest.raises(ValueError, match="needs 0 <= idle_w < max_w"):
        PowerModel(100.0, 100.0)
    with pytest.raises(ValueError, match="needs 0 <= idle_w < max_w"):
        PowerModel(-1.0, 100.0)
    assert PowerModel(0.0, 100.0).idle_bounds_w == (0.0, 40.0)
    assert PowerModel(100.0, 400.0, idle_range_w=0.0).idle_bounds_w == (100.0, 100.0)
    model = MODELS[MODEL]
    low, high = model.idle_bounds_w
    assert (low, high) == (78.0, 158.0)
    assert model.calibrated_idle_w(high) == high - CALIBRATION_MARGIN_W
    assert model.calibrated_idle_w(low) == low
    assert model.calibrated_idle_w(high + 0.01) == low


@pytest.mark.parametrize("window_s", [0.0, -60.0, math.nan])
def test_a_window_without_length_is_not_idle(window_s: float) -> None:
    window = GpuWindow(
        "0",
        MODEL,
        window_s,
        power_samples=120,
        power_mean_w=IDLE_W,
        energy_samples=120,
        energy_increase_mj=0.0,
        energy_span_s=0.0,
        power_floor_w=FLOOR_W,
    )
    assert gpu_estimates(window, MODELS[MODEL], 30.0) == {}
    assert not idle(window, 30.0)
