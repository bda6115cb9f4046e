"""The launcher's pure parts: certificates, node manifests, Prometheus config, binary lookup."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hack.localcluster import G2_EXPANSION, SEED_NODE_TYPES, node_manifest
from hack.localcluster import prometheus as prom
from hack.localcluster.binaries import pinned_versions
from hack.localcluster.nodes import spec_from_mapping
from hack.localcluster.pki import write_pki
from tests.kube import namespace_name


def test_pki_signs_serving_and_admin_certificates_with_one_ca(tmp_path: Path) -> None:
    pki = write_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin_cert.read_bytes())
    for leaf in (serving, admin):
        leaf.verify_directly_issued_by(ca)
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in san.get_values_for_type(x509.DNSName)
    organization = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    assert organization == "system:masters"
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    assert pki.admin_key.stat().st_mode & 0o077 == 0


def test_seed_node_types_match_the_design() -> None:
    layout = {spec.type_name: (spec.gpus, spec.nvlink_domains) for spec in SEED_NODE_TYPES}
    assert layout == {"G1": (2, "0-1"), "G2": (4, "0-1,2-3"), "G2-Expansion": (8, "0-3,4-7")}


def test_node_manifest_carries_gpus_topology_and_kwok_annotation() -> None:
    spec = G2_EXPANSION.with_count(2)
    manifest = node_manifest(spec, spec.node_names()[1])
    assert manifest["metadata"]["name"] == "g2-expansion-1"
    assert manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert manifest["metadata"]["annotations"]["gpu-scheduler.io/nvlink-domains"] == "0-3,4-7"
    assert manifest["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert manifest["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_node_manifest_lists_mig_resources_and_taints() -> None:
    spec = spec_from_mapping(
        {
            "type_name": "MIG",
            "count": 1,
            "gpus": 1,
            "gpu_product": "NVIDIA-H200",
            "mig": {"1g.18gb": 7},
            "taints": [{"key": "gpu", "value": "mig", "effect": "NoSchedule"}],
        }
    )
    manifest = node_manifest(spec, "mig-0")
    assert manifest["status"]["capacity"]["nvidia.com/mig-1g.18gb"] == "7"
    assert manifest["spec"]["taints"] == [{"key": "gpu", "value": "mig", "effect": "NoSchedule"}]
    assert "gpu-scheduler.io/nvlink-domains" not in manifest["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"type_name": "X", "count": 1, "gpus": 2}, "missing field 'gpu_product'"),
        ({"type_name": "X", "count": 1, "gpus": 2, "gpu_product": "A", "gpu": 3}, "unknown field"),
        ({"type_name": "X", "count": -1, "gpus": 2, "gpu_product": "A"}, "'count' must be"),
    ],
)
def test_node_spec_errors_name_the_field(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec_from_mapping(raw)


def test_prometheus_config_scrapes_the_exporter(tmp_path: Path) -> None:
    path = prom.write_config(tmp_path / "prometheus.yml", "127.0.0.1:9400", 1.0)
    config = yaml.safe_load(path.read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "dcgm-exporter"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9400"]}]
    assert job["scrape_interval"] == "1s"
    argv = prom.argv(Path("/usr/bin/prometheus"), path, tmp_path, 9090)
    assert "--web.listen-address=127.0.0.1:9090" in argv


def test_versions_are_pinned_exactly() -> None:
    versions = pinned_versions()
    assert set(versions) == {
        "KUBERNETES_VERSION",
        "ETCD_VERSION",
        "KWOK_VERSION",
        "KUEUE_VERSION",
        "CONTAINERD_VERSION",
        "HELM_VERSION",
    }
    for value in versions.values():
        assert value.startswith("v") and value.count(".") == 2


def test_namespace_names_are_valid_and_distinct() -> None:
    first = namespace_name("test_eviction[sigkill-Case_1]")
    second = namespace_name("test_eviction[sigterm-Case_1]")
    assert first != second
    for name in (first, second):
        assert len(name) <= 63
        assert all((c.isalnum() and c.islower()) or c.isdigit() or c == "-" for c in name)
