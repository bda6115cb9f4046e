"""The pure parts of hack/localcluster/kueue.py: which webhooks are registered and where they
point, and the metrics key pair that is written once and never replaced."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from hack.localcluster.kueue import (
    WEBHOOK_CONFIGURATIONS,
    KueueError,
    configuration,
    ensure_metrics_certs,
    local_webhooks,
)
from hack.localcluster.pki import write_pki


def _webhook(name: str, group: str, path: str, resource: str = "things") -> dict[str, object]:
    return {
        "name": name,
        "clientConfig": {
            "service": {"name": "webhook-service", "namespace": "system", "path": path}
        },
        "failurePolicy": "Fail",
        "rules": [{"apiGroups": [group], "resources": [resource], "operations": ["CREATE"]}],
    }


def _definitions(tmp_path: Path) -> Path:
    documents = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "from-the-module"},
            "webhooks": [
                _webhook("job", "batch", "/job"),
                _webhook("pod", "", "/pod", "pods"),
                _webhook("service", "", "/service", "services"),
                _webhook("deployment", "apps", "/deployment"),
                _webhook("queue", "kueue.x-k8s.io", "/queue"),
            ],
        }
        for kind in WEBHOOK_CONFIGURATIONS
    ]
    path = tmp_path / "webhooks.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_only_kueue_job_and_pod_webhooks_are_registered_by_url_with_the_ca(
    tmp_path: Path,
) -> None:
    configurations = local_webhooks(_definitions(tmp_path), "https://127.0.0.1:9443", b"PEM")
    assert [c["metadata"]["name"] for c in configurations] == list(WEBHOOK_CONFIGURATIONS.values())
    for config in configurations:
        assert [w["name"] for w in config["webhooks"]] == ["job", "pod", "queue"]
        job, pod, queue = config["webhooks"]
        assert job["clientConfig"] == {
            "url": "https://127.0.0.1:9443/job",
            "caBundle": base64.b64encode(b"PEM").decode(),
        }
        assert job["failurePolicy"] == "Fail"
        assert pod["clientConfig"]["url"] == "https://127.0.0.1:9443/pod"
        # Only the Pod webhooks skip the system namespaces: a Kueue that is down must not
        # refuse the pods of kube-system or its own namespace.
        (expression,) = pod["namespaceSelector"]["matchExpressions"]
        assert expression == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "kueue-system"],
        }
        assert "namespaceSelector" not in job and "namespaceSelector" not in queue


def test_definitions_without_a_validating_configuration_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.yaml"
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "webhooks": [],
    }
    path.write_text(yaml.safe_dump(mutating))
    with pytest.raises(KueueError, match="lacks a mutating or a validating"):
        local_webhooks(path, "https://127.0.0.1:1", b"")


def test_configuration_serves_on_loopback_without_internal_certs(tmp_path: Path) -> None:
    config = configuration(9443, 8081, tmp_path)
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path)}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:8081"
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert config["integrations"]["frameworks"] == ["batch/job", "pod"]


def test_the_metrics_key_pair_is_written_once_and_kept(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    folder = tmp_path / "etc" / "kueue" / "metrics" / "certs"
    ensure_metrics_certs(pki, folder)
    first = (folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes()
    assert first[0].startswith(b"-----BEGIN CERTIFICATE-----")
    ensure_metrics_certs(write_pki(tmp_path / "other"), folder)
    assert ((folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes()) == first
