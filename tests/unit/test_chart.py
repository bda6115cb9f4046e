"""The Helm chart (`charts/gpu-scheduler`) rendered by the pinned helm, offline: `helm lint`, good
values render what they say, bad values are refused by values.schema.json naming the field, and
the schema's `config` agrees with the daemon's own configuration loader (same keys; its defaults
pass; a value of the wrong type is refused by both). Helm is built into the cache the first
time a test needs it (`hack/build-binaries.sh --helm`)."""

from __future__ import annotations

import base64
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from hack.localcluster.helm import CHART, Helm, HelmError, helm_binary, render
from scheduler.config import ConfigError, config_from_data, config_to_data
from scheduler.config.loading import setting_keys
from tests.conftest import fail_or_skip

RELEASE = "gpu-scheduler"
NAMESPACE = "gpu-scheduler"
CHART_SET_KEYS = ("leaderElection.identity", "webhooks.")
"""Daemon settings the chart sets itself and `config` refuses: each replica's identity (its pod
name) and the webhooks section (from the chart's `webhooks` values)."""
EVERY_OPTION: dict[str, Any] = {
    "fullnameOverride": "gs",
    "replicas": 1,
    "image": {"repository": "registry.example.com/gpu-scheduler", "tag": "0.1.0"},
    "imagePullSecrets": [{"name": "pull"}],
    "config": {
        "leaderElection": {"enabled": False, "leaseName": "gs-lease"},
        "metricsServing": {"secure": False},
        "reclaim": {"mode": "dry-run", "prometheusUrl": "http://prometheus.monitoring:9090"},
    },
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "extraVolumes": [{"name": "certs", "secret": {"secretName": "metrics-tls"}}],
    "extraVolumeMounts": [{"name": "certs", "mountPath": "/etc/metrics-tls"}],
    "webhooks": {"enabled": True, "certificate": "helm", "validatePriorityClasses": True},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
    },
}
"""Values that switch every option on, away from every default."""


@functools.cache
def _helm() -> Path | str:
    try:
        return helm_binary()
    except HelmError as error:
        return str(error)


def helm() -> Path:
    """The pinned helm, built on first use; fails under CI (skips elsewhere) when it cannot be."""
    found = _helm()
    if isinstance(found, str):
        fail_or_skip(found)
    return found


def chart(
    tmp_path: Path, values: dict[str, Any] | None = None, *args: str, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """The chart's objects with `values` (a values file) and further helm arguments."""
    extra = list(args)
    if values is not None:
        path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        extra = ["--values", str(path), *extra]
    return render(helm(), RELEASE, namespace, extra, tmp_path / "helm")


def refusal(tmp_path: Path, values: dict[str, Any]) -> str:
    """helm's message refusing `values`; fails the test when they render."""
    with pytest.raises(HelmError) as refused:
        chart(tmp_path, values)
    return str(refused.value)


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def rendered_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    return data


def test_helm_lint_passes_with_the_defaults_and_with_every_option(tmp_path: Path) -> None:
    values = tmp_path / "every-option.yaml"
    values.write_text(yaml.safe_dump(EVERY_OPTION))
    runner = Helm(helm(), None, tmp_path / "helm")
    for args in ([], ["--values", str(values)]):
        result = runner.run("lint", "--strict", str(CHART), *args, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout


def test_the_defaults_render_the_bases_objects_and_a_disruption_budget(tmp_path: Path) -> None:
    objects = chart(tmp_path)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", "gpu-scheduler"),
        ("ClusterRole", "gpu-scheduler-metrics-reader"),
        ("ClusterRoleBinding", "gpu-scheduler"),
        ("ConfigMap", "gpu-scheduler"),
        ("Deployment", "gpu-scheduler"),
        ("PodDisruptionBudget", "gpu-scheduler"),
        ("Role", "gpu-scheduler-leader-election"),
        ("RoleBinding", "gpu-scheduler-leader-election"),
        ("ServiceAccount", "gpu-scheduler"),
        ("ValidatingAdmissionPolicy", "gpu-scheduler-lease-fence"),
        ("ValidatingAdmissionPolicy", "gpu-scheduler-reclaim-annotations"),
        ("ValidatingAdmissionPolicyBinding", "gpu-scheduler-lease-fence"),
        ("ValidatingAdmissionPolicyBinding", "gpu-scheduler-reclaim-annotations"),
    ]
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "200m", "memory": "256Mi"}
    budget = one(objects, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    for policy in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        fence = one(objects, policy, "gpu-scheduler-lease-fence")["metadata"]
        assert fence["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_the_rendered_configuration_is_what_the_daemon_loads(tmp_path: Path) -> None:
    config = config_from_data(rendered_config(chart(tmp_path)), env={"POD_NAME": "pod-a"})
    assert config.scheduler_name == "gpu-scheduler"
    assert config.metrics_serving.secure
    election = config.leader_election
    assert election.enabled and election.identity == "pod-a"
    assert (election.lease_namespace, election.lease_name) == (NAMESPACE, "gpu-scheduler")
    assert not config.webhooks.enabled


def test_every_option_renders_into_the_release(tmp_path: Path) -> None:
    """Away from the defaults, in another namespace: every name follows fullnameOverride, every
    namespaced object and ServiceAccount subject the release's namespace, the fence the Lease
    the configuration names."""
    objects = chart(tmp_path, EVERY_OPTION, namespace="ops")
    for item in objects:
        assert item["metadata"]["name"].startswith("gs"), item["metadata"]
        if "namespace" in item["metadata"]:
            assert item["metadata"]["namespace"] == "ops", item["metadata"]
        for subject in item.get("subjects", []):
            assert (subject["name"][:2], subject["namespace"]) == ("gs", "ops"), subject
    config = rendered_config(objects)
    assert config["leaderElection"] == {
        "enabled": False,
        "leaseName": "gs-lease",
        "leaseNamespace": "ops",
    }
    assert config["webhooks"] == {
        "enabled": True,
        "address": "0.0.0.0",
        "port": 9443,
        "certDir": "/etc/gpu-scheduler-webhook-tls",
    }
    config_from_data(config, env={"POD_NAME": "gs-0"})  # the daemon takes it
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "gs-lease-fence")["spec"]
    assert binding["policyName"] == "gs-lease-fence"
    assert binding["paramRef"] == {
        "name": "gs-lease",
        "namespace": "ops",
        "parameterNotFoundAction": "Deny",
    }
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "registry.example.com/gpu-scheduler:0.1.0"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"  # secure off
    assert {p["name"] for p in container["ports"]} == {"metrics", "webhooks"}
    mounts = [m["name"] for m in container["volumeMounts"]]
    assert mounts == ["config", "tmp", "webhook-tls", "certs"]
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["tolerations"] == EVERY_OPTION["tolerations"]
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Secret"} <= kinds
    assert "Issuer" not in kinds and "Certificate" not in kinds  # the chart's certificate
    assert one(objects, "ServiceMonitor")["metadata"]["labels"]["release"] == "prometheus"
    validating = one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
    assert validating["service"] == {
        "name": "gs-webhooks",
        "namespace": "ops",
        "path": "/validate-priorityclass-reclaim",
        "port": 443,
    }


def test_a_configuration_change_changes_the_pod_template(tmp_path: Path) -> None:
    """The daemon reads its configuration at start only: the template's checksum makes a changed
    `config` roll the Deployment, and an unchanged one leave it."""

    def template(values: dict[str, Any] | None) -> dict[str, Any]:
        found: dict[str, Any] = one(chart(tmp_path, values), "Deployment")["spec"]["template"]
        return found

    first, same = template(None), template({"config": {"logLevel": "info"}})
    changed = template({"config": {"logLevel": "debug"}})
    assert first == same
    assert first["metadata"]["annotations"] != changed["metadata"]["annotations"]
    assert first["spec"] == changed["spec"]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"replicas": 0}, "/replicas"),
        ({"config": {"leaderElection": {"enabled": False}}}, "/replicas"),  # 2 replicas
        ({"image": {"tag": ""}}, "/image/tag"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"webhooks": {"certificate": "self"}}, "/webhooks/certificate"),
        ({"webhooks": {"port": 70000}}, "/webhooks/port"),
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, "/podDisruptionBudget/maxUnavailable"),
        ({"monitoring": {"podMonitor": {"interval": "often"}}}, "/monitoring/podMonitor/interval"),
        ({"fullnameOverride": "Not_A_Name"}, "/fullnameOverride"),
        ({"replica": 2}, "replica"),  # a misspelt key
        ({"config": {"logLevel": "loud"}}, "/config/logLevel"),
        ({"config": {"schedulerName": "GPU"}}, "/config/schedulerName"),
        ({"config": {"metricsAddress": ":0"}}, "/config/metricsAddress"),
        ({"config": {"binding": {"timeoutSeconds": 0}}}, "/config/binding/timeoutSeconds"),
        ({"config": {"reclaim": {"mode": "on"}}}, "/config/reclaim/mode"),
        ({"config": {"reclaim": {"minCoverage": 1.5}}}, "/config/reclaim/minCoverage"),
        ({"config": {"reclaim": {"prometheusUrl": "prom:9090"}}}, "/config/reclaim/prometheusUrl"),
        ({"config": {"health": {"fatalXids": [0]}}}, "/config/health/fatalXids/0"),
        ({"config": {"dra": {"nvlinkDomainAttribute": "x"}}}, "/config/dra/nvlinkDomainAttribute"),
        (
            {"config": {"leaderElection": {"leaseDurationSeconds": 1.5}}},
            "/config/leaderElection/leaseDurationSeconds",
        ),
        ({"config": {"leaderElection": {"identity": "a"}}}, "identity"),
        ({"config": {"webhooks": {"enabled": True}}}, "webhooks"),
        ({"config": {"reclaim": {"cooldown": 30}}}, "cooldown"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(
    tmp_path: Path, values: dict[str, Any], field: str
) -> None:
    message = refusal(tmp_path, values)
    assert "values don't meet the specifications of the schema" in message
    assert field in message, message
    if "config" in values and field.startswith("/config/"):
        # The daemon refuses the same value: the schema is not stricter than the daemon.
        with pytest.raises(ConfigError):
            config_from_data(values["config"], env={"POD_NAME": "p"})


def schema_leaves(schema: dict[str, Any], path: str = "") -> set[str]:
    """Key paths of the settings a `config` schema section describes (a nested section with
    `additionalProperties: false` is followed; any other property is a setting)."""
    keys: set[str] = set()
    for key, spec in schema["properties"].items():
        full = f"{path}{key}"
        if spec.get("type") == "object" and spec.get("additionalProperties") is False:
            keys |= schema_leaves(spec, f"{full}.")
        else:
            keys.add(full)
    return keys


def daemon_keys() -> set[str]:
    """The daemon's settings that `config` may set (the chart sets the others)."""
    return {k for k in setting_keys() if not k.startswith(CHART_SET_KEYS)}


def test_the_config_schema_knows_every_daemon_setting_and_no_other() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema_leaves(schema["properties"]["config"]) == daemon_keys()


def daemon_defaults() -> dict[str, Any]:
    """Every setting at the daemon's default, less those the chart sets."""
    data: dict[str, Any] = config_to_data(config_from_data(None, env={"POD_NAME": "p"}))
    data.pop("webhooks")
    data["leaderElection"].pop("identity")
    return data


def test_the_daemons_defaults_pass_the_schema_and_load_back(tmp_path: Path) -> None:
    defaults = daemon_defaults()
    config = rendered_config(chart(tmp_path, {"config": defaults}))
    assert config == {**defaults, "leaderElection": {**defaults["leaderElection"]}}
    expected = config_from_data(defaults, env={"POD_NAME": "p"})
    assert config_from_data(config, env={"POD_NAME": "p"}) == expected


def wrong_type(value: object) -> object:
    """A value of another JSON type than `value`'s (strings become numbers, the rest strings)."""
    return 12 if isinstance(value, str) or value is None else "twelve"


def with_every_setting_wrong(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`data` with every setting replaced by a value of the wrong type, and the settings' key
    paths as JSON pointers."""
    out: dict[str, Any] = {}
    pointers: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict) and key != "powerModels":
            inner, paths = with_every_setting_wrong(value)
            out[key] = inner
            pointers += [f"/{key}{p}" for p in paths]
        else:
            out[key] = wrong_type(value)
            pointers.append(f"/{key}")
    return out, pointers


def test_a_wrong_type_for_any_setting_is_refused_by_the_schema_and_the_daemon(
    tmp_path: Path,
) -> None:
    """One render with every setting wrong: helm names each one; the daemon refuses each one
    alone."""
    wrong, pointers = with_every_setting_wrong(daemon_defaults())
    assert len(pointers) == len(daemon_keys())
    message = refusal(tmp_path, {"config": wrong})
    named = set(re.findall(r"at '(/config/[^']+)'", message))
    assert named >= {f"/config{p}" for p in pointers}, message
    for pointer in pointers:
        keys = pointer.strip("/").split("/")
        single: dict[str, Any] = {}
        node, source = single, wrong
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            source = source[key]
        node[keys[-1]] = source[keys[-1]]
        with pytest.raises(ConfigError) as refused:
            config_from_data(single, env={"POD_NAME": "p"})
        assert ".".join(keys) in str(refused.value) or keys[-1] in str(refused.value)


def test_the_chart_made_webhook_certificate_serves_the_service(tmp_path: Path) -> None:
    """webhooks.certificate "helm": the Secret's certificate is signed by the CA in every webhook
    configuration's caBundle and names the Service the configurations call."""
    values = {"webhooks": {"enabled": True, "certificate": "helm", "validatePriorityClasses": True}}
    objects = chart(tmp_path, values)
    secret = one(objects, "Secret", "gpu-scheduler-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        "gpu-scheduler-webhooks.gpu-scheduler.svc",
        "gpu-scheduler-webhooks.gpu-scheduler.svc.cluster.local",
    ]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert "annotations" not in configuration["metadata"]  # no cert-manager injection
        for webhook in configuration["webhooks"]:
            assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == data["ca.crt"]
            assert webhook["clientConfig"]["service"]["name"] == "gpu-scheduler-webhooks"


def test_the_monitors_scrape_with_the_scrapers_token_over_https(tmp_path: Path) -> None:
    on = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}
    objects = chart(tmp_path, {"monitoring": on})
    token = one(objects, "Secret", "gpu-scheduler-metrics-scraper-token")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "gpu-scheduler-metrics-scraper"
    }
    binding = one(objects, "ClusterRoleBinding", "gpu-scheduler-metrics-scraper")
    assert binding["roleRef"]["name"] == "gpu-scheduler-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-scheduler-metrics-scraper", "namespace": NAMESPACE}
    ]
    service = one(objects, "Service", "gpu-scheduler-metrics")
    monitor = one(objects, "ServiceMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [pod_endpoint] = one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"]
    [service_endpoint] = monitor["endpoints"]
    for endpoint in (pod_endpoint, service_endpoint):
        assert endpoint["port"] == "metrics" and endpoint["scheme"] == "https"
        assert endpoint["honorLabels"] is True  # the pods' `namespace` label, not the target's
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "gpu-scheduler-metrics-scraper-token", "key": "token"},
        }
    # Plain HTTP (metricsServing.secure off): no token, no scraper.
    plain = chart(tmp_path, {"monitoring": on, "config": {"metricsServing": {"secure": False}}})
    [endpoint] = one(plain, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "http" and "authorization" not in endpoint
    assert not [o["kind"] for o in plain if "scraper" in o["metadata"]["name"]]


@pytest.mark.parametrize(
    ("values", "gone"),
    [
        ({"fencingPolicy": {"enabled": False}}, "gpu-scheduler-lease-fence"),
        ({"reclaimAnnotationsPolicy": {"enabled": False}}, "gpu-scheduler-reclaim-annotations"),
        ({"podDisruptionBudget": {"enabled": False}}, "PodDisruptionBudget"),
    ],
)
def test_an_optional_object_switched_off_is_not_rendered(
    tmp_path: Path, values: dict[str, Any], gone: str
) -> None:
    every = {(o["kind"], o["metadata"]["name"]) for o in chart(tmp_path)}
    rendered = {(o["kind"], o["metadata"]["name"]) for o in chart(tmp_path, values)}
    assert every - rendered == {key for key in every if gone in key}
    assert every - rendered


def test_the_fence_is_deleted_on_uninstall_when_not_kept(tmp_path: Path) -> None:
    objects = chart(tmp_path, {"fencingPolicy": {"keepOnUninstall": False}})
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert "annotations" not in one(objects, kind, "gpu-scheduler-lease-fence")["metadata"]
