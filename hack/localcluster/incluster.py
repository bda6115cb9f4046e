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

With `webhooks=True` the overlay adds the admission webhooks Component (`manifests/webhooks`)
without cert-manager: its Issuer and Certificate are deleted, the Secret `WEBHOOK_SECRET` is made
from a serving certificate signed by the cluster CA (`pki.issue_serving_cert`) and that CA is the
webhook configurations' caBundle. The caller's config text must then enable `webhooks`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.pki import issue_serving_cert

if TYPE_CHECKING:
    from hack.localcluster.cluster import LocalCluster

NAMESPACE = "gpu-scheduler"
DEPLOYMENT = "gpu-scheduler"
LEASE = "gpu-scheduler"
POD_LABEL = "app.kubernetes.io/name=gpu-scheduler"
SHIPPED_IMAGE = "gpu-scheduler"
"""The image name manifests/deployment.yaml uses (and kustomize `images:` replaces)."""
WEBHOOK_SECRET = "gpu-scheduler-webhook-tls"
WEBHOOK_SERVICE = "gpu-scheduler-webhooks"
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


def overlay_kustomization(
    manifests: Path, overlay: Path, image: str, node: str, ca_bundle: str | None = None
) -> dict[str, Any]:
    """The overlay's kustomization.yaml (as data) over `manifests`, for `image` ("name:tag") on
    the node named `node`, with the ConfigMap generated from `config.yaml` beside it. With
    `ca_bundle` (base64 of the CA's PEM) also the webhooks Component, served with the Secret
    generated from `tls.crt`, `tls.key` and `ca.crt` beside it."""
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
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(manifests, overlay)],
        "images": [{"name": SHIPPED_IMAGE, "newName": name, "newTag": tag}],
        "configMapGenerator": [
            {"name": CONFIG_MAP, "namespace": NAMESPACE, "files": ["config.yaml"]}
        ],
        "patches": [{"patch": json.dumps(deployment_patch)}],
    }
    if ca_bundle is not None:
        kustomization["components"] = [os.path.relpath(manifests / "webhooks", overlay)]
        kustomization["secretGenerator"] = [
            {
                "name": WEBHOOK_SECRET,
                "namespace": NAMESPACE,
                "type": "kubernetes.io/tls",
                "files": ["tls.crt", "tls.key", "ca.crt"],
                "options": {"disableNameSuffixHash": True},
            }
        ]
        for kind in ("Issuer", "Certificate"):
            delete = {
                "apiVersion": "cert-manager.io/v1",
                "kind": kind,
                "metadata": {"name": "gpu-scheduler-webhook", "namespace": NAMESPACE},
                "$patch": "delete",
            }
            kustomization["patches"].append({"patch": json.dumps(delete)})
        # The Component's one webhook configuration (the validating one is not in it).
        add = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle}]
        target = {"kind": "MutatingWebhookConfiguration", "name": DEPLOYMENT}
        kustomization["patches"].append({"target": target, "patch": json.dumps(add)})
    return kustomization


def write_overlay(
    cluster: LocalCluster, folder: Path, image: str, config_text: str, webhooks: bool = False
) -> Path:
    """Write the overlay for this cluster's real node into `folder` (with `webhooks`, the
    webhooks Component and a serving certificate the first call makes); returns `folder`."""
    assert cluster.real_node is not None and cluster.pki is not None, "a real node"
    folder.mkdir(parents=True, exist_ok=True)
    ca_bundle = None
    if webhooks:
        if not (folder / "tls.crt").is_file():
            service = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
            cert, key = issue_serving_cert(
                cluster.pki, folder, "webhook", [service, f"{service}.cluster.local"]
            )
            cert.rename(folder / "tls.crt")
            key.rename(folder / "tls.key")
            shutil.copyfile(cluster.pki.ca_cert, folder / "ca.crt")
        ca_bundle = base64.b64encode((folder / "ca.crt").read_bytes()).decode()
    kustomization = overlay_kustomization(
        REPO_ROOT / "manifests", folder, image, cluster.real_node.name, ca_bundle
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
    cluster: LocalCluster,
    archive: Path,
    image: str,
    config_text: str,
    folder: Path,
    webhooks: bool = False,
) -> Deployed:
    """Import `archive` (named `image`), apply the overlay written into `folder` (`webhooks`: see
    `write_overlay`), wait until rolled out. Raises InClusterError naming the failed step."""
    deployed = Deployed(overlay=folder)
    started = time.monotonic()
    import_image(cluster, archive)
    deployed.timings["image import"] = time.monotonic() - started
    started = time.monotonic()
    apply_overlay(cluster, write_overlay(cluster, folder, image, config_text, webhooks))
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
