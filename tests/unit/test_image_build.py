"""The offline image build runs the Dockerfile's own steps, keys its cache by what it copies, and
the image checks apply exactly the Deployment's hardening."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.image import build, run
from hack.image.dockerfile import DockerfileError, recipe
from tests.datasets import REPO_ROOT

GOOD = """\
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ENV A=1
COPY pkg pkg
COPY one.txt two.txt ./
RUN true
USER 10001
ENTRYPOINT ["tool"]
"""


class RecordingBuilder(build.Builder):
    """Records every command instead of running it; a push writes its (empty) archive."""

    def __init__(self, layout: build.Layout) -> None:
        super().__init__(layout, log=lambda line: None)
        self.commands: list[list[str]] = []

    def run(self, step: str, argv: Sequence[str]) -> str:
        self.commands.append(list(argv))
        destination = argv[-1]
        if "push" in argv and destination.startswith("oci-archive:"):
            Path(destination.split(":")[1]).write_bytes(b"")
        return ""


def test_the_dockerfile_takes_its_base_image_as_a_build_argument() -> None:
    parsed = build.image_recipe()
    assert parsed.default_base == "python:3.11-slim"
    assert parsed.copy_sources[:2] == ("pyproject.toml", "README.md")
    assert parsed.user == "10001" and parsed.entrypoint == ("gpu-scheduler",)
    assert parsed.env["PYTHONDONTWRITEBYTECODE"] == "1"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (GOOD.replace("FROM ${BASE_IMAGE}", "FROM python:3.11-slim"), "FROM ${BASE_IMAGE}"),
        (GOOD.replace("ARG BASE_IMAGE=python:3.11-slim\n", ""), "ARG BASE_IMAGE"),
        (GOOD.replace('ENTRYPOINT ["tool"]', "ENTRYPOINT tool"), "exec form"),
        (GOOD.replace("USER 10001\n", ""), "USER"),
    ],
)
def test_a_dockerfile_the_offline_build_cannot_follow_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(DockerfileError, match=re.escape(complaint)):
        recipe(text)


def test_continued_lines_are_joined_and_copy_sources_listed() -> None:
    parsed = recipe(GOOD.replace("RUN true", "RUN a \\\n  && b"))
    assert parsed.copy_sources == ("pkg", "one.txt", "two.txt")


def test_the_offline_build_runs_the_dockerfile_on_the_debian_base(tmp_path: Path) -> None:
    builder = RecordingBuilder(build.Layout(tmp_path))
    archive = builder.build("localhost/gpu-scheduler-base:abc", "k1")
    assert archive == tmp_path / "gpu-scheduler-k1.oci.tar" and archive.is_file()
    [bud] = [c for c in builder.commands if "build" in c]
    assert bud[bud.index("--file") + 1] == str(REPO_ROOT / "Dockerfile")
    assert bud[bud.index("--build-arg") + 1] == "BASE_IMAGE=localhost/gpu-scheduler-base:abc"
    assert bud[bud.index("--tag") + 1] == build.IMAGE_NAME
    assert bud[-1] == str(REPO_ROOT)
    assert "--storage-driver" in bud and bud[bud.index("--storage-driver") + 1] == "vfs"
    [push] = [c for c in builder.commands if "push" in c]
    assert push[-1].endswith(f":{build.IMAGE_NAME}") and push[-1].startswith("oci-archive:")


def _context(root: Path) -> Path:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "one.txt").write_text("1")
    (root / "two.txt").write_text("2")
    (root / "other.txt").write_text("not copied")
    (root / "Dockerfile").write_text(GOOD)
    return root


def test_the_image_key_follows_the_copied_files_and_nothing_else(tmp_path: Path) -> None:
    context = _context(tmp_path)
    dockerfile = context / "Dockerfile"

    def key() -> str:
        return build.project_key("base", context, dockerfile)

    first = key()
    (context / "other.txt").write_text("changed, not copied")
    (context / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert key() == first
    (context / "pkg" / "a.py").write_text("A = 2\n")
    second = key()
    assert second != first
    dockerfile.write_text(GOOD.replace("RUN true", "RUN false"))
    assert key() != second
    assert build.project_key("another base", context, dockerfile) != key()


def test_a_missing_copy_source_is_named(tmp_path: Path) -> None:
    context = _context(tmp_path)
    (context / "two.txt").unlink()
    with pytest.raises(build.BuildError, match=r"two\.txt"):
        build.project_key("base", context, context / "Dockerfile")


def test_a_warm_run_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = build.Layout(tmp_path)
    archive = layout.archive(build.project_key(build.base_key()))
    archive.write_bytes(b"")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a warm run must not build")

    monkeypatch.setattr(build.Builder, "run", refuse)
    assert build.image_archive(layout=layout) == archive


def test_the_base_key_follows_the_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    first = build.base_key()
    monkeypatch.setenv(build.MIRROR_ENV, "http://mirror.example/debian")
    assert build.base_key() != first
    assert build.mirrors()[2].startswith("deb http://mirror.example/debian-security ")


def _deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO_ROOT / "manifests" / "deployment.yaml").read_text())
    [deployment] = [d for d in docs if d and d["kind"] == "Deployment"]
    return deployment


def test_the_shipped_deployment_asks_for_every_hardening() -> None:
    rules = run.hardening(_deployment())
    assert rules.run_as_non_root and rules.read_only_root
    assert rules.no_new_privileges and rules.dropped_all_capabilities


def test_the_runtime_spec_applies_the_deployment_hardening(tmp_path: Path) -> None:
    deployment = _deployment()
    pod = deployment["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": "scratch", "emptyDir": {}}]
    pod["containers"][0]["volumeMounts"].append({"name": "scratch", "mountPath": "/var/scratch"})
    caps = ["CAP_KILL"]
    config = {
        "process": {
            "args": ["gpu-scheduler"],
            "user": {"uid": 10001, "gid": 10001},
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": False,
        },
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    }
    bundle = run.Bundle(tmp_path / "rootfs", config)
    result = run.spec(bundle, run.hardening(deployment), ["--version"])
    process = result["process"]
    assert process["args"] == ["gpu-scheduler", "--version"]
    assert process["noNewPrivileges"] is True and not any(process["capabilities"].values())
    assert result["root"] == {"path": str(tmp_path / "rootfs"), "readonly": True}
    # The shipped emptyDir at /tmp, then the one added above.
    assert [m["destination"] for m in result["mounts"]] == ["/proc", "/tmp", "/var/scratch"]
    assert config["process"]["noNewPrivileges"] is False  # the bundle's own is left alone
    config["process"]["user"]["uid"] = 0
    with pytest.raises(run.RunError, match="runAsNonRoot"):
        run.spec(bundle, run.hardening(deployment), [])


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    paths = []
    for age, name in enumerate(["newest.tar", "middle.tar", "old.tar", "oldest"]):
        path = tmp_path / name
        if name == "oldest":
            path.mkdir()
            (path / "file").write_text("x")
        else:
            path.write_text(name)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
        paths.append(path)
    build.prune(paths, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle.tar", "newest.tar"]
