"""The shipped manifests as a Deployment on the local cluster's real node.

    cluster = LocalCluster(ClusterConfig(real_node=True)); cluster.start()
    deployed = deploy(cluster, image_archive(), config_text, folder)
    ...  # deployed.timings: seconds of "image import" and "rollout"

`deploy` imports the image archive (`hack/image`) into the real node's containerd (namespace
k8s.io), writes a kustomize overlay over `manifests/` and applies it with `kubectl apply -k`. The
overlay only sets what this cluster needs and leaves the base unchanged:

- `images:` the offline image's name and tag, with `imagePullPolicy: Never` (no registry here);
- a nodeSelector pinning the scheduler pods to the real node (the others are kwok's);
- the configuration as docs/operations.md installs it: a kustomize configMapGenerator
  (`CONFIG_MAP`, from the caller's text as `config.yaml`) whose name ends in a hash of its content,
  and the Deployment's config volume pointed at it. The daemon reads its configuration once at
  start; a changed text gives a new name, so the pod template changes and the Deployment rolls.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hack.localcluster.cluster import REPO_ROOT

if TYPE_CHECKING:
    from hack.localcluster.cluster import LocalCluster

NAMESPACE = "gpu-scheduler"
DEPLOYMENT = "gpu-scheduler"
LEASE = "gpu-scheduler"
POD_LABEL = "app.kubernetes.io/name=gpu-scheduler"
SHIPPED_IMAGE = "gpu-scheduler"
"""The image name manifests/deployment.yaml uses (and kustomize `images:` replaces)."""
CONFIG_MAP = "gpu-scheduler-config"
"""The generated ConfigMap's name before kustomize appends its content hash."""
ROLLOUT_TIMEOUT_S = 180.0


class InClusterError(RuntimeError):
    """The Deployment could not be imported, applied or rolled out; the message says which."""


@dataclass
class Deployed:
    """What `deploy` did: the overlay folder and the seconds each step took."""

    overlay: Path
    timings: dict[str, float] = field(default_factory=dict)


def overlay_kustomization(manifests: Path, overlay: Path, image: str, node: str) -> dict[str, Any]:
    """The overlay's kustomization.yaml (as data) over `manifests`, for `image` ("name:tag") on
    the node named `node`, with the ConfigMap generated from `config.yaml` beside it."""
    name, _, tag = image.rpartition(":")
    deployment_patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": DEPLOYMENT, "imagePullPolicy": "Never"}],
                    "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}}],
                },
            }
        },
    }
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(manifests, overlay)],
        "images": [{"name": SHIPPED_IMAGE, "newName": name, "newTag": tag}],
        "configMapGenerator": [
            {"name": CONFIG_MAP, "namespace": NAMESPACE, "files": ["config.yaml"]}
        ],
        "patches": [{"patch": json.dumps(deployment_patch)}],
    }


def write_overlay(cluster: LocalCluster, folder: Path, image: str, config_text: str) -> Path:
    """Write the overlay for this cluster's real node into `folder`; returns `folder`."""
    assert cluster.real_node is not None, "a cluster with real_node=True"
    folder.mkdir(parents=True, exist_ok=True)
    kustomization = overlay_kustomization(
        REPO_ROOT / "manifests", folder, image, cluster.real_node.name
    )
    (folder / "config.yaml").write_text(config_text)
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization, indent=2))
    return folder


def import_image(cluster: LocalCluster, archive: Path) -> None:
    """`ctr images import` of the OCI archive into the real node's containerd (k8s.io)."""
    node = cluster.real_node
    assert node is not None and node.binaries is not None, "a started real node"
    result = subprocess.run(
        [
            str(node.binaries.ctr),
            f"--address={node.socket}",
            "--namespace=k8s.io",
            "images",
            "import",
            str(archive),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise InClusterError(f"ctr images import {archive.name} failed: {result.stderr[-500:]}")


def apply_overlay(cluster: LocalCluster, overlay: Path) -> None:
    """`kubectl apply -k overlay`, retried for a few seconds while the namespace's objects (the
    ServiceAccount a moment after the namespace) are not there yet."""
    deadline = time.monotonic() + 30
    while True:
        result = cluster.kubectl("apply", "-k", str(overlay), check=False)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise InClusterError(f"kubectl apply -k failed: {result.stderr[-1000:]}")
        time.sleep(0.5)


def wait_rollout(cluster: LocalCluster, timeout_s: float = ROLLOUT_TIMEOUT_S) -> None:
    """Until the Deployment's rollout is complete (every replica updated and Ready)."""
    result = cluster.kubectl(
        "rollout",
        "status",
        f"deployment/{DEPLOYMENT}",
        "-n",
        NAMESPACE,
        f"--timeout={int(timeout_s)}s",
        check=False,
    )
    if result.returncode != 0:
        pods = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
        raise InClusterError(f"rollout not complete: {result.stderr[-500:]}\n{pods[-1500:]}")


def deploy(
    cluster: LocalCluster, archive: Path, image: str, config_text: str, folder: Path
) -> Deployed:
    """Import `archive` (named `image`), apply the overlay written into `folder`, wait until
    rolled out. Raises InClusterError naming the step that failed."""
    deployed = Deployed(overlay=folder)
    started = time.monotonic()
    import_image(cluster, archive)
    deployed.timings["image import"] = time.monotonic() - started
    started = time.monotonic()
    apply_overlay(cluster, write_overlay(cluster, folder, image, config_text))
    wait_rollout(cluster)
    deployed.timings["rollout"] = time.monotonic() - started
    return deployed


def leader(cluster: LocalCluster) -> str:
    """The Lease's holder identity ("" when none)."""
    result = cluster.kubectl(
        "get",
        "lease",
        LEASE,
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.holderIdentity}",
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else ""
