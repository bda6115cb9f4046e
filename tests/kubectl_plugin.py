"""The kubectl plugin as kubectl finds it, for the tests: a folder to put on PATH holding
`kubectl-gpu_scheduler`, and the pinned kubectl that hack/build-binaries.sh builds.

`plugin_dir` writes the executable that pip's console script would be, from the entry point
pyproject.toml declares (`[project.scripts] kubectl-gpu_scheduler = "module:function"`), run by
this interpreter with the repository on its import path: the tests need no reinstall of the
package to see a change of the entry."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from hack.localcluster.binaries import cache_dir, pinned_versions
from tests.datasets import REPO_ROOT

EXECUTABLE = "kubectl-gpu_scheduler"


def entry_point() -> tuple[str, str]:
    """(module, function) of the plugin's console script in pyproject.toml."""
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = str(scripts[EXECUTABLE]).partition(":")
    return module, function


def plugin_dir(folder: Path) -> Path:
    """`folder`/bin with an executable `kubectl-gpu_scheduler` running the declared entry."""
    module, function = entry_point()
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / EXECUTABLE
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        f"from {module} import {function}\n"
        f"sys.exit({function}())\n"
    )
    script.chmod(0o755)
    return bin_dir


def with_plugin_on_path(bin_dir: Path) -> dict[str, str]:
    """The environment with `bin_dir` first on PATH (and the interpreter's own bin after it)."""
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {**os.environ, "PATH": path}


def pinned_kubectl() -> Path | None:
    """The kubectl hack/build-binaries.sh builds for the pinned Kubernetes version, if built."""
    version = pinned_versions()["KUBERNETES_VERSION"]
    kubectl = cache_dir() / "bin" / f"kubernetes-{version}" / "kubectl"
    return kubectl if os.access(kubectl, os.X_OK) else None
