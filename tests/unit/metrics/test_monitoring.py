"""The shipped monitoring files (manifests/monitoring): the rules pass promtool, the scrape
config finds the Deployment's pods, and every metric the rules and the dashboard use is one a
daemon's registry exports (the integration test checks the same on a live scrape)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from prometheus_client import generate_latest

from hack.localcluster.cluster import free_port
from scheduler.daemon import Daemon
from tests.monitoring import (
    DASHBOARD,
    MONITORING,
    NOT_YET_EXPORTED,
    RULES,
    dashboard_expressions,
    exported,
    missing,
    names_in,
    names_used,
    recorded_names,
    rule_expressions,
)
from tests.scheduling import settings_for

MANIFESTS = MONITORING.parent


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool not found (Debian's prometheus package ships it: hack/setup.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


RULE_TESTS = Path(__file__).resolve().parents[2] / "data" / "monitoring" / "rules_test.yaml"


def test_the_alerts_fire_when_they_should_and_only_then() -> None:
    """promtool's rule unit tests: each alert on series that should fire it and on series just
    short of it (a follower's copy of the same series, a threshold not passed, too short)."""
    result = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_promtool_test() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    fires = {case["alertname"] for case in cases if case["exp_alerts"]}
    stays_quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert alerts == fires == stays_quiet


def test_promtool_catches_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(RULES.read_text().replace("> 4", "> > 4", 1))
    result = subprocess.run(
        [promtool(), "check", "rules", str(broken)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0


@pytest.fixture
async def daemon() -> AsyncIterator[Daemon]:
    """A daemon built but not run (nobody answers at its API address)."""
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{free_port()}"))
    try:
        yield Daemon(settings_for("monitoring"), api)
    finally:
        await api.close()


async def test_every_name_the_rules_and_dashboard_use_is_registered(daemon: Daemon) -> None:
    text = generate_latest(daemon.metrics_registry).decode()
    assert missing(text) == NOT_YET_EXPORTED
    for name in NOT_YET_EXPORTED:
        assert name not in exported(text), f"{name} is exported now: drop it from NOT_YET_EXPORTED"


def test_the_name_check_sees_what_the_files_use() -> None:
    used = names_used()
    assert {
        "scheduler_schedule_attempts_total",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_pending_pods",
        "gpu_scheduler_node_gpus",
        "gpu_scheduler_leader",
        "gpu_scheduler_idle_gpus",
        "gpu_scheduler_oldest_pending_pod_age_seconds",
        "gpu_scheduler_reclaim_evictions_total",
        "gpu_scheduler_prometheus_query_duration_seconds_bucket",
    } <= used
    assert names_in(['sum(gpu_scheduler:gpus:sum{state="free"}) + up']) == set()
    assert missing("") == used  # an empty scrape exports nothing


def test_alerts_and_panels_use_only_names_that_exist_or_are_recorded() -> None:
    recorded = recorded_names()
    for expr in rule_expressions() + dashboard_expressions():
        for word in expr.replace("(", " ").replace(")", " ").split():
            if word.startswith("gpu_scheduler:"):
                assert word.split("{")[0].split("[")[0] in recorded, expr


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_the_scrape_config_keeps_the_deployments_pods_and_loads_the_rules() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert [(MONITORING / f).resolve() for f in config["rule_files"]] == [RULES.resolve()]
    (job,) = config["scrape_configs"]
    # The GPU-time metrics' `namespace` (the pods') must not be renamed exported_namespace by
    # the target's `namespace` label: the rules and the docs' PromQL group by `namespace`.
    assert job["honor_labels"] is True
    keep = {
        tuple(r["source_labels"]): r["regex"]
        for r in job["relabel_configs"]
        if r.get("action") == "keep"
    }
    deployment = yaml.safe_load((MANIFESTS / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    label = pod["metadata"]["labels"]["app.kubernetes.io/name"]
    (container,) = pod["spec"]["containers"]
    assert keep == {
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): label,
        ("__meta_kubernetes_pod_container_port_name",): container["ports"][0]["name"],
    }
    namespace = yaml.safe_load((MANIFESTS / "namespace.yaml").read_text())["metadata"]["name"]
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [namespace]


def test_the_monitoring_files_are_not_deployed_by_default() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if r.startswith("monitoring")]
