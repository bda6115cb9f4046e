"""docs/operations.md: its offline commands run as written; the configuration it shows loads; every
other command needs the demo cluster (tests/integration/test_demo.py runs those). The install and
upgrade sections: their kustomizations render with the local cluster's kubectl, and what they
say about the rendered objects and the Prometheus labels holds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.localcluster.binaries import cache_dir, pinned_versions
from reclaim.promql import (
    DEFAULT_LABELS,
    GPU_UTIL,
    GR_ENGINE_ACTIVE,
    POWER_USAGE,
    TOTAL_ENERGY,
    LabelNames,
)
from scheduler.cli import main
from scheduler.config import load_config
from tests.datasets import REPO_ROOT
from tests.docs import DEMO_DIR, OPERATIONS, operations_commands, section_blocks

TOOL = ".venv/bin/gpu-scheduler"


def test_every_command_is_offline_or_runs_against_the_demo() -> None:
    commands = operations_commands()
    assert len(commands) >= 8
    for command in commands:
        assert command.startswith((TOOL + " ", "kubectl ")), command
        assert DEMO_DIR in command or command.startswith(TOOL), command


def test_offline_commands_run_as_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = [c for c in operations_commands() if DEMO_DIR not in c]
    assert offline
    monkeypatch.chdir(REPO_ROOT)
    for command in offline:
        argv = shlex.split(command)
        assert main(argv[1:]) == 0, command
        assert "idle_holder_20GiB" in capsys.readouterr().out


def test_the_dry_run_configuration_loads(tmp_path: Path) -> None:
    (block,) = section_blocks(OPERATIONS.read_text(), "Dry-run first", "yaml")
    path = tmp_path / "config.yaml"
    path.write_text(block)
    settings = load_config(path, {}, {})
    assert settings.reclaim.mode == "dry-run"
    assert settings.reclaim.prometheus_url == "http://prometheus.monitoring:9090"
    assert settings.reclaim.scrape_interval_seconds == 30


INSTALL_SECTIONS = ("Install on a real cluster", "Upgrade")
IMAGE = "registry.example.com/gpu-scheduler:0.1.0"


def install_commands() -> list[str]:
    """The command lines of the install and upgrade sections, in order."""
    text = OPERATIONS.read_text()
    return [
        line.strip()
        for heading in INSTALL_SECTIONS
        for block in section_blocks(text, heading, "sh")
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def cached_kubectl() -> Path:
    """The kubectl the local cluster uses (hack/versions.env); a missing one fails under CI."""
    kubernetes = pinned_versions()["KUBERNETES_VERSION"]
    path = cache_dir() / "bin" / f"kubernetes-{kubernetes}" / "kubectl"
    if not path.is_file():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no kubectl at {path}: run hack/build-binaries.sh")
        pytest.skip(f"no kubectl at {path} (hack/build-binaries.sh builds it)")
    return path


def lay_out_install(folder: Path) -> Path:
    """`folder` holding `manifests` (a link to the repository's) and the doc's `my-cluster/` (its
    kustomization and configuration blocks), as the install section lays them out."""
    (folder / "manifests").symlink_to(REPO_ROOT / "manifests", target_is_directory=True)
    kustomization, config = section_blocks(
        OPERATIONS.read_text(), "Install on a real cluster", "yaml"
    )
    overlay = folder / "my-cluster"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(kustomization)
    (overlay / "config.yaml").write_text(config)
    return folder


@pytest.fixture
def beside_manifests(tmp_path: Path) -> Path:
    return lay_out_install(tmp_path)


def kustomize(kubectl: Path, folder: Path, target: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(kubectl), "kustomize", target],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (target, result.stderr)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_install_commands_are_the_known_few() -> None:
    """Every line is a build or push of the overlay's image, or a kustomize render or apply of a
    folder some `kubectl kustomize` line renders (what the other tests run)."""
    commands = install_commands()
    rendered = {c.split()[2] for c in commands if c.startswith("kubectl kustomize ")}
    assert {"manifests/", "my-cluster/"} <= rendered
    for command in commands:
        words = command.split()
        if words[:2] == ["docker", "build"]:
            assert words[2:] == ["-t", IMAGE, "."], command
            assert (REPO_ROOT / "Dockerfile").is_file()
        elif words[:2] == ["docker", "push"]:
            assert words[2:] == [IMAGE], command
        elif words[:2] == ["kubectl", "kustomize"]:
            assert len(words) == 3, command
        else:
            assert words[:3] == ["kubectl", "apply", "-k"] and len(words) == 4, command
            assert words[3] in rendered, command


def test_install_kustomize_commands_render(beside_manifests: Path) -> None:
    kubectl = cached_kubectl()
    renders = [c for c in install_commands() if c.startswith("kubectl kustomize ")]
    for command in renders:
        assert kustomize(kubectl, beside_manifests, command.split()[2]), command


def test_the_base_is_two_replicas_with_the_fence_on_its_lease(beside_manifests: Path) -> None:
    objects = kustomize(cached_kubectl(), beside_manifests, "manifests/")
    deployment = one(objects, "Deployment", "gpu-scheduler")
    assert deployment["spec"]["replicas"] == 2
    assert "strategy" not in deployment["spec"]  # the default RollingUpdate, as documented
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "gpu-scheduler-lease-fence")
    config = yaml.safe_load(one(objects, "ConfigMap", "gpu-scheduler")["data"]["config.yaml"])
    lease = config["leaderElection"]
    assert binding["spec"]["paramRef"]["name"] == lease["leaseName"]
    assert binding["spec"]["paramRef"]["namespace"] == lease["leaseNamespace"]


def test_the_overlay_sets_the_image_and_rolls_on_a_config_change(
    beside_manifests: Path,
) -> None:
    kubectl = cached_kubectl()
    objects = kustomize(kubectl, beside_manifests, "my-cluster/")
    deployment = one(objects, "Deployment", "gpu-scheduler")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == [IMAGE]
    mounted = pod["volumes"][0]["configMap"]["name"]
    assert mounted.startswith("gpu-scheduler-config-")  # the generated one, hash-suffixed
    generated = one(objects, "ConfigMap", mounted)
    config_file = beside_manifests / "my-cluster" / "config.yaml"
    assert generated["data"]["config.yaml"] == config_file.read_text()
    # The overlay's configuration names the Lease the fencing policy follows.
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "gpu-scheduler-lease-fence")
    settings = load_config(config_file, {}, {})
    assert binding["spec"]["paramRef"]["name"] == settings.leader_election.lease_name
    assert binding["spec"]["paramRef"]["namespace"] == settings.leader_election.lease_namespace
    # A configuration change renames the ConfigMap, so the pod template changes: a rollout.
    config_file.write_text(config_file.read_text().replace("dry-run", "enforce"))
    changed = one(
        kustomize(kubectl, beside_manifests, "my-cluster/"), "Deployment", "gpu-scheduler"
    )
    assert changed["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] != mounted


def test_the_overlay_configuration_reads_the_exported_labels(beside_manifests: Path) -> None:
    settings = load_config(beside_manifests / "my-cluster" / "config.yaml", {}, {})
    assert settings.reclaim.mode == "dry-run"
    labels = LabelNames(namespace=settings.reclaim.namespace_label, pod=settings.reclaim.pod_label)
    assert labels == LabelNames.exported()


def test_the_label_table_names_the_labels_the_queries_use() -> None:
    text = OPERATIONS.read_text()
    section = text[text.index("## Install on a real cluster") : text.index("## Upgrade")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
    assert named == {getattr(DEFAULT_LABELS, f.name) for f in fields(LabelNames)}
    for metric in (GPU_UTIL, POWER_USAGE, TOTAL_ENERGY, GR_ENGINE_ACTIVE):
        assert f"`{metric}`" in section


def test_a_renamed_metric_is_named_only_in_the_rename_table() -> None:
    text = OPERATIONS.read_text()
    start = text.index("Renamed in this version")
    table = text[start : text.index("\n\n", text.index("|", start))]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    old = {re.split(r"[{`]", row.split("|")[1].strip())[1] for row in rows}
    assert "gpu_scheduler_is_leader" in old
    rest = text.replace(table, "")
    for name in sorted(old):
        assert not re.search(rf"\b{name}\b", rest), f"{name} is gone but still named"
