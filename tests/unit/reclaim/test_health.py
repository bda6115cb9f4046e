"""GPU health verdicts on plain data: which signals make a GPU sick, how the answer of the one
health query is read, and the PromQL it sends."""

from __future__ import annotations

import pytest

from reclaim.health import (
    DEFAULT_FATAL_XIDS,
    GpuRef,
    GpuSignals,
    Sickness,
    by_node,
    gpu_signals,
    health_queries,
    health_query,
    judge,
)
from reclaim.prometheus import Sample
from reclaim.promql import SIGNAL_LABEL, LabelNames
from scheduler.config import HealthConfig

GPU3 = GpuRef("node-a", 3, "GPU-3")
GPU5 = GpuRef("node-a", 5, "GPU-5")


def sample(signal: str, value: float, node: str = "node-a", gpu: str = "3") -> Sample:
    labels = {"Hostname": node, "gpu": gpu, "UUID": f"GPU-{gpu}", SIGNAL_LABEL: signal}
    return Sample(labels, value, 1000.0)


def test_a_fatal_xid_makes_a_gpu_sick_and_an_application_xid_does_not() -> None:
    verdicts = judge([GpuSignals(GPU3, xid=79), GpuSignals(GPU5, xid=13)], DEFAULT_FATAL_XIDS)
    assert verdicts == {GPU3: Sickness(xid=79)}
    assert verdicts[GPU3].describe() == "XID 79"
    assert verdicts[GPU3].kinds() == ("xid_79",)


def test_the_fatal_list_is_the_setting() -> None:
    assert judge([GpuSignals(GPU3, xid=13)], [13]) == {GPU3: Sickness(xid=13)}
    assert judge([GpuSignals(GPU3, xid=79)], []) == {}


def test_uncorrectable_ecc_and_remap_failure_are_sick_without_an_xid() -> None:
    verdicts = judge(
        [GpuSignals(GPU3, dbe_errors=2), GpuSignals(GPU5, remap_failed=True)], DEFAULT_FATAL_XIDS
    )
    assert verdicts[GPU3].describe() == "2 uncorrectable ECC errors"
    assert verdicts[GPU3].kinds() == ("ecc_dbe",)
    assert verdicts[GPU5].describe() == "row remapping failed"


def test_healthy_signals_give_no_verdict() -> None:
    assert judge([GpuSignals(GPU3), GpuSignals(GPU5, dbe_errors=0)], DEFAULT_FATAL_XIDS) == {}


def test_signals_of_one_gpu_given_twice_merge() -> None:
    verdicts = judge(
        [GpuSignals(GPU3, xid=48), GpuSignals(GPU3, dbe_errors=1, remap_failed=True)],
        DEFAULT_FATAL_XIDS,
    )
    sickness = verdicts[GPU3]
    assert sickness == Sickness(xid=48, dbe_errors=1, remap_failed=True)
    assert sickness.describe() == "XID 48, 1 uncorrectable ECC error, row remapping failed"
    assert sickness.kinds() == ("xid_48", "ecc_dbe", "row_remap_failure")


def test_the_answer_is_read_per_gpu() -> None:
    samples = [
        sample("xid", 79),
        sample("ecc_dbe", 2, gpu="5"),
        sample("row_remap_failure", 1, gpu="5"),
        sample("xid", 48, node=""),  # no node: skipped
        sample("xid", 48, gpu="x"),  # not an index: skipped
        sample("other", 1),  # unknown marker: skipped
        sample("xid", float("nan"), gpu="7"),  # not finite: skipped
    ]
    signals = gpu_signals(samples)
    assert signals == [
        GpuSignals(GPU3, xid=79),
        GpuSignals(GPU5, dbe_errors=2, remap_failed=True),
    ]
    assert set(judge(signals, DEFAULT_FATAL_XIDS)) == {GPU3, GPU5}


def test_the_query_filters_the_fatal_codes_over_the_lookback_window() -> None:
    queries = health_queries([79, 48, 79], 600, 30)
    xid = queries["xid"]
    assert "DCGM_FI_DEV_XID_ERRORS == 48 or DCGM_FI_DEV_XID_ERRORS == 79" in xid
    assert "last_over_time(" in xid and "[600s:30s]" in xid
    assert xid.startswith("max by (Hostname, gpu, UUID)")
    assert queries["ecc_dbe"].endswith("(max_over_time(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[600s])) > 0")
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE[600s]" in queries["row_remap_failure"]
    assert "xid" not in health_queries([], 600, 30)
    batched = health_query([79], 600, 30, LabelNames(node="node"))
    assert batched.count(f'"{SIGNAL_LABEL}"') == 3 and "by (node, gpu, UUID)" in batched


def test_verdicts_group_by_node_sorted() -> None:
    other = GpuRef("node-b", 0)
    grouped = by_node({other: Sickness(xid=79), GPU5: Sickness(xid=79), GPU3: Sickness(xid=48)})
    assert list(grouped) == ["node-a", "node-b"]
    assert list(grouped["node-a"]) == [GPU3, GPU5]


def test_the_setting_defaults_to_the_catalog_list() -> None:
    assert HealthConfig().fatal_xids == DEFAULT_FATAL_XIDS
    assert (
        79 in DEFAULT_FATAL_XIDS and 13 not in DEFAULT_FATAL_XIDS and 94 not in DEFAULT_FATAL_XIDS
    )


@pytest.mark.parametrize("bad", [["79"], [0], [True], "79", [70000]])
def test_the_setting_refuses_anything_but_xid_codes(bad: object) -> None:
    from scheduler.config import ConfigError, config_from_data

    with pytest.raises(ConfigError, match=r"health\.fatalXids"):
        config_from_data({"health": {"fatalXids": bad}})


def test_the_setting_sorts_and_dedups() -> None:
    from scheduler.config import config_from_data

    settings = config_from_data({"health": {"fatalXids": [79, 48, 79], "lookbackSeconds": 60}})
    assert settings.health.fatal_xids == (48, 79)
    assert settings.health.lookback_seconds == 60.0
    assert settings.health.write_device_taint_rules is False
