"""Time-sliced GPUs in the idle verdict and in accounting: a sharer is judged by the GPU's usage
(idle only if every sharer is), or by its own utilization when the exporter attributes it per
process; busy time is split among the sharers."""

from __future__ import annotations

import dataclasses

import pytest

from reclaim.accounting import Measure, gpu_fraction
from reclaim.signals import GpuWindow, with_own_usage
from reclaim.usage import PowerModel, idle_verdict

MODEL = "TEST GPU"
MODELS = {MODEL: PowerModel(idle_w=100.0, max_w=500.0)}
WINDOW_S = 60.0
THRESHOLD = 5.0


def sharer(util: float, power_w: float, sharers: int = 2, **extra: object) -> GpuWindow:
    """One pod's window of GPU 0, shared by `sharers` pods: `util` on its series (the GPU's, or
    its own with per-process attribution), the GPU's power."""
    window = GpuWindow(
        "0",
        MODEL,
        WINDOW_S,
        util_samples=60,
        util_mean_pct=util,
        power_samples=60,
        power_mean_w=power_w,
        sharing_pods=sharers,
        power_floor_w=105.0,
        history_s=7200.0,
    )
    return dataclasses.replace(window, **extra)  # type: ignore[arg-type]


def judge(window: GpuWindow, per_process: bool) -> bool:
    windows = with_own_usage([window], per_process)
    return idle_verdict(windows, THRESHOLD, MODELS, scrape_interval_s=1.0, held_gpus=1).idle


def test_by_default_a_sharer_is_idle_only_if_the_gpu_is() -> None:
    # one sharer busy: the GPU draws 300 W (50 % duty); every sharer's series carries that
    assert not judge(sharer(util=0.0, power_w=300.0), per_process=False)
    assert judge(sharer(util=0.0, power_w=101.0), per_process=False)


def test_per_process_attribution_judges_each_sharer_by_its_own_utilization() -> None:
    idle_one = sharer(util=0.0, power_w=300.0)  # GPU busy because of the other sharer
    busy_one = sharer(util=60.0, power_w=300.0)
    assert judge(idle_one, per_process=True)
    assert not judge(busy_one, per_process=True)
    verdict = idle_verdict(
        with_own_usage([idle_one], True), THRESHOLD, MODELS, scrape_interval_s=1.0
    )
    assert (
        verdict.gpus[0].reason == "GPU 0 (shared by 2 pods; its own utilization): usage 0.0 % < 5 %"
    )
    assert set(verdict.estimates) == {"util"}


def test_own_utilization_needs_coverage_and_a_quiet_peak() -> None:
    assert not judge(sharer(util=0.0, power_w=300.0, util_samples=10), per_process=True)
    assert not judge(sharer(util=0.0, power_w=300.0, util_peak_pct=40.0), per_process=True)
    assert not judge(sharer(util=0.0, power_w=300.0, history_s=30.0), per_process=True)


def test_a_gpu_held_alone_keeps_the_ordinary_rules_under_per_process_attribution() -> None:
    alone = sharer(util=0.0, power_w=300.0, sharers=1)
    assert with_own_usage([alone], True) == [alone]
    assert not judge(alone, per_process=True)  # power says busy; utilization cannot overrule


def test_busy_time_is_split_among_sharers_or_taken_per_process() -> None:
    measure = Measure(1.0, 0.8, MODELS, 600.0, THRESHOLD)
    per_process = dataclasses.replace(measure, per_process_shared_usage=True)
    gpu = sharer(util=20.0, power_w=300.0, sharers=4)  # GPU at 50 %
    assert gpu_fraction(gpu, measure) == pytest.approx(0.5 / 4)
    assert gpu_fraction(with_own_usage([gpu], True)[0], per_process) == pytest.approx(0.2)
    alone = sharer(util=20.0, power_w=300.0, sharers=1)
    assert gpu_fraction(alone, measure) == pytest.approx(0.5)
