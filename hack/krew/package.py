"""Build the krew archive of the kubectl plugin and render its krew manifest.

    python -m hack.krew.package [--uri URL] [--out DIR]

writes DIR/kubectl-gpu_scheduler.tar.gz (the launcher `hack/krew/kubectl-gpu_scheduler`, mode
0755) and DIR/gpu-scheduler.yaml, the manifest for an archive served at URL. The archive is the
same bytes on every run (fixed mtime, owner and gzip header), so the sha256 in the committed
manifest `hack/krew/gpu-scheduler.yaml` is checked against a fresh build
(tests/unit/test_krew_manifest.py). The committed manifest names RELEASE_URI, a placeholder
under the reserved `.invalid` domain: a release serves the archive somewhere and renders the
manifest again with `--uri`.

The manifest follows krew's Plugin schema (apiVersion krew.googlecontainertools.github.com/
v1alpha2): metadata.name `gpu-scheduler` is the manifest's file name and the command
(`kubectl gpu-scheduler`, run from the executable `kubectl-gpu_scheduler`), spec.version the
package's version with a `v`, and one platform for Linux and macOS (the launcher is a shell
script) with the archive's uri, sha256, the file to install and the `bin` to link. The launcher
runs the installed Python package (`pip install gpu-scheduler`), which the caveats say.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LAUNCHER = HERE / "kubectl-gpu_scheduler"
MANIFEST = HERE / "gpu-scheduler.yaml"
ARCHIVE_NAME = "kubectl-gpu_scheduler.tar.gz"
RELEASE_URI = f"https://gpu-scheduler.invalid/releases/{ARCHIVE_NAME}"
"""Placeholder: where a release serves the archive (re-render the manifest with --uri)."""
PLUGIN = "gpu-scheduler"
MTIME = 0
"""Timestamp of the archive's entry and gzip header: the same bytes on every build."""


def package_version() -> str:
    """The project's version from pyproject.toml, with krew's required `v` prefix."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return "v" + str(project["version"])


def build_archive(launcher: Path = LAUNCHER) -> bytes:
    """The tar.gz krew downloads: the launcher alone, mode 0755, owned by root, time 0."""
    body = launcher.read_bytes()
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo(launcher.name)
        info.size, info.mode, info.mtime = len(body), 0o755, MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        archive.addfile(info, io.BytesIO(body))
    return gzip.compress(tar_bytes.getvalue(), mtime=MTIME)


def manifest(uri: str, sha256: str, version: str) -> dict[str, Any]:
    """The krew Plugin manifest for the archive at `uri` with digest `sha256`."""
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "version": version,
            "shortDescription": "Explain GPU pod placement, list idle GPUs, find NVLink domains",
            "description": (
                "The command line of gpu-scheduler, the Kubernetes secondary scheduler for GPU "
                "pods, as kubectl gpu-scheduler: explain (every node's verdict and score for a "
                "pod), idle-report (pods holding idle GPUs and their reclaim policy), topology "
                "discover (a node's NVLink domains from nvidia-smi topo -m). It honours "
                "kubectl's --kubeconfig, --context, -n and -o.\n"
            ),
            "caveats": (
                "The plugin runs the gpu-scheduler Python package (Python 3.11 or later):\n"
                "  pip install gpu-scheduler\n"
                "Set GPU_SCHEDULER_PYTHON to the interpreter that has it (default: python3).\n"
            ),
            "platforms": [
                {
                    "selector": {
                        "matchExpressions": [
                            {"key": "os", "operator": "In", "values": ["linux", "darwin"]}
                        ]
                    },
                    "uri": uri,
                    "sha256": sha256,
                    "files": [{"from": LAUNCHER.name, "to": "."}],
                    "bin": LAUNCHER.name,
                }
            ],
        },
    }


class _BlockDumper(yaml.SafeDumper):
    """Writes strings with line breaks as `|` blocks, as krew's manifests are written."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _string)


def render(uri: str = RELEASE_URI) -> tuple[bytes, str]:
    """(the archive, the manifest's YAML text) for an archive served at `uri`."""
    archive = build_archive()
    digest = hashlib.sha256(archive).hexdigest()
    text = yaml.dump(
        manifest(uri, digest, package_version()), Dumper=_BlockDumper, sort_keys=False, width=100
    )
    header = "# Rendered by `python -m hack.krew.package`; do not edit by hand.\n"
    return archive, header + text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.krew.package", description=__doc__)
    parser.add_argument("--uri", default=RELEASE_URI, help="where the archive is served")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write both files to")
    args = parser.parse_args(argv)
    archive, text = render(args.uri)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / ARCHIVE_NAME).write_bytes(archive)
    (args.out / MANIFEST.name).write_text(text)
    print(f"wrote {args.out / ARCHIVE_NAME} and {args.out / MANIFEST.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
