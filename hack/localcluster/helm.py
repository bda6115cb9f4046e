"""Helm, built from its Go module, and the chart `charts/gpu-scheduler` rendered or installed.

    binary = helm_binary()                       # builds it first when it is not cached
    objects = render(binary, "gpu-scheduler", "gpu-scheduler", ["--set", "replicas=1"])
    helm = Helm(binary, cluster.kubeconfig, home=folder)
    helm.run("install", "gpu-scheduler", str(CHART), "-n", "gpu-scheduler", "--create-namespace")

The version is pinned in hack/versions.env (`HELM_VERSION`); `hack/build-binaries.sh --helm`
builds helm.sh/helm/v4's command into the cache outside the repository, only when a test first
needs it (as `--kueue` builds Kueue). `Helm` keeps helm's own folders (its cache, configuration
and data: repositories, plugins, registry logins) in a folder of the caller's, so tests neither
read nor write the user's.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hack.localcluster.binaries import cache_dir, pinned_versions, run_build_script
from hack.localcluster.cluster import REPO_ROOT

CHART = REPO_ROOT / "charts" / "gpu-scheduler"
"""The chart's folder in the repository."""


class HelmError(RuntimeError):
    """Helm could not be built or a helm command failed; the message says which and why."""


def helm_binary(build: bool = True) -> Path:
    """The pinned helm, running `hack/build-binaries.sh --helm` first when it is missing (a cold
    build takes minutes). Raises HelmError when it is still missing."""
    path = cache_dir() / "bin" / f"helm-{pinned_versions()['HELM_VERSION']}" / "helm"
    if not os.access(path, os.X_OK) and build:
        failed = run_build_script("--helm")
        if failed is not None:
            raise HelmError(f"building helm failed:\n{failed}")
    if not os.access(path, os.X_OK):
        raise HelmError(f"helm is not built ({path}); run hack/build-binaries.sh --helm")
    return path


@dataclass(frozen=True)
class Helm:
    """Runs helm against one cluster (`kubeconfig`, None for commands that need none), with
    helm's own folders under `home`."""

    binary: Path
    kubeconfig: Path | None
    home: Path

    def environment(self) -> dict[str, str]:
        """The process environment of a helm command: helm's folders under `home`, the
        kubeconfig, and nothing of the caller's `HELM_*` settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        for variable, folder in (
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ):
            env[variable] = str(self.home / folder)
        env.pop("KUBECONFIG", None)
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`helm ARGS...`, output captured; with `check`, HelmError naming the command and
        helm's message when it fails."""
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.environment(),
            check=False,
        )
        if check and result.returncode != 0:
            raise HelmError(f"helm {' '.join(args[:2])} failed: {result.stderr.strip()}")
        return result


def render(
    binary: Path, release: str, namespace: str, args: list[str], home: Path
) -> list[dict[str, Any]]:
    """`helm template RELEASE CHART -n NAMESPACE ARGS...`: the chart's objects, in helm's
    order. Raises HelmError with helm's message when it refuses (bad values among others)."""
    result = Helm(binary, None, home).run("template", release, str(CHART), "-n", namespace, *args)
    return [o for o in yaml.safe_load_all(result.stdout) if o]
