"""What the verdict reports (events and logs quote it), and the edges of its sample arithmetic:
sub-windows at the window's bounds, one-reading sub-windows, the power floor's lookback."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from reclaim.signals import GpuWindow
from reclaim.usage import (
    CALIBRATION_MARGIN_W,
    PowerModel,
    Verdict,
    idle_verdict,
    window_from_samples,
)

MODEL = "NVIDIA H200"
MODELS = {MODEL: PowerModel(idle_w=118.0, max_w=690.0)}
WINDOW_S = 600.0
QUIET = GpuWindow(
    "2",
    MODEL,
    WINDOW_S,
    power_samples=20,
    power_mean_w=118.0,
    power_floor_w=118.0 + CALIBRATION_MARGIN_W,
)
BUSY = dataclasses.replace(QUIET, gpu="5", power_mean_w=690.0)


def judge(*windows: GpuWindow) -> Verdict:
    return idle_verdict(list(windows), 10.0, MODELS, scrape_interval_s=30.0)


def test_idle_and_busy_reasons_name_each_gpu() -> None:
    idle = judge(QUIET, dataclasses.replace(QUIET, gpu="3"))
    assert idle.idle
    assert idle.reason == "idle: usage 0.0 % < 10 % on all 2 GPU(s)"
    assert [(g.gpu, g.mig_instance, g.idle) for g in idle.gpus] == [
        ("2", None, True),
        ("3", None, True),
    ]
    assert idle.gpus[0].reason == "GPU 2: usage 0.0 % < 10 %"
    busy = judge(QUIET, BUSY, dataclasses.replace(BUSY, gpu="6", sharing_pods=3))
    assert not busy.idle
    assert busy.reason == (
        "not idle: GPU 5: usage 100.0 % >= 10 %; GPU 6 (shared by 3 pods): usage 100.0 % >= 10 %"
    )
    assert [(g.gpu, g.usage_pct, g.idle) for g in busy.gpus] == [
        ("2", 0.0, True),
        ("5", 100.0, False),
        ("6", 100.0, False),
    ]
    assert busy.usage_pct == 100.0 and busy.estimates == {"power": 100.0}
    shared_idle = judge(dataclasses.replace(QUIET, sharing_pods=2))
    assert shared_idle.gpus[0].reason == "GPU 2 (shared by 2 pods): usage 0.0 % < 10 %"


def test_mig_and_utilization_reasons() -> None:
    instance = GpuWindow("7", MODEL, WINDOW_S, mig_instance="3")
    verdict = judge(instance)
    assert verdict.gpus[0].reason == (
        "GPU 7 MIG 3: no GR_ENGINE_ACTIVE for the MIG instance (insufficient samples)"
    )
    assert (verdict.gpus[0].gpu, verdict.gpus[0].mig_instance) == ("7", "3")
    assert verdict.describe() == "usage unknown"
    util_only = GpuWindow("1", "Unknown GPU", WINDOW_S, util_samples=20, util_mean_pct=0.0)
    reason = judge(util_only).gpus[0].reason
    assert reason == (
        "GPU 1: utilization alone cannot prove idle (no power model for GPU model "
        "'Unknown GPU'): it aliases against periodic work; power, energy or GR_ENGINE_ACTIVE "
        "is needed"
    )
    with_model = dataclasses.replace(util_only, model=MODEL)
    assert judge(with_model).gpus[0].reason == (
        "GPU 1: utilization alone cannot prove idle: it aliases against periodic work; "
        "power, energy or GR_ENGINE_ACTIVE is needed"
    )
    assert judge(with_model).describe() == "usage 0.0 % (util 0.0 %)"


def test_no_gpu_samples() -> None:
    verdict = judge()
    assert (verdict.idle, verdict.usage_pct, dict(verdict.estimates), verdict.gpus) == (
        False,
        None,
        {},
        (),
    )


@pytest.mark.parametrize(
    ("interval", "coverage", "message"),
    [
        (0.0, 0.8, "scrape interval must be positive, got 0.0"),
        (math.nan, 0.8, "scrape interval must be positive"),
        (30.0, 1.5, "coverage must be within (0, 1], got 1.5"),
    ],
)
def test_bad_arguments_say_which(interval: float, coverage: float, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        idle_verdict([QUIET], 10.0, MODELS, scrape_interval_s=interval, min_coverage=coverage)
    assert message in str(raised.value)
    with pytest.raises(ValueError, match=r"threshold must be within \[0, 100\], got 101"):
        idle_verdict([QUIET], 101.0, MODELS, scrape_interval_s=30.0)


T = np.arange(30.0, WINDOW_S + 15.0, 30.0)  # (20,) a window of 30 s scrapes


def test_window_from_samples_rejects_bad_lengths() -> None:
    for window_s in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="window must be positive"):
            window_from_samples(T, end_s=WINDOW_S, window_s=window_s)
    for sub_s in (0.0, -5.0, math.nan):
        with pytest.raises(ValueError, match="sub-window must be positive"):
            window_from_samples(T, end_s=WINDOW_S, window_s=WINDOW_S, subwindow_s=sub_s)
    with pytest.raises(ValueError, match=r"signal shape \(3,\) differs from t_s \(20,\)"):
        window_from_samples(T, end_s=WINDOW_S, window_s=WINDOW_S, power_w=np.zeros(3))


def test_defaults_and_labels_are_carried() -> None:
    window = window_from_samples(T, end_s=WINDOW_S, window_s=WINDOW_S, util_pct=np.zeros(20))
    assert (window.gpu, window.model, window.mig_instance, window.sharing_pods) == (
        "0",
        "",
        None,
        1,
    )
    assert (window.util_samples, window.util_mean_pct, window.util_peak_pct) == (20, 0.0, 0.0)
    assert (window.energy_samples, window.energy_increase_mj, window.energy_peak_w) == (
        0,
        None,
        None,
    )
    labelled = window_from_samples(
        T,
        end_s=WINDOW_S,
        window_s=WINDOW_S,
        gpu="4",
        model=MODEL,
        engine_active=np.full(20, 0.25),
        mig_instance="2",
        sharing_pods=3,
    )
    assert (labelled.gpu, labelled.model, labelled.mig_instance, labelled.sharing_pods) == (
        "4",
        MODEL,
        "2",
        3,
    )
    assert (labelled.engine_mean, labelled.engine_peak) == (0.25, 0.25)


def test_first_whole_subwindow_starts_at_the_window() -> None:
    # Full power in the first 300 s only: the sub-window (0, 300] is wholly inside the window.
    power = np.where(T <= 300.0, 690.0, 118.0)  # (20,)
    window = window_from_samples(
        T, end_s=WINDOW_S, window_s=WINDOW_S, power_w=power, subwindow_s=300.0
    )
    assert window.power_peak_w == 690.0
    energy = np.cumsum(power * 30.0 * 1000.0)  # (20,) mJ
    window = window_from_samples(
        T, end_s=WINDOW_S, window_s=WINDOW_S, energy_mj=energy, subwindow_s=300.0
    )
    # The sub-window ending at 300 s holds the readings at 30..300 s: 270 s at 690 W.
    assert window.energy_peak_w == pytest.approx(690.0)


def test_a_subwindow_as_long_as_the_window_is_the_whole_window() -> None:
    power = np.where(T <= 300.0, 690.0, 118.0)  # (20,)
    window = window_from_samples(
        T, end_s=WINDOW_S + 40.0, window_s=WINDOW_S, power_w=power, subwindow_s=WINDOW_S
    )
    assert window.power_samples == 19  # the reading at 30 s left the window
    assert window.power_peak_w == pytest.approx(window.power_mean_w)


def test_one_sample_or_one_reading_per_subwindow() -> None:
    one = window_from_samples(T[-1:], end_s=WINDOW_S, window_s=WINDOW_S, power_w=np.array([300.0]))
    assert (one.power_mean_w, one.power_peak_w, one.subwindow_s) == (300.0, None, None)
    with_sub = window_from_samples(
        T[-1:], end_s=WINDOW_S, window_s=WINDOW_S, power_w=np.array([300.0]), subwindow_s=60.0
    )
    assert with_sub.power_peak_w == 300.0
    # Readings 30 s apart, 10 s sub-windows: no sub-window holds two readings, no rate.
    energy = np.cumsum(np.full(20, 118.0 * 30.0 * 1000.0))  # (20,)
    sparse = window_from_samples(
        T, end_s=WINDOW_S, window_s=WINDOW_S, energy_mj=energy, subwindow_s=10.0
    )
    assert sparse.energy_peak_w is None
    # 1 s readings, 1.5 s sub-windows: pairs one second apart give the rate.
    t = np.arange(1.0, 61.0)  # (60,)
    fast = window_from_samples(
        t, end_s=60.0, window_s=60.0, energy_mj=t * 200_000.0, subwindow_s=1.5
    )
    assert fast.energy_peak_w == pytest.approx(200.0)


def test_the_power_floor_looks_back_as_far_as_told() -> None:
    t = np.arange(30.0, 3 * WINDOW_S + 15.0, 30.0)  # (60,) three windows
    power = np.where(t <= WINDOW_S, 90.0, 118.0)  # (60,) a lower draw in the first window
    end = float(t[-1])
    everything = window_from_samples(t, end_s=end, window_s=WINDOW_S, power_w=power)
    assert everything.power_floor_w == 90.0
    recent = window_from_samples(
        t, end_s=end, window_s=WINDOW_S, power_w=power, floor_lookback_s=2 * WINDOW_S
    )
    assert recent.power_floor_w == 118.0
    edge = window_from_samples(
        t, end_s=end, window_s=WINDOW_S, power_w=power, floor_lookback_s=end - WINDOW_S
    )
    assert edge.power_floor_w == 118.0  # the reading at exactly end - lookback is outside


def test_started_clips_but_never_reaches_past_the_end() -> None:
    power = np.full(T.shape, 118.0)  # (20,)
    power[-1] = 690.0  # a reading after the window's end
    window = window_from_samples(
        T, end_s=WINDOW_S - 30.0, window_s=WINDOW_S, power_w=power, started_s=60.0
    )
    assert window.power_samples == 17  # 90..570 s
    assert (window.power_mean_w, window.power_floor_w, window.history_s) == (118.0, 118.0, 510.0)


def test_an_unmeasured_gpu_verdict_still_reports_what_was_measured() -> None:
    verdict = idle_verdict([BUSY], 10.0, MODELS, scrape_interval_s=30.0, held_gpus=2)
    assert (verdict.idle, verdict.usage_pct, dict(verdict.estimates)) == (
        False,
        100.0,
        {"power": 100.0},
    )
    assert [g.gpu for g in verdict.gpus] == ["5"]
    assert verdict.reason == "not idle: samples for 1 of the pod's 2 GPUs"


def test_the_floor_lookback_keeps_to_the_pods_own_samples() -> None:
    power = np.full(T.shape, 118.0)  # (20,)
    power[0] = 60.0  # a predecessor's reading, before the pod started
    power[-1] = 50.0  # after the window's end
    window = window_from_samples(
        T,
        end_s=WINDOW_S - 30.0,
        window_s=WINDOW_S,
        power_w=power,
        started_s=40.0,
        floor_lookback_s=10 * WINDOW_S,
    )
    assert window.power_floor_w == 118.0


def test_short_windows_and_subwindows_are_allowed() -> None:
    t = np.array([0.25, 0.5])  # (2,)
    window = window_from_samples(
        t, end_s=0.5, window_s=0.5, model=MODEL, engine_active=np.zeros(2), subwindow_s=0.5
    )
    assert (window.engine_samples, window.engine_peak, window.subwindow_s) == (2, 0.0, 0.5)
    assert idle_verdict([window], 10.0, MODELS, scrape_interval_s=0.25).idle
