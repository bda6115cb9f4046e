"""Idle draw calibrated per GPU: a busy job never reads idle because its GPU idles off the model.

The proof runs the verdict over samples of periodic work (10-20 % duty, several periods and phases
against the scrape) on GPUs whose real idle draw is 30 W below or above their model's, for the
A100, H100 and H200 power models, at dcgm-exporter's 30 s scrape and at 15 s. Each GPU is sampled
as dcgm-exporter does: the power and utilization gauges are point readings at the scrape (so they
alias against the work), the energy counter is the exact integral of the power. Every busy job
must read busy under a 10 % threshold, and every truly idle GPU idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hack.fake_dcgm.model import Load, mean_util
from hack.fake_dcgm.power import PowerModel as TruePower
from hack.fake_dcgm.usage import Periodic
from reclaim.signals import GpuWindow
from reclaim.usage import (
    CALIBRATION_MARGIN_W,
    DEFAULT_POWER_MODELS,
    IDLE_RANGE_W,
    FloatArray,
    PowerModel,
    idle_verdict,
    window_from_samples,
)

THRESHOLD_PCT = 10.0
WINDOW_S = 3600.0
LIFE_S = 2 * WINDOW_S
"""The pod has run for two windows: the power floor looks back over its whole life."""
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200")
OFFSETS_W = (-30.0, 0.0, 30.0)
SCRAPES_S = (30.0, 15.0)
DUTIES = (0.10, 0.15, 0.20)
PERIODS_S = (3.0, 7.0, 15.0, 30.0, 45.0, 60.0, 97.0, 600.0)
PHASES = (0.0, 0.29, 0.71)
"""Phase of the work against the pod's start (and so against the scrape), in periods."""
NOISE_W = 2.0
"""Power gauge noise: uniform +- this, seeded."""


@dataclass(frozen=True)
class Work:
    """Full-load bursts of `duty * period` seconds every `period`, starting `phase` periods in:
    the shape of hack/fake_dcgm's ``periodic:period=P,duty=D,level=100,phase=F``."""

    period_s: float
    duty: float
    phase: float

    @property
    def shape(self) -> Periodic:
        return Periodic(self.period_s, self.duty, 100.0, self.phase * self.period_s)

    def busy_s(self, t: FloatArray) -> FloatArray:
        """Seconds of work in [0, t] for each t (exact)."""
        # t: (n,)
        shifted = t - self.phase * self.period_s  # (n,)
        busy_per_period = self.duty * self.period_s
        periods = np.floor(shifted / self.period_s)  # (n,)
        into = shifted - periods * self.period_s  # (n,)
        before = -self.phase * self.period_s  # the same at t = 0
        k0 = math.floor(before / self.period_s)
        at_zero = k0 * busy_per_period + min(before - k0 * self.period_s, busy_per_period)
        return periods * busy_per_period + np.minimum(into, busy_per_period) - at_zero

    def working(self, t: FloatArray) -> FloatArray:
        """1.0 where a burst runs at t, else 0.0 (as the point-sampled gauges see it)."""
        # t: (n,)
        into = np.mod(t - self.phase * self.period_s, self.period_s)  # (n,)
        return (np.round(into, 9) < round(self.duty * self.period_s, 9)).astype(np.float64)


def samples(power: TruePower, work: Work, scrape_s: float, seed: int = 0) -> dict[str, FloatArray]:
    """What Prometheus holds for one GPU over the pod's life: scrape times, util and power gauges
    (point readings, the power with seeded noise) and the energy counter (mJ, exact)."""
    t = np.arange(scrape_s, LIFE_S + scrape_s / 2, scrape_s)  # (n,)
    busy = work.working(t)  # (n,)
    noise = np.random.default_rng(seed).uniform(-NOISE_W, NOISE_W, t.shape)  # (n,)
    energy_j = power.idle_w * t + (power.max_w - power.idle_w) * work.busy_s(t)  # (n,)
    return {
        "t": t,
        "util": 100.0 * busy,
        "power": power.power_w(0.0) + (power.max_w - power.idle_w) * busy + noise,
        "energy": energy_j * 1000.0,
    }


def truth(model: str, offset_w: float) -> TruePower:
    """A real GPU of `model` whose idle draw is `offset_w` off the model's."""
    nominal = DEFAULT_POWER_MODELS[model]
    idle_w = nominal.idle_w + offset_w
    return TruePower(idle_w=idle_w, max_w=nominal.max_w, no_process_w=0.65 * idle_w)


def window_of(model: str, series: dict[str, FloatArray]) -> GpuWindow:
    return window_from_samples(
        series["t"],
        end_s=float(series["t"][-1]),
        window_s=WINDOW_S,
        model=model,
        util_pct=series["util"],
        power_w=series["power"],
        energy_mj=series["energy"],
    )


def judge(model: str, series: dict[str, FloatArray], scrape_s: float) -> tuple[bool, str]:
    verdict = idle_verdict(
        [window_of(model, series)],
        THRESHOLD_PCT,
        DEFAULT_POWER_MODELS,
        scrape_interval_s=scrape_s,
    )
    return verdict.idle, verdict.describe()


def test_generator_matches_the_fake_exporter() -> None:
    """The generator's bursts and energy are hack/fake_dcgm's periodic shape, exactly."""
    work = Work(period_s=7.0, duty=0.15, phase=0.29)
    load = Load(work.shape, start_time=0.0)
    t = np.arange(0.0, 300.0, 0.37)  # (n,)
    points = np.array([load.sample(float(x)).util_pct for x in t])  # (n,)
    np.testing.assert_array_equal(100.0 * work.working(t), points)
    for a, b in ((0.0, 31.0), (12.5, 99.0), (200.0, 299.9)):
        busy = work.busy_s(np.array([a, b]))
        assert (busy[1] - busy[0]) / (b - a) * 100.0 == pytest.approx(mean_util(load, a, b))


@pytest.mark.parametrize("scrape_s", SCRAPES_S)
@pytest.mark.parametrize("offset_w", OFFSETS_W)
@pytest.mark.parametrize("model", MODELS)
def test_periodic_work_reads_busy_whatever_the_gpu_idles_at(
    model: str, offset_w: float, scrape_s: float
) -> None:
    power = truth(model, offset_w)
    wrongly_idle = []
    for duty in DUTIES:
        for period_s in PERIODS_S:
            for phase in PHASES:
                work = Work(period_s, duty, phase)
                idle, described = judge(model, samples(power, work, scrape_s), scrape_s)
                if idle:
                    wrongly_idle.append(f"duty {duty} period {period_s} phase {phase}: {described}")
    assert wrongly_idle == []


@pytest.mark.parametrize("scrape_s", SCRAPES_S)
@pytest.mark.parametrize("offset_w", OFFSETS_W)
@pytest.mark.parametrize("model", MODELS)
def test_truly_idle_gpus_read_idle_whatever_they_idle_at(
    model: str, offset_w: float, scrape_s: float
) -> None:
    idle, described = judge(
        model, samples(truth(model, offset_w), Work(60.0, 0.0, 0.0), scrape_s), scrape_s
    )
    assert idle, described


def test_a_fixed_model_idle_draw_read_a_busy_h100_as_idle() -> None:
    """The defect this calibration fixes: at 10 % duty an H100 idling at 70 W (the fake
    exporter's H100) draws 133 W, 5.5 % of the model's 100-700 W range."""
    model = "NVIDIA H100 80GB HBM3"
    power = truth(model, -30.0)
    window = window_of(model, samples(power, Work(30.0, 0.10, 0.5), 30.0))
    assert window.power_floor_w is not None and window.power_floor_w < 72.0
    nominal = DEFAULT_POWER_MODELS[model]
    assert window.energy_increase_mj is not None and window.energy_span_s is not None
    mean_w = window.energy_increase_mj / 1000.0 / window.energy_span_s
    assert nominal.duty_pct(mean_w) < THRESHOLD_PCT  # the old reading
    calibrated = nominal.duty_pct(mean_w, nominal.calibrated_idle_w(window.power_floor_w))
    assert calibrated >= THRESHOLD_PCT


# The calibration's own rules.

H200 = DEFAULT_POWER_MODELS["NVIDIA H200"]


@pytest.mark.parametrize(
    ("floor_w", "idle_w"),
    [
        pytest.param(None, 118.0 - IDLE_RANGE_W, id="unknown: the lowest plausible"),
        pytest.param(math.nan, 118.0 - IDLE_RANGE_W, id="NaN: the lowest plausible"),
        pytest.param(math.inf, 118.0 - IDLE_RANGE_W, id="inf: the lowest plausible"),
        pytest.param(148.0, 148.0 - CALIBRATION_MARGIN_W, id="30 W above the model"),
        pytest.param(88.0, 88.0 - CALIBRATION_MARGIN_W, id="30 W below the model"),
        pytest.param(80.0, 118.0 - IDLE_RANGE_W, id="margin stops at the range"),
        pytest.param(400.0, 118.0 - IDLE_RANGE_W, id="never idled: no evidence"),
        pytest.param(0.0, 118.0 - IDLE_RANGE_W, id="below the range: bounded"),
    ],
)
def test_calibrated_idle_draw(floor_w: float | None, idle_w: float) -> None:
    assert H200.calibrated_idle_w(floor_w) == pytest.approx(idle_w)


@given(st.none() | st.floats(allow_nan=True, allow_infinity=True), st.floats(0.0, 1000.0))
def test_calibration_never_reads_less_than_the_most_cautious_bounded_floor(
    floor_w: float | None, mean_w: float
) -> None:
    """Whatever the floor, the idle draw used is within the plausible range and not above the
    floor: a reading never comes out lower than the floor (bounded to the range) would give."""
    low, high = H200.idle_bounds_w
    idle_w = H200.calibrated_idle_w(floor_w)
    assert low <= idle_w <= high
    if floor_w is not None and math.isfinite(floor_w) and low <= floor_w <= high:
        assert idle_w <= floor_w
        assert H200.duty_pct(mean_w, idle_w) >= H200.duty_pct(mean_w, floor_w)


def test_power_model_rejects_a_bad_range() -> None:
    with pytest.raises(ValueError, match="idle range"):
        PowerModel(100.0, 200.0, idle_range_w=-1.0)
    with pytest.raises(ValueError, match="idle range"):
        PowerModel(100.0, 200.0, idle_range_w=math.inf)
    small = PowerModel(10.0, 20.0)
    assert small.idle_bounds_w == (0.0, 20.0 - CALIBRATION_MARGIN_W)
