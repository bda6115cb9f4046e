"""The metric names the shipped rules and dashboard (manifests/monitoring) use, and the names a
/metrics text exports, for tests that check the one against the other."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

MONITORING = Path(__file__).resolve().parents[1] / "manifests" / "monitoring"
RULES = MONITORING / "rules.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"

NAME = re.compile(r"(?<![A-Za-z0-9_:])((?:gpu_)?scheduler_[a-z0-9_]+)")
"""A metric name of ours in PromQL: scheduler_* (kube-scheduler's) or gpu_scheduler_*. Recorded
series (gpu_scheduler:...) and label names inside {...} do not match: no label starts so."""

SUFFIXES = ("_bucket", "_count", "_sum")

NOT_YET_EXPORTED: set[str] = set()
"""Names the rules and dashboard use that no daemon exports yet (none today). Drop a name from
here as soon as the daemon exports it (the tests say when)."""


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def _targets(panels: list[dict[str, Any]]) -> Iterator[str]:
    for panel in panels:
        yield from (target["expr"] for target in panel.get("targets", ()))
        yield from _targets(panel.get("panels", []))


def dashboard_expressions() -> list[str]:
    return list(_targets(json.loads(DASHBOARD.read_text())["panels"]))


def names_in(expressions: list[str]) -> set[str]:
    return {name for expr in expressions for name in NAME.findall(expr)}


def names_used() -> set[str]:
    """Every metric name of ours the rules and the dashboard query."""
    return names_in(rule_expressions() + dashboard_expressions())


def exported(text: str) -> set[str]:
    """Family names and sample names (x_bucket, x_total, ...) of a /metrics text."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def missing(text: str) -> set[str]:
    """Names used but not in `text`: a histogram's series count as exported with its family."""
    have = exported(text)

    def found(name: str) -> bool:
        base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
        return name in have or base in have or name.removesuffix("_total") in have

    return {name for name in names_used() if not found(name)}
