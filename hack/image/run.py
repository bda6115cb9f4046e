"""Run the built image's entrypoint as the Deployment would, with runc and no daemon.

`unpack` turns the OCI archive into a runtime bundle once (umoci; cached beside the archive, the
image's user, environment, working folder and entrypoint in its `config.json`). `hardening` reads
the container's securityContext and emptyDir mounts from a Deployment; `spec` applies them to the
bundle's configuration: non-root user, read-only root filesystem, no new privileges, no
capabilities, a tmpfs at every emptyDir path. `run` runs one command in that container;
`writable_overlay` gives a root whose writes land in a separate folder, to see what was written.
Needs root, Debian's `runc` and `umoci`.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack.image.build import IMAGE_NAME, KEEP, prune

CONTAINER = "gpu-scheduler"
"""The container's name in the Deployment."""


class RunError(RuntimeError):
    """The runtime could not unpack or run the image; the message says which step."""


@dataclass(frozen=True)
class Bundle:
    """An unpacked image: the root filesystem and the runtime configuration umoci derived from
    the image's configuration."""

    rootfs: Path
    config: dict[str, Any]


@dataclass(frozen=True)
class Hardening:
    """What a Deployment's container asks of its runtime."""

    run_as_non_root: bool
    read_only_root: bool
    no_new_privileges: bool
    dropped_all_capabilities: bool
    empty_dirs: tuple[str, ...]
    """Mount paths of the container's emptyDir volumes."""
    run_as_user: int | None = None


def unpack(archive: Path) -> Bundle:
    """The bundle of `archive` (an OCI archive of `IMAGE_NAME`), unpacked into
    `<archive folder>/bundle-<archive stem>/` unless it is there already."""
    bundle = archive.parent / f"bundle-{archive.name.removesuffix('.oci.tar')}"
    if not (bundle / "config.json").is_file():
        prune(archive.parent.glob("bundle-*"), keep=KEEP - 1)
        with tempfile.TemporaryDirectory(dir=archive.parent) as work:
            layout = Path(work) / "layout"
            with tarfile.open(archive) as tar:
                tar.extractall(layout, filter="tar")
            partial = Path(work) / "bundle"
            done = subprocess.run(
                ["umoci", "unpack", "--image", f"{layout}:{IMAGE_NAME}", str(partial)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RunError(f"umoci unpack {archive} failed: {done.stderr.strip()[-2000:]}")
            partial.rename(bundle)
    bundle.touch()  # the newest, whichever tree unpacked it first
    return Bundle(bundle / "rootfs", json.loads((bundle / "config.json").read_text()))


def hardening(deployment: Mapping[str, Any], container: str = CONTAINER) -> Hardening:
    """The hardening the Deployment `deployment` (a parsed manifest) asks for `container`.
    Raises `KeyError` naming the container when it is not in the Deployment."""
    pod = deployment["spec"]["template"]["spec"]
    matches = [c for c in pod["containers"] if c["name"] == container]
    if not matches:
        raise KeyError(f"no container {container!r} in Deployment {deployment['metadata']['name']}")
    spec = matches[0]
    context = {**pod.get("securityContext", {}), **spec.get("securityContext", {})}
    empty = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    mounts = tuple(m["mountPath"] for m in spec.get("volumeMounts", []) if m["name"] in empty)
    return Hardening(
        run_as_non_root=bool(context.get("runAsNonRoot")),
        read_only_root=bool(context.get("readOnlyRootFilesystem")),
        no_new_privileges=context.get("allowPrivilegeEscalation") is False,
        dropped_all_capabilities="ALL" in context.get("capabilities", {}).get("drop", []),
        empty_dirs=mounts,
        run_as_user=context.get("runAsUser"),
    )


def spec(
    bundle: Bundle,
    rules: Hardening,
    args: Sequence[str],
    command: Sequence[str] | None = None,
    root: Path | None = None,
) -> dict[str, Any]:
    """The runtime configuration for running the image under `rules` as a pod would: `command`
    (default: the image's entrypoint; the image has no CMD) followed by `args`. `root` replaces
    the bundle's root filesystem (an overlay, say). Raises `RunError` when `rules` ask for a
    non-root user and the image's user is root."""
    config = copy.deepcopy(bundle.config)
    process = config["process"]
    process["args"] = [*(process["args"] if command is None else command), *args]
    process["terminal"] = False
    if rules.run_as_user is not None:
        process["user"]["uid"] = rules.run_as_user
    if rules.run_as_non_root and process["user"]["uid"] == 0:
        raise RunError("runAsNonRoot is set but the image runs as root")
    process["noNewPrivileges"] = rules.no_new_privileges
    if rules.dropped_all_capabilities:
        process["capabilities"] = {key: [] for key in process.get("capabilities", {})}
    config["root"] = {"path": str(root or bundle.rootfs), "readonly": rules.read_only_root}
    config["mounts"] = [m for m in config["mounts"] if m["destination"] not in rules.empty_dirs]
    config["mounts"] += [
        {"destination": path, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}
        for path in rules.empty_dirs
    ]
    return config


def run(config: Mapping[str, Any], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run the container `config` describes with runc (its own state folder), wait for it and
    return its exit code and output. Raises `RunError` when it outlives `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="gpu-scheduler-image-") as work:
        (Path(work) / "config.json").write_text(json.dumps(config))
        name = f"gpu-scheduler-check-{uuid.uuid4().hex[:8]}"
        state = str(Path(work) / "state")
        argv = ["runc", "--root", state, "run", "--bundle", work, name]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            subprocess.run(["runc", "--root", state, "delete", "--force", name], check=False)
            raise RunError(f"{' '.join(config['process']['args'])} ran past {timeout} s") from error


@dataclass
class Started:
    """A container running in the background: runc's process and the file of its output."""

    process: subprocess.Popen[bytes]
    output: Path
    kept: str | None = None
    """The whole output, kept when the container is stopped and its folder removed."""

    def text(self) -> str:
        """The output so far (stdout and stderr interleaved)."""
        return self.kept if self.kept is not None else self.output.read_text(errors="replace")


@contextmanager
def started(config: Mapping[str, Any], stop_timeout: float = 30.0) -> Iterator[Started]:
    """Start the container `config` describes with runc in the background, its output going to a
    file; afterwards a container still running gets SIGTERM (runc passes it on), then, after
    `stop_timeout` seconds, SIGKILL."""
    with tempfile.TemporaryDirectory(prefix="gpu-scheduler-image-") as work:
        (Path(work) / "config.json").write_text(json.dumps(config))
        name = f"gpu-scheduler-check-{uuid.uuid4().hex[:8]}"
        state = str(Path(work) / "state")
        output = Path(work) / "output.log"
        argv = ["runc", "--root", state, "run", "--bundle", work, name]
        with output.open("wb") as sink:
            process = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        container = Started(process, output)
        try:
            yield container
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(stop_timeout)
                except subprocess.TimeoutExpired:
                    subprocess.run(["runc", "--root", state, "kill", name, "KILL"], check=False)
                    process.wait(stop_timeout)
            subprocess.run(["runc", "--root", state, "delete", "--force", name], check=False)
            container.kept = output.read_text(errors="replace")


@contextmanager
def writable_overlay(rootfs: Path) -> Iterator[tuple[Path, Path]]:
    """A writable overlay over `rootfs`: yields (merged root, upper folder); every file the
    container creates or changes appears in the upper folder, and `rootfs` stays as it was."""
    with tempfile.TemporaryDirectory(prefix="gpu-scheduler-overlay-") as work:
        upper, scratch, merged = (Path(work) / part for part in ("upper", "work", "merged"))
        for folder in (upper, scratch, merged):
            folder.mkdir()
        options = f"lowerdir={rootfs},upperdir={upper},workdir={scratch}"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RunError(f"mounting an overlay on {rootfs} failed: {done.stderr.strip()}")
        try:
            yield merged, upper
        finally:
            subprocess.run(["umount", str(merged)], check=False)
