"""Build the gpu-scheduler image offline: no container registry, no Docker daemon.

Two cached steps, each keyed by a hash of its inputs under `<cache>/image/` (`cache_dir()` of
`hack.localcluster.binaries`: `$GPU_SCHEDULER_CACHE`, default `~/.cache/gpu-scheduler`):

1. the base: a minimal Debian bookworm root filesystem with python3 and pip, made by `mmdebstrap`
   from Debian's packages (`base-<key>.tar`, keyed by suite, mirrors, packages and hooks), and
   imported into a private buildah store (vfs driver) as `localhost/gpu-scheduler-base:<key>`;
2. the image: the repository's Dockerfile run by `buildah build` (chroot isolation, no daemon)
   with `--build-arg BASE_IMAGE=` that base, so it performs exactly the Dockerfile's steps, pushed
   to an OCI archive `gpu-scheduler-<key>.oci.tar` named `IMAGE_NAME` (keyed by the base, the
   Dockerfile, .dockerignore and every file its COPY steps take).

A warm run (nothing changed) only hashes the inputs. `ctr -n k8s.io images import <archive>`
accepts the archive and names the image `IMAGE_NAME`. Needs root, and Debian's `mmdebstrap` and
`buildah` (`hack/setup.sh` installs them). Command line: `python -m hack.image [--rebuild]` prints
the archive's path on stdout and one line per step on stderr.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hack.image.dockerfile import BASE_IMAGE_ARG, Recipe, read_recipe
from hack.localcluster.binaries import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"

IMAGE_NAME = "gpu-scheduler.local/gpu-scheduler:dev"
"""The name the image carries in its archive and, once imported, in containerd."""
BASE_NAME = "localhost/gpu-scheduler-base"
SUITE = "bookworm"
MIRROR_ENV = "GPU_SCHEDULER_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-pip", "ca-certificates", "passwd")
"""What the Dockerfile's steps and the daemon need: Python, pip for `pip install .`, useradd, and
the CA bundle. Recommends are not installed."""
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
"""The image configuration the official Python image has and a bare root filesystem lacks."""
BASE_HOOKS = (
    # pip may install into the system Python: the image is that program's own environment.
    '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    # Documentation and package lists are of no use in the image.
    '--customize-hook=rm -rf "$1"/usr/share/doc "$1"/usr/share/man "$1"/var/lib/apt/lists/*',
)
RECIPE_VERSION = "1"
"""Bump to rebuild every cached base and image after changing how they are made here."""
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The host's CA bundle, bound over the image's own while the Dockerfile's RUN steps run (and
never stored in the image), so `pip install` trusts what the host trusts (a proxy's CA, say)."""
IGNORED_PARTS = ("__pycache__",)
IGNORED_SUFFIXES = (".pyc",)
"""Never hashed (and never copied: .dockerignore lists them too)."""

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(f"[image {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class BuildError(RuntimeError):
    """A build step failed; the message names the step and ends with its output's last lines."""


@dataclass(frozen=True)
class Layout:
    """Where the image build keeps its files."""

    root: Path

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def runroot(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    def base_tar(self, key: str) -> Path:
        return self.root / f"base-{key}.tar"

    def archive(self, key: str) -> Path:
        return self.root / f"gpu-scheduler-{key}.oci.tar"


def default_layout() -> Layout:
    """The layout under the shared cache folder."""
    return Layout(cache_dir() / "image")


def mirrors() -> tuple[str, ...]:
    """The apt sources lines mmdebstrap uses (`$GPU_SCHEDULER_DEBIAN_MIRROR` moves the mirror)."""
    mirror = os.environ.get(MIRROR_ENV, DEFAULT_MIRROR).rstrip("/")
    return (
        f"deb {mirror} {SUITE} main",
        f"deb {mirror} {SUITE}-updates main",
        f"deb {mirror}-security {SUITE}-security main",
    )


def base_key() -> str:
    """The base's cache key: a hash of everything that decides what mmdebstrap makes."""
    inputs = {
        "suite": SUITE,
        "mirrors": mirrors(),
        "packages": BASE_PACKAGES,
        "hooks": BASE_HOOKS,
        "env": BASE_ENV,
        "recipe": RECIPE_VERSION,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def context_files(context: Path, sources: Sequence[str]) -> list[Path]:
    """Every file the COPY `sources` take from `context`, sorted, bytecode caches left out."""
    files: set[Path] = set()
    for source in sources:
        path = context / source
        if path.is_file():
            files.add(path)
        elif path.is_dir():
            files.update(p for p in path.rglob("*") if p.is_file())
        else:
            raise BuildError(f"COPY source {source!r} of the Dockerfile is not in {context}")
    return sorted(
        p
        for p in files
        if not any(part in IGNORED_PARTS for part in p.relative_to(context).parts)
        and not p.name.endswith(IGNORED_SUFFIXES)
    )


def project_key(base: str, context: Path = REPO_ROOT, dockerfile: Path = DOCKERFILE) -> str:
    """The image's cache key: the base key, the Dockerfile, .dockerignore and every copied file
    (path, executable bit and content)."""
    digest = hashlib.sha256()
    digest.update(f"{RECIPE_VERSION}\0{base}\0".encode())
    ignore = context / ".dockerignore"
    for path in (dockerfile, ignore):
        digest.update(path.read_bytes() if path.is_file() else b"")
        digest.update(b"\0")
    for path in context_files(context, read_recipe(dockerfile).copy_sources):
        digest.update(str(path.relative_to(context)).encode())
        digest.update(b"\1" if os.access(path, os.X_OK) else b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


KEEP = 3
"""Cached archives (and unpacked bundles) of each kind kept: the newest, for a few trees."""


def prune(paths: Iterable[Path], keep: int = KEEP) -> None:
    """Remove all but the `keep` most recently changed of `paths` (files or folders)."""
    for old in sorted(paths, key=lambda p: p.stat().st_mtime, reverse=True)[keep:]:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


class Builder:
    """Runs the build's commands, their output appended to `layout.log`."""

    def __init__(self, layout: Layout, log: Log = _stderr) -> None:
        self.layout = layout
        self.say = log

    def run(self, step: str, argv: Sequence[str]) -> str:
        """Run `argv`; its stdout is returned, both streams go to the log. Raises `BuildError`
        naming `step`, with the last lines of the log, when it fails."""
        with self.layout.log.open("a") as log:
            log.write(f"\n$ {' '.join(argv)}\n")
            log.flush()
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
            log.write(done.stdout)
        if done.returncode != 0:
            tail = self.layout.log.read_text(errors="replace").splitlines()[-25:]
            raise BuildError(
                f"{step} failed (exit {done.returncode}); the end of {self.layout.log}:\n"
                + "\n".join(tail)
            )
        return done.stdout

    def buildah(self, step: str, *args: str) -> str:
        """`buildah` on the private vfs store under the layout."""
        return self.run(
            step,
            [
                "buildah",
                "--root",
                str(self.layout.storage),
                "--runroot",
                str(self.layout.runroot),
                "--storage-driver",
                "vfs",
                *args,
            ],
        )

    def has_image(self, name: str) -> bool:
        try:
            self.buildah("look-up", "inspect", "--type", "image", name)
        except BuildError:
            return False
        return True

    def ensure_base(self, key: str) -> str:
        """The base image's name in the store, making the root filesystem and importing it first
        when they are missing."""
        name = f"{BASE_NAME}:{key}"
        tar = self.layout.base_tar(key)
        if not tar.is_file():
            started = time.monotonic()
            self.say(f"making the base root filesystem ({SUITE}: {', '.join(BASE_PACKAGES)})")
            partial = tar.with_suffix(".partial")
            self.run(
                "mmdebstrap",
                [
                    "mmdebstrap",
                    "--variant=minbase",
                    '--aptopt=APT::Install-Recommends "false"',
                    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
                    f"--include={','.join(BASE_PACKAGES)}",
                    *BASE_HOOKS,
                    "--format=tar",
                    SUITE,
                    str(partial),
                    *mirrors(),
                ],
            )
            partial.replace(tar)
            prune(self.layout.root.glob("base-*.tar"))
            self.say(f"base root filesystem made in {time.monotonic() - started:.0f} s")
        if not self.has_image(name):
            started = time.monotonic()
            container = self.buildah("buildah from", "from", "scratch").strip()
            self.buildah("buildah add", "add", container, str(tar), "/")
            env = [arg for pair in BASE_ENV for arg in ("--env", pair)]
            self.buildah("buildah config", "config", *env, "--cmd", "python3", container)
            self.buildah("buildah commit", "commit", "--rm", container, name)
            self.say(f"base imported into the build store in {time.monotonic() - started:.0f} s")
        return name

    def build(self, base: str, key: str) -> Path:
        """Run the Dockerfile on `base` and write the OCI archive of `key`."""
        archive = self.layout.archive(key)
        started = time.monotonic()
        self.say(f"building {IMAGE_NAME} from the Dockerfile on {base}")
        self.buildah("buildah rm", "rm", "--all")
        trust = f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"
        self.buildah(
            "buildah build",
            "build",
            "--isolation",
            "chroot",
            "--pull=never",
            "--format=oci",
            *(("--volume", trust) if HOST_CA_BUNDLE.is_file() else ()),
            "--build-arg",
            f"{BASE_IMAGE_ARG}={base}",
            "--file",
            str(DOCKERFILE),
            "--tag",
            IMAGE_NAME,
            str(REPO_ROOT),
        )
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        self.buildah("buildah push", "push", IMAGE_NAME, f"oci-archive:{partial}:{IMAGE_NAME}")
        self.buildah("buildah rmi", "rmi", IMAGE_NAME)
        partial.replace(archive)
        prune(self.layout.root.glob("gpu-scheduler-*.oci.tar"))
        self.say(f"image built in {time.monotonic() - started:.0f} s: {archive}")
        return archive


@contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    """Hold the build's lock: two builds on one machine take turns."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with (layout.root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def image_archive(rebuild: bool = False, log: Log = _stderr, layout: Layout | None = None) -> Path:
    """The path of the OCI archive of the current tree's image, building what is missing first
    (or everything, with `rebuild`). Raises `BuildError` naming the failed step."""
    layout = layout or default_layout()
    base = base_key()
    key = project_key(base)
    with _locked(layout):
        if rebuild:
            layout.base_tar(base).unlink(missing_ok=True)
            layout.archive(key).unlink(missing_ok=True)
        archive = layout.archive(key)
        if archive.is_file():
            archive.touch()  # in use: the last to be pruned
            return archive
        layout.log.write_text("")  # the log holds the last build only
        builder = Builder(layout, log)
        if rebuild:
            builder.buildah("buildah rmi", "rmi", "--all", "--force")
        return builder.build(builder.ensure_base(base), key)


def image_recipe() -> Recipe:
    """The repository Dockerfile's recipe (user, entrypoint, ...), for the image checks."""
    return read_recipe(DOCKERFILE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.image",
        description=f"Build {IMAGE_NAME} offline (mmdebstrap + buildah) and print the path of "
        "its OCI archive; `ctr -n k8s.io images import PATH` loads it.",
    )
    parser.add_argument("--rebuild", action="store_true", help="ignore the cache")
    args = parser.parse_args(argv)
    try:
        path = image_archive(rebuild=args.rebuild)
    except BuildError as error:
        print(f"python -m hack.image: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0
