"""Admission decisions on plain dicts, the self-signed certificate, and the kopf glue that needs
no API server (credentials, signal handlers)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from reclaim.policy import (
    MINIMUM_PREEMPTABLE_PRIORITY,
    POLICY_ANNOTATIONS,
    RESOURCE_IDLE_SECONDS,
    RESOURCE_IDLE_USAGE_THRESHOLD,
    TOLERATION_SECONDS,
)
from scheduler.admission import certs, server
from scheduler.admission.rules import (
    ENABLED_LABEL,
    MAX_DENIAL_BYTES,
    NAME_ECHO,
    priority_class_denial,
    requests_gpus,
    scheduler_name_to_set,
)
from scheduler.admission.server import (
    MUTATE_POD,
    VALIDATE_PRIORITY_CLASS,
    connection_info,
    loop_signal_handlers,
    operator_settings,
    restore_signal_handlers,
)
from scheduler.config import config_from_data

VALID = dict(zip(POLICY_ANNOTATIONS, ("1000", "60", "300", "5"), strict=True))


def priority_class(annotations: Any, name: str = "batch-low") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}, "value": 10}


# --- PriorityClass reclaim annotations --------------------------------------------------------


def test_classes_without_reclaim_annotations_or_with_all_four_valid_are_admitted() -> None:
    assert priority_class_denial(priority_class({})) is None
    assert priority_class_denial(priority_class(None)) is None
    assert priority_class_denial(priority_class({"other.io/x": "1"})) is None
    assert priority_class_denial(priority_class(VALID)) is None


def test_a_malformed_value_is_refused_naming_the_annotation_value_and_allowed_values() -> None:
    reason = priority_class_denial(priority_class({**VALID, TOLERATION_SECONDS: "-5"}))
    assert reason == (
        f"PriorityClass batch-low: annotation {TOLERATION_SECONDS}='-5': "
        "must be an integer from 0 to 31536000 (365 days)"
    )


def test_every_bad_annotation_is_named_once() -> None:
    reason = priority_class_denial(
        priority_class(
            {**VALID, MINIMUM_PREEMPTABLE_PRIORITY: "high", RESOURCE_IDLE_USAGE_THRESHOLD: "0"}
        )
    )
    assert reason is not None
    assert reason.count("annotation ") == 2
    assert f"{MINIMUM_PREEMPTABLE_PRIORITY}='high': must be an integer (int32" in reason
    assert f"{RESOURCE_IDLE_USAGE_THRESHOLD}='0': must be a number greater than 0" in reason


def test_a_partial_policy_is_refused_naming_each_missing_annotation() -> None:
    reason = priority_class_denial(priority_class({TOLERATION_SECONDS: "60"}))
    assert reason is not None
    for key in POLICY_ANNOTATIONS:
        assert (f"{key} is missing" in reason) == (key != TOLERATION_SECONDS)
    assert "all four reclaim-idle-resource annotations are required" in reason


def test_a_huge_value_is_cut_in_the_message() -> None:
    reason = priority_class_denial(priority_class({**VALID, TOLERATION_SECONDS: "9" * 100_000}))
    assert reason is not None
    assert len(reason) < 400
    assert "..." in reason


def test_all_four_bad_annotations_are_named_with_the_class_named_once() -> None:
    bad = dict(zip(POLICY_ANNOTATIONS, ("high", "-5", "0", "nan"), strict=True))
    reason = priority_class_denial(priority_class(bad))
    assert reason is not None
    assert reason.startswith("PriorityClass batch-low: annotation ")
    assert reason.count("PriorityClass") == 1
    for key, value in bad.items():
        assert reason.count(f"{key}='{value}': must be ") == 1


def test_missing_and_bad_annotations_are_named_together() -> None:
    reason = priority_class_denial(
        priority_class({MINIMUM_PREEMPTABLE_PRIORITY: "1000", TOLERATION_SECONDS: "soon"})
    )
    assert reason is not None
    assert reason.count("PriorityClass") == 1
    assert reason.count("all four reclaim-idle-resource annotations are required") == 1
    for key in (RESOURCE_IDLE_SECONDS, RESOURCE_IDLE_USAGE_THRESHOLD):
        assert f"annotation {key} is missing" in reason
    assert f"{TOLERATION_SECONDS}='soon': must be an integer" in reason
    assert MINIMUM_PREEMPTABLE_PRIORITY not in reason


@pytest.mark.parametrize(
    "value",
    ["9" * 100_000, "\x00" * 5000, "\u20ac" * 5000, "\U0001f600" * 5000, "'\"\\" * 3000],
    ids=["digits", "nul", "euro", "emoji", "quotes"],
)
@pytest.mark.parametrize("name", ["batch-low", "x" * 253, "\u20ac" * 253])
def test_the_refusal_stays_under_1_kib_whatever_the_input(value: str, name: str) -> None:
    reason = priority_class_denial(
        priority_class(dict.fromkeys(POLICY_ANNOTATIONS, value), name=name)
    )
    assert reason is not None
    assert len(reason.encode()) <= MAX_DENIAL_BYTES < 1024
    if name.isascii():  # a valid (DNS) name leaves room for every annotation
        for key in POLICY_ANNOTATIONS:
            assert f"annotation {key}=" in reason
        assert f"({len(value)} characters)" in reason


def test_a_long_name_is_cut_in_the_refusal() -> None:
    reason = priority_class_denial(priority_class({TOLERATION_SECONDS: "60"}, name="n" * 253))
    assert reason is not None
    assert reason.startswith("PriorityClass " + "n" * NAME_ECHO + "... (253 characters): ")


def test_odd_objects_never_raise() -> None:
    assert priority_class_denial({}) is None
    assert priority_class_denial({"metadata": "x"}) is None
    reason = priority_class_denial({"metadata": {"annotations": {TOLERATION_SECONDS: 5}}})
    assert reason is not None and "is missing" in reason  # non-string values read as str()


# --- pods given our scheduler -----------------------------------------------------------------


def pod(
    scheduler: str | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    init_limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "resources": {"limits": limits or {}, "requests": requests or {}}}
        ]
    }
    if init_limits is not None:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": init_limits}}]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize("scheduler", [None, "", "default-scheduler"])
def test_gpu_pods_naming_no_scheduler_or_the_default_get_ours(scheduler: str | None) -> None:
    assert scheduler_name_to_set(pod(scheduler, {"nvidia.com/gpu": "1"}), "gpu-x") == "gpu-x"


@pytest.mark.parametrize(
    "gpu_pod",
    [
        pod(limits={"nvidia.com/gpu": "2"}),
        pod(requests={"nvidia.com/gpu": "1"}),
        pod(limits={"nvidia.com/mig-1g.18gb": "1"}),
        pod(limits={"cpu": "1"}, init_limits={"nvidia.com/gpu": "1"}),
        pod(init_limits={"nvidia.com/mig-3g.71gb": "1"}),
    ],
)
def test_any_container_asking_for_gpus_or_mig_counts(gpu_pod: dict[str, Any]) -> None:
    assert requests_gpus(gpu_pod["spec"])
    assert scheduler_name_to_set(gpu_pod, "gpu-scheduler") == "gpu-scheduler"


@pytest.mark.parametrize(
    "other_pod",
    [
        pod(limits={"cpu": "1", "memory": "1Gi"}),
        pod(limits={"nvidia.com/gpu": "0"}),
        pod(limits={"example.com/gpu": "1", "nvidia.com/gpus": "1"}),
        pod("someone-else", {"nvidia.com/gpu": "1"}),
        pod("gpu-scheduler", {"nvidia.com/gpu": "1"}),  # already ours: nothing to patch
    ],
)
def test_other_pods_are_left_alone(other_pod: dict[str, Any]) -> None:
    assert scheduler_name_to_set(other_pod, "gpu-scheduler") is None


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"containers": None},
        {"containers": "x"},
        {"containers": [None, 3, {"resources": None}, {"resources": {"limits": "x"}}]},
        {"initContainers": [{"resources": {"requests": None}}]},
    ],
)
def test_malformed_pods_never_raise(spec: dict[str, Any]) -> None:
    assert scheduler_name_to_set({"spec": spec}, "gpu-scheduler") is None
    assert scheduler_name_to_set({"spec": "x"}, "gpu-scheduler") is None


# --- certificates ------------------------------------------------------------------------------


def test_the_self_signed_certificate_is_its_own_ca_for_the_names_and_addresses(
    tmp_path: Path,
) -> None:
    files = certs.self_signed(["0.0.0.0", "localhost", "127.0.0.1", "localhost"], tmp_path)
    assert files.ca is None
    certificate = x509.load_pem_x509_certificate(files.cert.read_bytes())
    assert certificate.issuer == certificate.subject
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600


def test_no_usable_name_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one host name"):
        certs.self_signed(["0.0.0.0", ""], tmp_path)


def test_a_mounted_secret_needs_cert_and_key_and_may_carry_a_ca(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"webhooks.certDir: .*tls.crt is missing"):
        certs.mounted(tmp_path)
    (tmp_path / "tls.crt").write_text("c")
    with pytest.raises(FileNotFoundError, match=r"tls\.key is missing"):
        certs.mounted(tmp_path)
    (tmp_path / "tls.key").write_text("k")
    assert certs.mounted(tmp_path).ca is None
    (tmp_path / "ca.crt").write_text("a")
    assert certs.mounted(tmp_path).ca == tmp_path / "ca.crt"


# --- kopf glue ---------------------------------------------------------------------------------


async def test_kopf_gets_the_daemons_bearer_token_and_tls_files() -> None:
    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.api_key = {"BearerToken": "abc"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.ssl_ca_cert = "/ca.crt"
    info = await connection_info(configuration)
    assert (info.server, info.scheme, info.token, info.ca_path) == (
        "https://10.0.0.1:6443",
        "Bearer",
        "abc",
        "/ca.crt",
    )
    assert info.insecure is False
    configuration = client.Configuration(host="https://h")
    configuration.cert_file, configuration.key_file = "/c.pem", "/k.pem"
    info = await connection_info(configuration)
    assert (info.token, info.certificate_path, info.private_key_path) == (None, "/c.pem", "/k.pem")


def test_kopf_runs_standalone_without_scanning_events_management_or_sigkill() -> None:
    settings = operator_settings(server=object())  # type: ignore[arg-type]
    assert settings.peering.standalone is True
    assert settings.scanning.disabled is True
    assert settings.posting.enabled is False
    assert settings.admission.managed is None
    assert settings.process.ultimate_exiting_timeout is None


async def test_signal_handlers_kopf_replaced_are_put_back_and_those_it_added_removed() -> None:
    loop = asyncio.get_running_loop()
    calls: list[str] = []
    loop.add_signal_handler(signal.SIGTERM, calls.append, "ours")
    try:
        saved = loop_signal_handlers(loop)
        assert set(saved) == {signal.SIGTERM}
        loop.add_signal_handler(signal.SIGTERM, calls.append, "kopf")  # what kopf does
        loop.add_signal_handler(signal.SIGINT, calls.append, "kopf")
        restore_signal_handlers(loop, saved)
        assert set(loop_signal_handlers(loop)) == {signal.SIGTERM}
        signal.raise_signal(signal.SIGTERM)
        for _ in range(10):
            await asyncio.sleep(0.01)
            if calls:
                break
        assert calls == ["ours"]
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)


# --- manifests ---------------------------------------------------------------------------------

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def manifest(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def test_the_shipped_webhooks_fail_open_quickly_and_call_the_served_paths() -> None:
    (mutating,) = (
        d for d in manifest("webhooks/webhooks.yaml") if d["kind"].startswith("Mutating")
    )
    (validating,) = manifest("webhooks/webhook-validating.yaml")
    for configuration, path in ((mutating, MUTATE_POD), (validating, VALIDATE_PRIORITY_CLASS)):
        (webhook,) = configuration["webhooks"]
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["timeoutSeconds"] <= 3
        assert webhook["sideEffects"] == "None"
        assert webhook["clientConfig"]["service"]["path"] == f"/{path}"
        assert webhook["clientConfig"]["service"]["name"] == "gpu-scheduler-webhooks"
    (webhook,) = mutating["webhooks"]
    assert webhook["namespaceSelector"] == {"matchLabels": {ENABLED_LABEL: "true"}}
    assert webhook["rules"][0]["resources"] == ["pods"]
    assert webhook["rules"][0]["operations"] == ["CREATE"]


def test_the_webhooks_component_serves_them_with_the_mounted_certificate() -> None:
    (base_configmap,) = manifest("configmap.yaml")
    (configmap,) = manifest("webhooks/configmap.yaml")
    base = yaml.safe_load(base_configmap["data"]["config.yaml"])
    switched_on = yaml.safe_load(configmap["data"]["config.yaml"])
    assert not config_from_data(base, "configmap").webhooks.enabled
    assert {k: v for k, v in switched_on.items() if k != "webhooks"} == base
    settings = config_from_data(switched_on, "configmap")
    assert settings.webhooks.enabled
    (deployment,) = manifest("webhooks/deployment.yaml")
    pod_spec = deployment["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    (base_deployment,) = manifest("deployment.yaml")
    assert container["name"] == base_deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    certificate = next(
        d for d in manifest("webhooks/webhook-certificate.yaml") if d["kind"] == "Certificate"
    )
    assert str(settings.webhooks.cert_dir) == mounts["webhook-tls"]
    assert volumes["webhook-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["webhooks"] == settings.webhooks.port
    (service,) = (d for d in manifest("webhooks/webhooks.yaml") if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "webhooks"
    assert f"{service['metadata']['name']}.gpu-scheduler.svc" in certificate["spec"]["dnsNames"]
    component = manifest("webhooks/kustomization.yaml")[0]
    assert component["kind"] == "Component"
    assert set(component["resources"]) == {"webhooks.yaml", "webhook-certificate.yaml"}
    assert {p["path"] for p in component["patches"]} == {"configmap.yaml", "deployment.yaml"}
    base_resources = manifest("kustomization.yaml")[0]["resources"]
    assert "reclaim-annotations-policy.yaml" in base_resources
    assert not [r for r in base_resources if "webhook" in r]  # no cert-manager needed by default


def test_the_rbac_grants_no_webhook_configuration_rights() -> None:
    for document in manifest("rbac.yaml"):
        for rule in document.get("rules", []):
            assert "admissionregistration.k8s.io" not in rule["apiGroups"]


# --- failures: logged, retried, never a stopped daemon or a traceback --------------------------


async def test_a_missing_certificate_is_logged_and_retried_without_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "RETRY_INITIAL_S", 0.01)
    monkeypatch.setattr(server, "RETRY_MAX_S", 0.02)
    settings = config_from_data({"webhooks": {"enabled": True, "certDir": str(tmp_path)}})
    webhooks = server.AdmissionWebhooks(
        settings,
        SimpleNamespace(configuration=client.Configuration()),  # type: ignore[arg-type]
    )
    with capture_logs() as logs:
        task = asyncio.create_task(webhooks.run())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if sum(e["event"] == "admission_webhooks_failed" for e in logs) >= 3:
                break
        assert not task.done()  # still retrying: the daemon's task never ends for it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    failures = [e for e in logs if e["event"] == "admission_webhooks_failed"]
    assert len(failures) >= 3
    assert failures[0]["error"] == (
        f"FileNotFoundError: webhooks.certDir: {tmp_path / 'tls.crt'} is missing"
    )
    assert [e["retry_in_s"] for e in failures[:3]] == [0.01, 0.02, 0.02]
    assert not webhooks.serving.is_set()


def test_kopf_warnings_and_errors_become_one_structlog_line_without_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.bridge_kopf_logging()
    server.bridge_kopf_logging()  # idempotent: one handler
    kopf_logger = logging.getLogger("kopf")
    assert sum(isinstance(h, server.KopfLogBridge) for h in kopf_logger.handlers) == 1
    with capture_logs() as logs:
        logging.getLogger("kopf.objects").info("Handler 'x' succeeded.")
        try:
            raise ValueError("x" * 5000)
        except ValueError:
            logging.getLogger("kopf._core").exception("Admission webhook server has failed")
        logging.getLogger("kopf.activities").warning("careful")
    assert [(e["event"], e["log_level"], e["message"]) for e in logs] == [
        ("kopf_log", "error", "Admission webhook server has failed"),
        ("kopf_log", "warning", "careful"),
    ]
    assert logs[0]["error"].startswith("ValueError: xxx")
    assert len(logs[0]["error"]) < server.MAX_LOGGED_CHARS + 50
    assert "Traceback" not in capsys.readouterr().err


def test_the_admission_policy_names_every_problem_in_its_one_validation() -> None:
    """The API server reports only the first failing validation of a policy, so the shipped
    ValidatingAdmissionPolicy has one, joining a problem variable per annotation (the
    integration test test_webhooks.py checks the API server's message names them all)."""
    policy = manifest("reclaim-annotations-policy.yaml")[0]
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == "size(variables.problems) == 0"
    assert "variables.problems.join('; ')" in validation["messageExpression"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    parts = [p.strip() for p in variables["problems"].split("+")]
    assert parts[0] == "variables.missingProblems"
    for key in POLICY_ANNOTATIONS:
        (owner,) = (
            name
            for name, expression in variables.items()
            if name.endswith("Problems") and name != "missingProblems" and key + "'" in expression
        )
        assert f"variables.{owner}" in parts
        assert f"['annotation {key}: must be" in variables[owner]
