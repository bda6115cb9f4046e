"""hack/build-binaries.sh --helm: Helm is built from its Go module only when asked, at the version
of hack/versions.env, stamped as Helm's own Makefile stamps a release, and cached. Run against
the stand-in `go` of test_build_binaries_output.py: nothing is downloaded or compiled."""

from __future__ import annotations

from pathlib import Path

from hack.localcluster.binaries import pinned_versions
from tests.unit.test_build_binaries_output import build


def test_helm_built_only_when_asked_stamped_with_its_version_and_cached(tmp_path: Path) -> None:
    first = build(tmp_path)
    assert "] helm " not in first.stderr and "HELM_BIN" not in first.stdout
    result = build(tmp_path, "--helm")
    assert result.returncode == 0, result.stderr
    built = [line for line in result.stderr.splitlines() if " built in " in line]
    assert [line.split("] ")[1].split()[0] for line in built] == ["helm"], result.stderr
    version = pinned_versions()["HELM_VERSION"]
    folder = tmp_path / "cache" / "bin" / f"helm-{version}"
    assert (folder / "helm").is_file()
    assert result.stdout.splitlines()[-1] == f"HELM_BIN={folder}"
    log = (tmp_path / "cache" / "build" / "build.log").read_text()
    assert f"helm.sh/helm/v4/cmd/helm@{version}" in log
    assert f"-X helm.sh/helm/v4/internal/version.version={version}" in log
    again = build(tmp_path, "--helm")
    assert again.returncode == 0 and again.stderr.count(": cached in ") == 4
