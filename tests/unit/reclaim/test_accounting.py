"""GPU time accounting on plain data: allocated, busy, unmeasured and idle GPU time."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.accounting import (
    Holder,
    Ledger,
    Measure,
    account_period,
    gpu_fraction,
    held_seconds,
    pod_period,
)
from reclaim.signals import GpuWindow
from reclaim.usage import PowerModel

MODEL = "TEST GPU"
POWER = PowerModel(idle_w=100.0, max_w=500.0)
MEASURE = Measure(
    scrape_interval_s=1.0,
    min_coverage=0.8,
    power_models={MODEL: POWER},
    idle_window_s=600.0,
    idle_threshold_pct=5.0,
)
PERIOD_S = 60.0
NOW = 1_000_000.0


def holder(
    name: str = "p",
    gpus: int = 1,
    namespace: str = "team",
    priority_class: str = "batch",
    started_at: float | None = NOW - 7200.0,
) -> Holder:
    return Holder(namespace, name, f"uid-{name}", priority_class, gpus, started_at)


def window(
    util: float | None = None,
    power_w: float | None = None,
    samples: int = 60,
    gpu: str = "0",
    window_s: float = PERIOD_S,
    mig: str | None = None,
    **extra: float | None,
) -> GpuWindow:
    """A window over `window_s` with `samples` util and power samples at the given means."""
    return GpuWindow(
        gpu=gpu,
        model=MODEL,
        window_s=window_s,
        util_samples=samples if util is not None else 0,
        util_mean_pct=util,
        power_samples=samples if power_w is not None else 0,
        power_mean_w=power_w,
        mig_instance=mig,
        power_floor_w=105.0,  # calibrates the idle draw to exactly 100 W
        history_s=7200.0,
        **extra,  # type: ignore[arg-type]
    )


def duty_w(fraction: float) -> float:
    return 100.0 + fraction * 400.0


def test_fraction_is_the_highest_window_mean_of_the_signals() -> None:
    assert gpu_fraction(window(util=20.0, power_w=duty_w(0.5)), MEASURE) == pytest.approx(0.5)
    assert gpu_fraction(window(util=70.0, power_w=duty_w(0.5)), MEASURE) == pytest.approx(0.7)


def test_fraction_ignores_sub_window_peaks() -> None:
    """A peak measures part of the window: it never raises the period's busy fraction."""
    w = window(util=10.0, power_w=duty_w(0.1), util_peak_pct=90.0, power_peak_w=duty_w(0.9))
    assert gpu_fraction(w, MEASURE) == pytest.approx(0.1)


def test_fraction_needs_enough_samples_and_a_whole_gpu() -> None:
    assert gpu_fraction(window(util=50.0, samples=10), MEASURE) is None  # 10 < 0.8 x 60
    assert gpu_fraction(window(util=50.0, samples=48), MEASURE) == pytest.approx(0.5)
    mig = window(util=50.0, mig="1", engine_samples=60, engine_mean=0.5)
    assert gpu_fraction(mig, MEASURE) is None
    assert gpu_fraction(window(), MEASURE) is None


def test_busy_seconds_are_allocated_seconds_times_the_fraction() -> None:
    part = pod_period(
        holder(gpus=2),
        [window(power_w=duty_w(0.25)), window(power_w=duty_w(0.75), gpu="1")],
        PERIOD_S,
        NOW,
        MEASURE,
    )
    assert part.allocated_s == pytest.approx(120.0)
    assert part.busy_s == pytest.approx(60.0)
    assert part.unmeasured_s == 0.0


def test_a_gpu_without_samples_is_unmeasured_not_idle_nor_busy() -> None:
    part = pod_period(holder(gpus=2), [window(power_w=duty_w(1.0))], PERIOD_S, NOW, MEASURE)
    assert (part.allocated_s, part.busy_s, part.unmeasured_s) == pytest.approx((120.0, 60.0, 60.0))


def test_more_windows_than_gpus_count_the_pods_gpus_only() -> None:
    windows = [window(util=u, gpu=str(i)) for i, u in enumerate((10.0, 80.0, 40.0))]
    part = pod_period(holder(gpus=2), windows, PERIOD_S, NOW, MEASURE)
    assert part.busy_s == pytest.approx(PERIOD_S * (0.8 + 0.4))
    assert part.unmeasured_s == 0.0


def test_a_pod_started_inside_the_period_is_charged_from_its_start() -> None:
    young = holder(gpus=4, started_at=NOW - 15.0)
    assert held_seconds(young, PERIOD_S, NOW) == 15.0
    assert held_seconds(holder(started_at=NOW + 5.0), PERIOD_S, NOW) == 0.0
    assert held_seconds(holder(started_at=None), PERIOD_S, NOW) == PERIOD_S
    part = pod_period(young, [], PERIOD_S, NOW, MEASURE)
    assert part.allocated_s == part.unmeasured_s == 60.0


def test_failed_query_adds_allocated_as_unmeasured_and_no_busy_nor_idle() -> None:
    increments = account_period([holder(gpus=8)], None, None, PERIOD_S, NOW, MEASURE)
    key = ("team", "batch")
    assert increments.allocated_s[key] == 480.0
    assert increments.unmeasured_s[key] == 480.0
    assert increments.busy_s[key] == 0.0
    assert increments.idle_gpus == {"team": 0}


def idle_window(usage_w: float, gpu: str = "0", history_s: float = 7200.0) -> GpuWindow:
    held = window(power_w=usage_w, samples=600, gpu=gpu, window_s=MEASURE.idle_window_s)
    return dataclasses.replace(held, history_s=history_s)


def test_idle_gauge_counts_the_gpus_of_pods_idle_over_the_idle_window() -> None:
    idle, busy = holder("idle", 2), holder("busy", 4)
    young = holder("young", 1, started_at=NOW - 60)
    increments = account_period(
        [idle, busy, young, holder("other", 3, namespace="elsewhere")],
        {},
        {
            idle.key: [idle_window(duty_w(0.01)), idle_window(duty_w(0.0), "1")],
            busy.key: [idle_window(duty_w(0.5))],
            young.key: [idle_window(duty_w(0.0), history_s=60.0)],  # younger than the window
        },
        PERIOD_S,
        NOW,
        MEASURE,
    )
    assert increments.idle_gpus == {"team": 2, "elsewhere": 0}
    assert set(increments.idle_pods) == {idle.key}
    assert increments.idle_pods[idle.key].usage_pct == pytest.approx(1.0)


def test_idle_needs_every_gpu_of_the_pod_measured() -> None:
    pod = holder("half", 2)
    increments = account_period(
        [pod], {}, {pod.key: [idle_window(duty_w(0.0))]}, PERIOD_S, NOW, MEASURE
    )
    assert increments.idle_gpus == {"team": 0}


def test_ledger_adds_counters_and_replaces_the_gauge() -> None:
    ledger = Ledger()
    pods = [holder("a"), holder("b", priority_class="")]
    windows = {p.key: [window(util=50.0)] for p in pods}
    ledger.add(account_period(pods, windows, None, PERIOD_S, NOW, MEASURE), failed=True)
    ledger.add(account_period(pods[:1], windows, {}, PERIOD_S, NOW, MEASURE))
    assert ledger.allocated_s == {("team", "batch"): 120.0, ("team", ""): 60.0}
    assert ledger.busy_s == pytest.approx({("team", "batch"): 60.0, ("team", ""): 30.0})
    assert ledger.unmeasured_s == {("team", "batch"): 0.0, ("team", ""): 0.0}
    assert ledger.idle_gpus == {"team": 0}
    assert (ledger.periods, ledger.failed_periods) == (2, 1)
    assert ledger.measured_share("team") == pytest.approx(0.5)
    assert ledger.measured_share("nobody") is None


def test_share_of_pods_at_zero_half_and_full_duty_is_one_half() -> None:
    pods = [holder(f"p{duty}", gpus=2) for duty in (0, 50, 100)]
    windows = {
        p.key: [window(power_w=duty_w(d / 100)), window(power_w=duty_w(d / 100), gpu="1")]
        for p, d in zip(pods, (0, 50, 100), strict=True)
    }
    ledger = Ledger()
    for _ in range(3):
        ledger.add(account_period(pods, windows, {}, PERIOD_S, NOW, MEASURE))
    assert ledger.measured_share("team") == pytest.approx(0.5)


def test_period_must_be_positive() -> None:
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="period must be positive"):
            account_period([], {}, {}, bad, NOW, MEASURE)


@given(
    gpus=st.integers(1, 8),
    utils=st.lists(st.one_of(st.none(), st.just(math.nan), st.floats(-50, 500)), max_size=10),
    samples=st.integers(0, 120),
    started=st.one_of(st.none(), st.floats(NOW - 500, NOW + 500)),
)
def test_busy_plus_unmeasured_never_exceeds_allocated(
    gpus: int, utils: list[float | None], samples: int, started: float | None
) -> None:
    windows = [window(util=u, samples=samples, gpu=str(i)) for i, u in enumerate(utils)]
    part = pod_period(holder(gpus=gpus, started_at=started), windows, PERIOD_S, NOW, MEASURE)
    for value in (part.allocated_s, part.busy_s, part.unmeasured_s):
        assert math.isfinite(value) and value >= 0.0
    assert part.busy_s + part.unmeasured_s <= part.allocated_s + 1e-9
