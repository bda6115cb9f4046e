"""The krew manifest of the kubectl plugin (hack/krew/gpu-scheduler.yaml): krew's Plugin schema,
the name kubectl runs, and a sha256 that matches the archive `hack.krew.package` builds."""

from __future__ import annotations

import hashlib
import io
import re
import stat
import tarfile
import tomllib
from typing import Any

import yaml

from hack.krew.package import MANIFEST, build_archive, render
from tests.datasets import REPO_ROOT
from tests.kubectl_plugin import EXECUTABLE


def committed() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return document


def test_the_manifest_follows_krews_plugin_schema() -> None:
    doc = committed()
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == MANIFEST.stem == "gpu-scheduler"
    spec = doc["spec"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"])
    assert spec["shortDescription"] and spec["description"]
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"] or platform["selector"]["matchLabels"]
        assert platform["uri"].startswith("https://")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] == EXECUTABLE


def test_the_version_is_the_packages() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert committed()["spec"]["version"] == "v" + project["version"]


def test_the_executable_is_what_kubectl_runs_for_gpu_scheduler() -> None:
    """kubectl maps a dash of the command to an underscore of the file name."""
    name = committed()["metadata"]["name"]
    assert "kubectl-" + name.replace("-", "_") == EXECUTABLE
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"][EXECUTABLE] == "scheduler.cli:kubectl_main"


def test_the_sha256_is_the_archives_and_the_manifest_is_rendered_from_the_source() -> None:
    archive, text = render()
    assert MANIFEST.read_text() == text, "run `python -m hack.krew.package` again"
    assert committed()["spec"]["platforms"][0]["sha256"] == hashlib.sha256(archive).hexdigest()
    assert build_archive() == archive  # the same bytes on every build


def test_the_archive_holds_the_executable_launcher() -> None:
    with tarfile.open(fileobj=io.BytesIO(build_archive()), mode="r:gz") as archive:
        (member,) = archive.getmembers()
        assert member.name == EXECUTABLE
        assert member.mode & stat.S_IXUSR
        body = archive.extractfile(member)
        assert body is not None
        script = body.read().decode()
    assert script.startswith("#!/bin/sh\n")
    assert "from scheduler.cli import kubectl_main" in script
