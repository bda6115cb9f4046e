"""Where the control plane's binaries are, building them first when they are missing.

The versions are pinned in `hack/versions.env`; `hack/build-binaries.sh` builds them into the cache
folder (`$GPU_SCHEDULER_CACHE`, default `~/.cache/gpu-scheduler`) and is a no-op when they are
there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HACK_DIR = Path(__file__).resolve().parent.parent
VERSIONS_FILE = HACK_DIR / "versions.env"
BUILD_SCRIPT = HACK_DIR / "build-binaries.sh"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable the local cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    prometheus: Path


def run_build_script(flag: str) -> str | None:
    """Run `hack/build-binaries.sh flag` (its output discarded): None when it succeeded, else
    the last 3,000 characters of what it wrote to stderr."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), flag],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return None if result.returncode == 0 else result.stderr[-3000:]


def pinned_versions() -> dict[str, str]:
    """The KEY=VALUE pairs of hack/versions.env."""
    versions: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


def cache_dir() -> Path:
    """The cache folder shared by every clone on this machine."""
    if "GPU_SCHEDULER_CACHE" in os.environ:
        return Path(os.environ["GPU_SCHEDULER_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gpu-scheduler"


def _expected(versions: dict[str, str]) -> Binaries:
    bin_dir = cache_dir() / "bin"
    kubernetes = bin_dir / f"kubernetes-{versions['KUBERNETES_VERSION']}"
    prometheus = shutil.which("prometheus") or "/usr/bin/prometheus"
    return Binaries(
        etcd=bin_dir / f"etcd-{versions['ETCD_VERSION']}" / "etcd",
        kube_apiserver=kubernetes / "kube-apiserver",
        kube_controller_manager=kubernetes / "kube-controller-manager",
        kube_scheduler=kubernetes / "kube-scheduler",
        kubectl=kubernetes / "kubectl",
        kwok=bin_dir / f"kwok-{versions['KWOK_VERSION']}" / "kwok",
        prometheus=Path(prometheus),
    )


def missing(binaries: Binaries) -> list[Path]:
    """The binaries that are not there or not executable."""
    paths: list[Path] = list(vars(binaries).values())
    return [path for path in paths if not os.access(path, os.X_OK)]


def ensure_binaries(build: bool = True) -> Binaries:
    """Return the binaries, running hack/build-binaries.sh first if any Go-built one is missing.

    Raises FileNotFoundError naming what is missing when `build` is False, or when Prometheus is
    not installed (`hack/setup.sh` installs Debian's `prometheus` package).
    """
    binaries = _expected(pinned_versions())
    absent = [path for path in missing(binaries) if path != binaries.prometheus]
    if absent:
        if not build:
            raise FileNotFoundError(f"missing binaries: {', '.join(map(str, absent))}")
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.DEVNULL)
    if not os.access(binaries.prometheus, os.X_OK):
        raise FileNotFoundError(
            f"prometheus not found at {binaries.prometheus}; run hack/setup.sh "
            "(it installs Debian's prometheus package)"
        )
    still = missing(binaries)
    if still:
        raise FileNotFoundError(f"missing binaries after building: {', '.join(map(str, still))}")
    return binaries
