"""The Helm commands of the README and of docs/operations.md ("Install with Helm") work as
written, offline: every line's flags are helm's, the install and upgrade lines render with the
section's values file (as `helm template`), and the refusal the section shows is helm's, word
for word."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from hack.localcluster.helm import Helm
from tests.datasets import REPO_ROOT
from tests.docs import OPERATIONS, section_blocks
from tests.unit.test_chart import chart, helm, one

SECTION = "Install with Helm"
VALUES_FILE = "my-values.yaml"
CLUSTER_ONLY_FLAGS = ("--create-namespace", "--wait", "--reuse-values")
"""Flags of install and upgrade that `helm template` does not take (they need a cluster)."""


def helm_lines() -> list[str]:
    """The helm command lines of the README and of the section, in order."""
    readme = re.findall(r"```sh\n(.*?)```", (REPO_ROOT / "README.md").read_text(), flags=re.S)
    blocks = readme + section_blocks(OPERATIONS.read_text(), SECTION, "sh")
    return [line for b in blocks for line in b.splitlines() if line.startswith("helm ")]


def test_the_docs_show_each_step() -> None:
    steps = {shlex.split(line)[1] for line in helm_lines()}
    assert steps == {"install", "template", "upgrade", "history", "rollback", "uninstall"}


@pytest.mark.parametrize("line", helm_lines())
def test_every_flag_is_helms(line: str, tmp_path: Path) -> None:
    """helm parses the line's flags (`--help` stops it before it does anything)."""
    result = Helm(helm(), None, tmp_path).run(*shlex.split(line)[1:], "--help", check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "line", [line for line in helm_lines() if shlex.split(line)[1] in ("install", "upgrade")]
)
def test_the_install_and_upgrade_lines_render_with_the_sections_values(
    line: str, tmp_path: Path
) -> None:
    [values] = section_blocks(OPERATIONS.read_text(), SECTION, "yaml")
    (tmp_path / VALUES_FILE).write_text(values)
    argv = shlex.split(line)
    release, chart_path = argv[2], argv[3]
    assert (release, chart_path) == ("gpu-scheduler", "charts/gpu-scheduler")
    namespace = argv[argv.index("-n") + 1]
    rest = [a for a in argv[4:] if a not in CLUSTER_ONLY_FLAGS]
    rest = [str(tmp_path / a) if a == VALUES_FILE else a for a in rest]
    objects = chart(tmp_path, None, *rest, namespace=namespace)
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/gpu-scheduler:0.1.0"


def test_the_refusal_shown_is_helms(tmp_path: Path) -> None:
    [shown] = re.findall(r"^```\n(\$ helm template .*?)^```", OPERATIONS.read_text(), re.S | re.M)
    command, *message = shown.strip().splitlines()
    result = Helm(helm(), None, tmp_path).run(*shlex.split(command)[2:], check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == message
