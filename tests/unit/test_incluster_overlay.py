"""The in-cluster overlay (hack/localcluster/incluster.py) rendered by the cluster's kubectl: it
changes only the image, its pull policy, the node and the config volume's ConfigMap (generated,
its name ending in a hash of the text); everything else is manifests/ as shipped."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.incluster import CONFIG_MAP, WEBHOOK_SECRET, overlay_kustomization
from tests.unit.test_operations_doc import cached_kubectl

IMAGE = "gpu-scheduler.local/gpu-scheduler:dev"
CONFIG = "schedulerName: gpu-scheduler\nlogLevel: debug\n"


def render(target: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(cached_kubectl()), "kustomize", str(target)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(
    objects: list[dict[str, Any]], kind: str, name: str = "gpu-scheduler"
) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def rendered_overlay(folder: Path, config_text: str) -> list[dict[str, Any]]:
    folder.mkdir()
    kustomization = overlay_kustomization(REPO_ROOT / "manifests", folder, IMAGE, "n1")
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization))
    (folder / "config.yaml").write_text(config_text)
    return render(folder)


def test_the_overlay_changes_only_image_node_and_config(tmp_path: Path) -> None:
    shipped = render(REPO_ROOT / "manifests")
    rendered = rendered_overlay(tmp_path / "overlay", CONFIG)

    deployment = by_kind(rendered, "Deployment")
    template = deployment["spec"]["template"]
    [container] = template["spec"]["containers"]
    assert container["image"] == IMAGE and container["imagePullPolicy"] == "Never"
    assert template["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    config_map = template["spec"]["volumes"][0]["configMap"]["name"]
    assert config_map.startswith(f"{CONFIG_MAP}-") and len(config_map) > len(CONFIG_MAP) + 5
    assert by_kind(rendered, "ConfigMap", config_map)["data"] == {"config.yaml": CONFIG}

    # Undo those changes: what is left is the shipped render.
    expected = copy.deepcopy(by_kind(shipped, "Deployment"))
    undone = copy.deepcopy(deployment)
    undone_template = undone["spec"]["template"]
    del undone_template["spec"]["nodeSelector"]
    undone_template["spec"]["volumes"][0]["configMap"]["name"] = "gpu-scheduler"
    del undone_template["spec"]["containers"][0]["imagePullPolicy"]
    undone_template["spec"]["containers"][0]["image"] = "gpu-scheduler:latest"
    assert undone == expected
    others = [
        o
        for o in rendered
        if o["kind"] != "Deployment" and o is not by_kind(rendered, "ConfigMap", config_map)
    ]
    assert others == [o for o in shipped if o["kind"] != "Deployment"]


def test_a_changed_config_text_changes_the_pod_template(tmp_path: Path) -> None:
    """What rolls the Deployment: the template names a ConfigMap after its content."""
    first = by_kind(rendered_overlay(tmp_path / "a", CONFIG), "Deployment")
    same = by_kind(rendered_overlay(tmp_path / "b", CONFIG), "Deployment")
    changed = by_kind(
        rendered_overlay(tmp_path / "c", CONFIG.replace("debug", "info")), "Deployment"
    )
    assert first["spec"]["template"] == same["spec"]["template"]
    assert first["spec"]["template"] != changed["spec"]["template"]


def test_the_webhooks_overlay_serves_them_with_its_own_certificate(tmp_path: Path) -> None:
    folder = tmp_path / "overlay"
    folder.mkdir()
    kustomization = overlay_kustomization(REPO_ROOT / "manifests", folder, IMAGE, "n1", "Q0E=")
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization))
    for name in ("config.yaml", "tls.crt", "tls.key", "ca.crt"):
        (folder / name).write_text(f"{name}\n")
    rendered = render(folder)
    assert not [o for o in rendered if o["apiVersion"].startswith("cert-manager.io/")]
    [secret] = [o for o in rendered if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == WEBHOOK_SECRET
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    [mutating] = [o for o in rendered if o["kind"] == "MutatingWebhookConfiguration"]
    assert [w["clientConfig"]["caBundle"] for w in mutating["webhooks"]] == ["Q0E="]
    template = by_kind(rendered, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "webhook-tls", "secret": {"secretName": WEBHOOK_SECRET}} in template["volumes"]
