"""The Helm chart and the kustomize base do not drift: `kubectl kustomize manifests/` (the pinned
kubectl) and `helm template gpu-scheduler charts/gpu-scheduler -n gpu-scheduler` (the pinned helm,
default values) make the same objects, object for object, and so do the base with the webhooks
Component and the chart with `webhooks.enabled`.

Which way: manifests/ is the source. The chart carries copies of the base files it takes over
unchanged (`hack/localcluster/chart_files.py`: RBAC, the admission policies, the webhook objects,
the Prometheus rules) and re-homes their objects into the release; the Deployment and the
ConfigMap are templates, since values shape them. What the chart adds to every object (its
labels, the selector's instance label, the pod template's config checksum, the fence's keep
annotation) is taken off before comparing; everything else must be equal.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from hack.localcluster.chart_files import MANIFESTS, stale
from tests.unit.test_chart import chart, one
from tests.unit.test_incluster_overlay import render as kustomize

BASE_ONLY = {("Namespace", "gpu-scheduler")}
"""In the base only: the chart installs into a namespace helm creates (--create-namespace)."""
CHART_ONLY = {("PodDisruptionBudget", "gpu-scheduler")}
"""In the chart only."""
CHART_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
CHART_ANNOTATIONS = ("helm.sh/resource-policy", "checksum/config")


def _strip(found: dict[str, Any], base: dict[str, Any], field: str, keys: tuple[str, ...]) -> None:
    """Drop from `found[field]` the `keys` that `base[field]` lacks (and the field if empty)."""
    for key in keys:
        if key not in base.get(field, {}):
            found.get(field, {}).pop(key, None)
    if field in found and not found[field]:
        del found[field]


def without_chart_marks(item: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The chart's `item` less what the chart adds to its counterpart `base`: labels and
    annotations, the selector's labels, the Deployment's template checksum."""
    item = copy.deepcopy(item)
    for found, shipped in [(item["metadata"], base["metadata"])] + (
        [(item["spec"]["template"]["metadata"], base["spec"]["template"]["metadata"])]
        if item["kind"] == "Deployment"
        else []
    ):
        _strip(found, shipped, "labels", CHART_LABELS)
        _strip(found, shipped, "annotations", CHART_ANNOTATIONS)
    if item["kind"] == "Deployment":
        _strip(item["spec"]["selector"], base["spec"]["selector"], "matchLabels", CHART_LABELS)
    if item["kind"] == "Service":
        _strip(item["spec"], base["spec"], "selector", CHART_LABELS)
    return item


def normalized(item: dict[str, Any]) -> dict[str, Any]:
    """`item` with what has no order in the API in one order: a ConfigMap's config.yaml parsed
    (the chart writes the keys sorted), a pod's volumes and its containers' ports and mounts
    sorted by name (kustomize puts a patch's items first, the chart after the base's)."""
    item = copy.deepcopy(item)
    if item["kind"] == "ConfigMap":
        item["data"] = {k: yaml.safe_load(v) for k, v in item["data"].items()}
    if item["kind"] == "Deployment":
        pod = item["spec"]["template"]["spec"]
        named = [(pod, "volumes")] + [
            (c, field) for c in pod["containers"] for field in ("ports", "volumeMounts")
        ]
        for holder, field in named:
            holder[field] = sorted(holder.get(field, []), key=lambda entry: entry["name"])
    return item


def without_blank_lines(value: Any) -> Any:
    """`value` with blank lines taken out of its strings: `kubectl kustomize` (kyaml) writes a
    folded scalar whose lines are more indented than its first (the policies' CEL) with a blank
    line added after the first; CEL does not see it, and the chart reads the file as YAML says."""
    if isinstance(value, str):
        return re.sub(r"\n[ \t]*\n", "\n", value)
    if isinstance(value, list):
        return [without_blank_lines(v) for v in value]
    if isinstance(value, dict):
        return {k: without_blank_lines(v) for k, v in value.items()}
    return value


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): without_blank_lines(normalized(o)) for o in objects}


def assert_same_objects(base: list[dict[str, Any]], chart_objects: list[dict[str, Any]]) -> None:
    """Every object of both renders equal, less the chart's marks, but for `BASE_ONLY` and
    `CHART_ONLY`; each difference is named."""
    expected, rendered = by_key(base), by_key(chart_objects)
    assert set(expected) - set(rendered) == BASE_ONLY
    assert set(rendered) - set(expected) == CHART_ONLY
    for key in sorted(set(expected) & set(rendered)):
        found = without_chart_marks(rendered[key], expected[key])
        assert found == expected[key], f"{key[0]} {key[1]} differs"


def test_the_charts_copies_of_the_base_files_are_current() -> None:
    assert stale() == [], (
        f"{stale()} differ from manifests/: run python -m hack.localcluster.chart_files"
    )


def test_the_defaults_render_what_the_kustomize_base_applies(tmp_path: Path) -> None:
    base = kustomize(MANIFESTS)
    rendered = chart(tmp_path)
    assert_same_objects(base, rendered)
    # What matters most, named once more: the rules, the pod spec, the CEL, the configuration.
    for kind, name in (
        ("ClusterRole", "gpu-scheduler"),
        ("Role", "gpu-scheduler-leader-election"),
        ("ClusterRole", "gpu-scheduler-metrics-reader"),
    ):
        assert one(rendered, kind, name)["rules"] == one(base, kind, name)["rules"]
    pod_specs = [one(o, "Deployment")["spec"]["template"]["spec"] for o in (rendered, base)]
    assert pod_specs[0] == pod_specs[1]
    for file in ("fencing-policy.yaml", "reclaim-annotations-policy.yaml"):
        for shipped in yaml.safe_load_all((MANIFESTS / file).read_text()):
            name = shipped["metadata"]["name"]
            assert one(rendered, shipped["kind"], name)["spec"] == shipped["spec"]
    configs = [yaml.safe_load(one(o, "ConfigMap")["data"]["config.yaml"]) for o in (rendered, base)]
    assert configs[0] == configs[1]


def test_the_webhooks_render_what_the_kustomize_component_adds(tmp_path: Path) -> None:
    """The base with manifests/webhooks (cert-manager's certificate) against the chart with
    `webhooks.enabled`: Service, webhook configuration, Issuer, Certificate, the Deployment's
    port and mount, the configuration's webhooks section."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(MANIFESTS, overlay)],
        "components": [os.path.relpath(MANIFESTS / "webhooks", overlay)],
    }
    (overlay / "kustomization.yaml").write_text(json.dumps(kustomization))
    base = kustomize(overlay)
    rendered = chart(tmp_path, {"webhooks": {"enabled": True}})
    assert_same_objects(base, rendered)
    assert {"Service", "MutatingWebhookConfiguration", "Issuer", "Certificate"} <= {
        o["kind"] for o in rendered
    }


def test_the_prometheus_rule_holds_the_shipped_rules(tmp_path: Path) -> None:
    rendered = chart(tmp_path, {"monitoring": {"prometheusRule": {"enabled": True}}})
    shipped = yaml.safe_load((MANIFESTS / "monitoring" / "rules.yaml").read_text())
    assert one(rendered, "PrometheusRule")["spec"]["groups"] == shipped["groups"]
