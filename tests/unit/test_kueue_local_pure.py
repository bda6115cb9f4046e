"""The pure parts of hack/localcluster/kueue.py: which webhooks are registered and where they
point, the Configuration (with the Dynamic Resource Allocation settings docs/kueue.md shows),
and the metrics key pair that is written once and never replaced."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from hack.localcluster.dra import GPU_CLASS
from hack.localcluster.kueue import (
    GPU_QUOTA_RESOURCE,
    WEBHOOK_CONFIGURATIONS,
    KueueError,
    configuration,
    ensure_metrics_certs,
    local_webhooks,
)
from hack.localcluster.pki import write_pki
from tests.docs import kueue_dra_recipe, kueue_recipe


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
    assert config["featureGates"] == {
        "VisibilityOnDemand": False,
        "DynamicResourceAllocation": True,
    }
    assert config["integrations"]["frameworks"] == ["batch/job", "pod"]


def test_configuration_counts_dra_gpus_as_the_documented_quota_resource(tmp_path: Path) -> None:
    config = configuration(9443, 8081, tmp_path)
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}
    ]
    assert (GPU_QUOTA_RESOURCE, GPU_CLASS) == ("nvidia.com/gpu", "gpu.nvidia.com")
    # What docs/kueue.md tells a cluster admin to set is what the local cluster runs with.
    documented, objects = kueue_dra_recipe()
    assert documented["resources"] == config["resources"]
    for gate, value in documented["featureGates"].items():
        assert config["featureGates"][gate] == value
    # The recipe's ClusterQueues already cover the mapped name, and the template's class is
    # the mapped one.
    for (kind, _), queue in kueue_recipe().items():
        if kind == "ClusterQueue":
            for group in queue["spec"]["resourceGroups"]:
                assert GPU_QUOTA_RESOURCE in group["coveredResources"]
    (template,) = [o for (kind, _), o in objects.items() if kind == "ResourceClaimTemplate"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == GPU_CLASS


def test_configuration_is_a_fresh_copy_each_time(tmp_path: Path) -> None:
    first = configuration(9443, 8081, tmp_path)
    first["resources"]["deviceClassMappings"][0]["deviceClassNames"].append("other")
    first["featureGates"]["DynamicResourceAllocation"] = False
    second = configuration(9443, 8081, tmp_path)
    assert second["resources"]["deviceClassMappings"][0]["deviceClassNames"] == [GPU_CLASS]
    assert second["featureGates"]["DynamicResourceAllocation"] is True


def test_the_metrics_key_pair_is_written_once_and_kept(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    folder = tmp_path / "etc" / "kueue" / "metrics" / "certs"
    ensure_metrics_certs(pki, folder)
    first = (folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes()
    assert first[0].startswith(b"-----BEGIN CERTIFICATE-----")
    ensure_metrics_certs(write_pki(tmp_path / "other"), folder)
    assert ((folder / "tls.crt").read_bytes(), (folder / "tls.key").read_bytes()) == first
