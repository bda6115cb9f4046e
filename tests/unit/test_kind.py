"""hack/kind stays in step with what it reuses: the local cluster's seed nodes, the shipped
configuration, and the image name of the offline build."""

from __future__ import annotations

import re
from typing import Any

import yaml

from hack.image import IMAGE_NAME
from hack.image.dockerfile import instructions
from hack.localcluster.nodes import SEED_NODE_TYPES, node_manifest
from tests.datasets import REPO_ROOT

KIND = REPO_ROOT / "hack" / "kind"


def _documents(path: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((REPO_ROOT / path).read_text()) if d]


def test_the_fake_gpu_nodes_are_the_local_cluster_seed_nodes() -> None:
    expected = [node_manifest(spec, spec.node_names()[0]) for spec in SEED_NODE_TYPES]
    assert _documents("hack/kind/nodes.yaml") == expected


def test_the_configuration_is_the_shipped_one_plus_reclaim() -> None:
    [shipped] = _documents("manifests/configmap.yaml")
    [patch] = _documents("hack/kind/config-patch.yaml")
    assert patch["metadata"] == shipped["metadata"]
    kind_config = yaml.safe_load(patch["data"]["config.yaml"])
    reclaim = kind_config.pop("reclaim")
    assert kind_config == yaml.safe_load(shipped["data"]["config.yaml"])
    assert reclaim["prometheusUrl"] == "http://prometheus.monitoring:9090"
    assert reclaim["mode"] == "dry-run"


def test_kind_runs_the_image_the_builds_name() -> None:
    [kustomization] = _documents("hack/kind/kustomization.yaml")
    [override] = kustomization["images"]
    [shipped] = [d for d in _documents("manifests/deployment.yaml") if d["kind"] == "Deployment"]
    assert (
        override["name"]
        == shipped["spec"]["template"]["spec"]["containers"][0]["image"].split(":")[0]
    )
    assert f"{override['newName']}:{override['newTag']}" == IMAGE_NAME
    script = (KIND / "up.sh").read_text()
    assert re.search(rf'^image="{re.escape(IMAGE_NAME)}"$', script, flags=re.M)
    args = [
        i.value
        for i in instructions((KIND / "fake-dcgm.Dockerfile").read_text())
        if i.keyword == "ARG"
    ]
    assert args == [f"SCHEDULER_IMAGE={IMAGE_NAME}"]


def test_every_kind_deployment_stays_off_the_kwok_nodes() -> None:
    [patch] = _documents("hack/kind/scheduler-patch.yaml")
    deployments = [patch] + [
        d for d in _documents("hack/kind/monitoring.yaml") if d["kind"] == "Deployment"
    ]
    assert len(deployments) == 3
    for deployment in deployments:
        terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms == [
            {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}
        ]
    for node in _documents("hack/kind/nodes.yaml"):
        assert node["metadata"]["labels"]["type"] == "kwok"
