"""The shipped image, built offline (`hack/image`: mmdebstrap base, buildah running the
Dockerfile; cached, so a warm machine skips the build), run with runc under the hardening
manifests/deployment.yaml asks for: its non-root user, a read-only root filesystem, no new
privileges, no capabilities, a tmpfs at each emptyDir path.

Needs root and Debian's mmdebstrap, buildah, umoci and runc (hack/setup.sh installs them): with
CI=true their absence fails the run; elsewhere these tests are skipped with the reason. The import
into containerd uses the real node's containerd 2 (`hack/build-binaries.sh --node`, built into the
cache when missing), as the in-cluster tests do.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from hack.image import IMAGE_NAME, image_archive, run
from hack.image.build import image_recipe
from hack.localcluster import LocalCluster
from hack.localcluster.cluster import free_port
from hack.localcluster.realnode import node_binaries
from scheduler.cli import package_version
from tests.datasets import REPO_ROOT
from tests.integration.test_deployment_rbac import rbac_documents
from tests.kube import eventually

IN_CI = os.environ.get("CI", "").lower() == "true"
TOOLS = ("mmdebstrap", "buildah", "umoci", "runc")
PACKAGES = ("scheduler", "topology", "reclaim", "metrics")
IMAGE_ROOTFS_LIMIT = 450 * 2**20
"""Bytes the unpacked image may take (about 330 MiB when measured; docs/local-cluster.md)."""
# TLS without verification, for the daemon's self-signed metrics certificate.
UNVERIFIED = ssl.create_default_context()
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE

IMPORT_EVERYTHING = f"""
import importlib, json, pkgutil, sys
names = []
for package in {PACKAGES!r}:
    module = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        importlib.import_module(info.name)
        names.append(info.name)
import scheduler.daemon
uncompiled = [n for n in names if sys.modules[n].__cached__ is None
              or not __import__("os").path.exists(sys.modules[n].__cached__)]
print(json.dumps({{"modules": len(names), "dont_write_bytecode": sys.dont_write_bytecode,
                  "uncompiled": uncompiled, "file": scheduler.daemon.__file__}}))
"""
"""Imports every module of the distribution; reports which lack a precompiled .pyc."""


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    reason = ""
    if missing:
        reason = f"missing {', '.join(missing)}: run hack/setup.sh (Debian packages)"
    elif os.geteuid() != 0:
        reason = "building and running the image needs root (buildah, runc, overlay mounts)"
    if reason:
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def archive() -> Path:
    require_tools()
    return image_archive()


@pytest.fixture(scope="module")
def bundle(archive: Path) -> run.Bundle:
    return run.unpack(archive)


@pytest.fixture(scope="module")
def rules() -> run.Hardening:
    docs = yaml.safe_load_all((REPO_ROOT / "manifests" / "deployment.yaml").read_text())
    [deployment] = [d for d in docs if d and d["kind"] == "Deployment"]
    return run.hardening(deployment)


def _written(upper: Path, empty_dirs: tuple[str, ...]) -> list[str]:
    """What an overlay's upper folder holds, less the emptyDir mount points (and their parents)
    that the runtime makes: every file the container created or changed."""
    points = {d.strip("/") for d in empty_dirs}
    return sorted(
        relative
        for path in upper.rglob("*")
        if (relative := str(path.relative_to(upper))) not in points
        and not any(point.startswith(f"{relative}/") for point in points)
    )


def _checked(config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    done = run.run(config)
    assert done.returncode == 0, (config["process"]["args"], done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_containerd_imports_the_archive_under_its_name(archive: Path, tmp_path: Path) -> None:
    runtime = node_binaries().runtime
    socket = tmp_path / "containerd.sock"
    (tmp_path / "config.toml").write_text(
        "version = 2\n"
        f'root = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{socket}"\n'
    )
    with (tmp_path / "containerd.log").open("wb") as log:
        daemon = subprocess.Popen(
            [str(runtime.containerd), "--config", str(tmp_path / "config.toml")],
            stdout=log,
            stderr=log,
        )
    try:
        ctr = [str(runtime.ctr), "--address", str(socket), "--namespace", "k8s.io"]
        for _ in range(100):
            if (
                socket.exists()
                and subprocess.run([*ctr, "version"], capture_output=True).returncode == 0
            ):
                break
            time.sleep(0.1)
        imported = subprocess.run(
            [*ctr, "images", "import", str(archive)], capture_output=True, text=True
        )
        assert imported.returncode == 0, (
            imported.stderr,
            (tmp_path / "containerd.log").read_text(),
        )
        listed = subprocess.run([*ctr, "images", "list", "--quiet"], capture_output=True, text=True)
        assert listed.stdout.split() == [IMAGE_NAME]
    finally:
        daemon.terminate()
        daemon.wait(30)


def test_the_image_runs_the_dockerfile_user_and_entrypoint(bundle: run.Bundle) -> None:
    recipe = image_recipe()
    process = bundle.config["process"]
    assert process["user"]["uid"] == int(recipe.user) != 0
    assert process["args"] == list(recipe.entrypoint)
    assert process["cwd"] == "/app"
    assert "PYTHONDONTWRITEBYTECODE=1" in process["env"]


def test_version_and_help_under_the_deployment_hardening(
    bundle: run.Bundle, rules: run.Hardening
) -> None:
    assert rules.read_only_root and rules.run_as_non_root
    version = _checked(run.spec(bundle, rules, ["--version"]))
    assert version.stdout.strip() == f"gpu-scheduler {package_version()}"
    helped = _checked(run.spec(bundle, rules, ["--help"]))
    assert helped.stdout.startswith("usage: gpu-scheduler")
    assert " run " in helped.stdout and "explain" in helped.stdout


def test_every_module_imports_precompiled_without_writing_outside_the_empty_dirs(
    bundle: run.Bundle, rules: run.Hardening
) -> None:
    # -P: import the installed distribution (as the entrypoint does), not /app's sources.
    command = ["python3", "-P", "-c", IMPORT_EVERYTHING]
    with run.writable_overlay(bundle.rootfs) as (merged, upper):
        writable = run.Hardening(**{**vars(rules), "read_only_root": False})
        done = _checked(run.spec(bundle, writable, [], command=command, root=merged))
        written = _written(upper, rules.empty_dirs)
    report = json.loads(done.stdout)
    assert report["modules"] > 50 and report["dont_write_bytecode"] is True
    assert report["uncompiled"] == []
    assert report["file"].startswith("/usr/local/lib/python3")
    assert written == [], f"the image wrote outside its emptyDir mounts: {written[:20]}"
    # The same on the read-only root the Deployment gives it.
    again = _checked(run.spec(bundle, rules, [], command=command))
    assert json.loads(again.stdout)["modules"] == report["modules"]


def _deployment_container() -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO_ROOT / "manifests" / "deployment.yaml").read_text())
    [deployment] = [d for d in docs if d and d["kind"] == "Deployment"]
    [container] = [
        c
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["name"] == run.CONTAINER
    ]
    return dict(container)


def _shipped_config() -> str:
    [configmap] = yaml.safe_load_all((REPO_ROOT / "manifests" / "configmap.yaml").read_text())
    return str(configmap["data"]["config.yaml"])


def _readable_folder(path: Path, files: dict[str, str]) -> Path:
    """A folder of files the image's user can read, as a kubelet mounts a volume."""
    path.mkdir()
    path.chmod(0o755)
    for name, text in files.items():
        (path / name).write_text(text)
        (path / name).chmod(0o644)
    return path


async def _ready(port: int) -> bool:
    def probe() -> bool:
        try:
            url = f"https://127.0.0.1:{port}/readyz"  # the shipped metricsServing.secure
            with urllib.request.urlopen(url, timeout=2, context=UNVERIFIED) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    return await asyncio.to_thread(probe)


async def test_the_daemon_runs_hardened_in_cluster_style_until_sigterm(
    bundle: run.Bundle,
    rules: run.Hardening,
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The Deployment's args and ConfigMap, the shipped RBAC's ServiceAccount token mounted where
    a kubelet mounts it, in-cluster configuration from KUBERNETES_SERVICE_HOST/PORT; only the
    scheduler name, the Lease's namespace and the metrics address are moved to this test's."""
    assert cluster.binaries is not None and cluster.pki is not None
    rbac = yaml.safe_dump_all(rbac_documents(namespace))
    kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    await asyncio.to_thread(
        subprocess.run, [*kubectl, "apply", "-f", "-"], input=rbac, text=True, check=True
    )
    token = await core_api.create_namespaced_service_account_token(
        "gpu-scheduler", namespace, {"spec": {"expirationSeconds": 3600}}
    )
    account = _readable_folder(
        tmp_path / "serviceaccount",
        {
            "token": token.status.token,
            "ca.crt": cluster.pki.ca_cert.read_text(),
            "namespace": namespace,
        },
    )
    settings = _readable_folder(tmp_path / "config", {"config.yaml": _shipped_config()})
    container = _deployment_container()
    port = free_port()
    server = urllib.parse.urlsplit(cluster.server)
    args = [
        *container["args"],
        f"--scheduler-name={namespace}",
        f"--lease-namespace={namespace}",
        f"--metrics-address=127.0.0.1:{port}",
    ]
    config = run.spec(bundle, rules, args)
    config["process"]["env"] += [
        "POD_NAME=image-check",
        f"KUBERNETES_SERVICE_HOST={server.hostname}",
        f"KUBERNETES_SERVICE_PORT={server.port}",
    ]
    # The host's network (the API server listens on loopback); the volumes, read-only.
    config["linux"]["namespaces"] = [
        n for n in config["linux"]["namespaces"] if n["type"] != "network"
    ]
    [config_mount] = [m for m in container["volumeMounts"] if m["name"] == "config"]
    for destination, source in (
        ("/var/run/secrets/kubernetes.io/serviceaccount", account),
        (config_mount["mountPath"], settings),
    ):
        config["mounts"].append(
            {
                "destination": destination,
                "type": "bind",
                "source": str(source),
                "options": ["rbind", "ro"],
            }
        )
    coordination = client.CoordinationV1Api(core_api.api_client)

    async def leading() -> bool:
        if not await _ready(port):
            return False
        try:
            lease = await coordination.read_namespaced_lease("gpu-scheduler", namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return bool(lease.spec.holder_identity == "image-check")

    with run.started(config) as started:
        try:
            await eventually(leading, timeout=90, what="the image's daemon ready and leading")
        except TimeoutError:
            pytest.fail(f"not ready and leading; its output:\n{started.text()[-4000:]}")
        started.process.terminate()
        code = await asyncio.to_thread(started.process.wait, 30)
        assert code == 0, started.text()[-4000:]
    assert "Traceback" not in started.text()
    await asyncio.to_thread(  # the cluster-wide half of the RBAC (the namespace takes the rest)
        subprocess.run,
        [*kubectl, "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
        input=rbac,
        text=True,
        capture_output=True,
        check=True,
    )


def test_image_size(archive: Path, bundle: run.Bundle) -> None:
    unpacked = sum(
        p.lstat().st_size for p in bundle.rootfs.rglob("*") if p.is_file() and not p.is_symlink()
    )
    print(
        f"image {IMAGE_NAME}: archive {archive.stat().st_size / 2**20:.0f} MiB, "
        f"root filesystem {unpacked / 2**20:.0f} MiB"
    )
    assert 0 < unpacked < IMAGE_ROOTFS_LIMIT


KIND_NAMESPACES = ("gpu-scheduler", "monitoring")
"""Namespaces of hack/kind's objects: a server-side dry run of namespaced objects needs them."""


def _namespace_absent(cluster: LocalCluster, name: str) -> bool:
    """Wait (bounded) for a terminating namespace to go; True when `name` does not exist."""
    for _ in range(120):
        found = cluster.kubectl("get", "namespace", name, "-o", "name", check=False)
        if found.returncode != 0:
            return True
        phase = cluster.kubectl("get", "namespace", name, "-o", "jsonpath={.status.phase}")
        if phase.stdout.strip() != "Terminating":
            return False
        time.sleep(0.5)
    raise AssertionError(f"namespace {name} still terminating")


def test_the_kind_manifests_pass_a_server_side_dry_run(cluster: LocalCluster) -> None:
    """Everything hack/kind/up.sh applies besides kwok's own release manifests: the
    kustomization (manifests/, Prometheus, the fake exporter) and the fake GPU nodes."""
    assert cluster.binaries is not None
    rendered = cluster.kubectl("kustomize", str(REPO_ROOT / "hack" / "kind"))
    documents = rendered.stdout + "\n---\n" + (REPO_ROOT / "hack/kind/nodes.yaml").read_text()
    created = [name for name in KIND_NAMESPACES if _namespace_absent(cluster, name)]
    for name in created:
        cluster.kubectl("create", "namespace", name)
    try:
        kubectl = [str(cluster.binaries.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
        done = subprocess.run(
            [*kubectl, "apply", "--dry-run=server", "-o", "name", "-f", "-"],
            input=documents,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        names = set(done.stdout.split())
        assert {
            "deployment.apps/gpu-scheduler",
            "deployment.apps/prometheus",
            "deployment.apps/fake-dcgm-exporter",
            "service/prometheus",
            "configmap/fake-dcgm-exporter",
            "node/g2-expansion-0",
        } <= names, done.stdout
        absent = cluster.kubectl(
            "get", "deployment", "-A", "-l", "app.kubernetes.io/name=prometheus"
        )
        assert "prometheus" not in absent.stdout  # a dry run stores nothing
    finally:  # gone before the next test, which may want the same namespace
        for name in created:
            cluster.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s")
