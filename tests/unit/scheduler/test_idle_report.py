"""`gpu-scheduler idle-report` on plain data: which holders are listed, what their policy says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reclaim.accounting import Holder, Measure
from reclaim.policy import PolicyResult, PolicyStatus, ReclaimPolicy
from reclaim.signals import GpuWindow
from reclaim.usage import PowerModel
from scheduler.cli import main
from scheduler.model.claims import parse_resource_claim
from scheduler.model.objects import parse_node, parse_pod
from scheduler.tools.idle_report import (
    duration_text,
    holders_of,
    render_table,
    report_holdings,
    report_rows,
)
from tests.dra_objects import allocated, pod_ref, resource_claim, result
from tests.unit.scheduler.builders import make_node, make_pod

MODEL = "TEST GPU"
MEASURE = Measure(1.0, 0.8, {MODEL: PowerModel(100.0, 500.0)}, 600.0, 5.0)
NOW = 1_000_000.0


def holder(name: str, priority_class: str = "batch", started_ago: float = 7200.0) -> Holder:
    return Holder("team", name, f"uid-{name}", priority_class, 2, NOW - started_ago, node="n1")


def windows(power_w: float) -> list[GpuWindow]:
    one = GpuWindow(
        gpu="0",
        model=MODEL,
        window_s=600.0,
        power_samples=600,
        power_mean_w=power_w,
        power_floor_w=105.0,
        history_s=7200.0,
    )
    return [one, dataclasses.replace(one, gpu="1")]


def valid(name: str, toleration: int = 0) -> PolicyResult:
    return PolicyResult(name, PolicyStatus.VALID, ReclaimPolicy(500, toleration, 3600, 10.0))


def test_only_idle_holders_are_listed_with_the_policy_that_applies() -> None:
    pods = [
        holder("idle"),
        holder("busy"),
        holder("protected", "prod"),
        holder("fresh", "tolerant"),
        holder("broken", "odd"),
    ]
    idle_w, busy_w = windows(101.0), windows(300.0)
    measured = {p.key: (busy_w if p.name == "busy" else idle_w) for p in pods}
    policies = {
        "batch": valid("batch"),
        "tolerant": valid("tolerant", toleration=86400),
        "odd": PolicyResult("odd", PolicyStatus.INVALID, errors=("bad",)),
    }
    rows = report_rows(pods, {}, measured, policies, MEASURE, NOW)
    by_pod = {row["pod"]: row for row in rows}
    assert sorted(by_pod) == ["broken", "fresh", "idle", "protected"]
    assert by_pod["idle"]["reclaimable"] is True
    assert by_pod["idle"]["policy"].startswith("batch: reclaimable by priority >= 500")
    assert by_pod["idle"]["usage_pct"] == pytest.approx(0.25)
    assert by_pod["idle"]["idle_for_at_least_s"] == 600.0
    assert by_pod["protected"]["policy"] == "none: PriorityClass 'prod' has no reclaim policy"
    assert "within toleration 86400 s" in by_pod["fresh"]["policy"]
    assert by_pod["broken"]["policy"] == "none: PriorityClass 'odd' has an invalid reclaim policy"
    assert not any(by_pod[name]["reclaimable"] for name in ("protected", "fresh", "broken"))
    table = render_table(rows).splitlines()
    assert table[0].split()[:4] == ["NAMESPACE", "POD", "NODE", "GPUS"]
    assert table[3].split()[:6] == ["team", "idle", "n1", "2", "0.2", "%"]


def test_a_holder_without_a_priority_class_reads_so() -> None:
    plain = holder("plain", priority_class="")
    rows = report_rows([plain], {}, {plain.key: windows(101.0)}, {}, MEASURE, NOW)
    assert [row["policy"] for row in rows] == ["none: no PriorityClass, so not reclaimable"]
    assert "PriorityClass ''" not in render_table(rows)


def test_unmeasured_or_young_holders_are_not_listed() -> None:
    young = holder("young", started_ago=60.0)
    young_windows = [dataclasses.replace(w, history_s=60.0) for w in windows(101.0)]
    rows = report_rows([holder("silent"), young], {}, {young.key: young_windows}, {}, MEASURE, NOW)
    assert rows == []


def test_duration_text() -> None:
    assert duration_text(3600) == ">= 1h"
    assert duration_text(5430) == ">= 1h30m30s"
    assert duration_text(15) == ">= 15s"


def test_missing_kubeconfig_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["idle-report", "--kubeconfig", "/nonexistent/kubeconfig", "--prometheus-url", "http://x"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err == "gpu-scheduler idle-report: kubeconfig /nonexistent/kubeconfig: no such file\n"


def test_no_prometheus_url_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["idle-report"]) == 2
    assert capsys.readouterr().err.startswith("gpu-scheduler idle-report: no Prometheus")


@pytest.mark.parametrize("text", ["garbage: [\n", "- just\n- a list\n", "{}\n"])
def test_malformed_kubeconfig_is_one_line(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    code = main(["idle-report", "--kubeconfig", str(kubeconfig), "--prometheus-url", "http://x"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"gpu-scheduler idle-report: kubeconfig {kubeconfig}: ")
    assert err.count("\n") == 1


def test_dra_pods_are_reported_with_their_claims_devices_and_extended_requests_once() -> None:
    pods = [
        parse_pod(make_pod("plugin", gpus=2, node="dp", phase="Running")),
        parse_pod(make_pod("claims", gpus=0, node="dra", phase="Running")),
        parse_pod(make_pod("extended", gpus=1, node="dra", phase="Running")),
    ]
    nodes = [parse_node(make_node("dp", gpus=8)), parse_node(make_node("dra", gpus=0))]
    claims = [
        parse_resource_claim(
            resource_claim(
                name,
                status=allocated(
                    *(result("gpus", d) for d in devices), reserved_for=[pod_ref(pod, f"uid-{pod}")]
                ),
            )
        )
        for name, pod, devices in (
            ("claims-gpu", "claims", ["gpu-0", "gpu-1", "gpu-2"]),
            ("extended-gpu", "extended", ["gpu-3"]),
        )
    ]
    holdings = report_holdings(pods, nodes, claims, ("gpu.nvidia.com",))
    assert holdings == {"uid-plugin": 2, "uid-claims": 3, "uid-extended": 1}
    assert [(h.name, h.gpus) for h in holders_of(pods, holdings)] == [
        ("plugin", 2),
        ("claims", 3),
        ("extended", 1),
    ]
    assert [(h.name, h.gpus) for h in holders_of(pods)] == [("plugin", 2), ("extended", 1)]
