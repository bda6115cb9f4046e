"""hack/build-binaries.sh prints one line per component and keeps go's output in a log file,
shown only when a step fails. Run against a stand-in `go` and a temporary cache: nothing is
downloaded or compiled."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.datasets import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "build-binaries.sh"
FAKE_GO = r"""#!/usr/bin/env bash
# A stand-in for go: chatty on stderr like a cold module cache, creates the requested binaries.
echo "go: downloading example.com/some/module v1.2.3" >&2
echo "go: downloading example.com/other/module v0.4.0" >&2
case "$1" in
  mod)
    if [[ "$2" == download && "${*: -1}" == sigs.k8s.io/kueue@* ]]; then
      dir="$FAKE_GO_DIR/kueue-module"
      mkdir -p "$dir/config/components/crd/bases" "$dir/config/components/webhook"
      touch "$dir/config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"
      touch "$dir/config/components/webhook/manifests.yaml"
      printf '{\n\t"Dir": "%s",\n\t"Hash": "h1:abc"\n}\n' "$dir"
    elif [[ "$2" == download ]]; then
      gomod="$FAKE_GO_DIR/kubernetes.go.mod"
      printf 'replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n)\n' >"$gomod"
      printf '{\n\t"GoMod": "%s",\n\t"Hash": "h1:abc"\n}\n' "$gomod"
    fi ;;
  build)
    [[ "${FAKE_GO_FAIL:-}" == build ]] && { echo "compile error: boom" >&2; exit 1; }
    shift; out=""; targets=()
    while (( $# )); do
      case "$1" in
        -o) out="$2"; shift 2 ;;
        -tags|-ldflags) shift 2 ;;
        -*) shift ;;
        *) targets+=("$1"); shift ;;
      esac
    done
    if [[ "$out" == */ ]]; then
      for t in "${targets[@]}"; do touch "$out${t##*/}"; chmod +x "$out${t##*/}"; done
    else
      touch "$out"; chmod +x "$out"
    fi ;;
  install)
    for target in "$@"; do
      [[ "$target" == *@* ]] || continue
      name="${target%@*}"; name="${name##*/}"
      touch "$GOBIN/$name"; chmod +x "$GOBIN/$name"
    done ;;
esac
"""


def build(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    go = fake_bin / "go"
    go.write_text(FAKE_GO)
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    environment = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "GPU_SCHEDULER_CACHE": str(tmp_path / "cache"),
        "FAKE_GO_DIR": str(tmp_path),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True, timeout=120
    )


def test_one_line_per_component_and_go_output_in_the_log(tmp_path: Path) -> None:
    result = build(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "go: downloading" not in result.stderr
    built = [line for line in result.stderr.splitlines() if " built in " in line]
    assert len(built) == 3, result.stderr
    assert [line.split("] ")[1].split()[0] for line in built] == ["etcd", "kwok", "kubernetes"]
    assert all(line.split(" built in ")[1].split()[1] == "s" for line in built)
    assert "tens of minutes" not in result.stderr
    log = (tmp_path / "cache" / "build" / "build.log").read_text()
    assert "go: downloading example.com/some/module" in log
    assert [line.split("=")[0] for line in result.stdout.splitlines()[-3:]] == [
        "KUBERNETES_BIN",
        "ETCD_BIN",
        "KWOK_BIN",
    ]
    again = build(tmp_path)  # cached now: one line each, no build
    assert again.returncode == 0 and again.stderr.count(": cached in ") == 3


def test_a_failing_step_prints_the_end_of_the_log(tmp_path: Path) -> None:
    result = build(tmp_path, FAKE_GO_FAIL="build")
    assert result.returncode != 0
    assert "etcd v" in result.stderr and "compiling failed; the last lines of" in result.stderr
    assert "compile error: boom" in result.stderr
    assert not list((tmp_path / "cache" / "bin").glob("etcd-*/etcd"))


def test_kueue_built_only_when_asked_with_its_crds_and_webhooks(tmp_path: Path) -> None:
    assert "kueue v" not in build(tmp_path).stderr
    result = build(tmp_path, "--kueue")
    assert result.returncode == 0, result.stderr
    built = [line for line in result.stderr.splitlines() if " built in " in line]
    assert [line.split("] ")[1].split()[0] for line in built] == ["kueue"], result.stderr
    (folder,) = (tmp_path / "cache" / "bin").glob("kueue-*")
    assert (folder / "kueue").is_file()
    assert (folder / "crds" / "kueue.x-k8s.io_workloads.yaml").is_file()
    assert (folder / "webhooks.yaml").is_file()
    assert result.stdout.splitlines()[-1] == f"KUEUE_BIN={folder}"
    again = build(tmp_path, "--kueue")
    assert again.returncode == 0 and "kueue v0" in again.stderr and ": cached in " in again.stderr


def test_celcheck_built_only_when_asked_and_cached_by_its_source(tmp_path: Path) -> None:
    first = build(tmp_path)
    assert "] celcheck " not in first.stderr and "CELCHECK_BIN" not in first.stdout
    result = build(tmp_path, "--celcheck")
    assert result.returncode == 0, result.stderr
    built = [line for line in result.stderr.splitlines() if " built in " in line]
    assert [line.split("] ")[1].split()[0] for line in built] == ["celcheck"], result.stderr
    (folder,) = (tmp_path / "cache" / "bin").glob("celcheck-*")
    assert (folder / "celcheck").is_file()
    assert result.stdout.splitlines()[-1] == f"CELCHECK_BIN={folder}"
    work = tmp_path / "cache" / "build" / folder.name
    assert "require k8s.io/dynamic-resource-allocation v0.37.2" in (work / "go.mod").read_text()
    again = build(tmp_path, "--celcheck")
    assert again.returncode == 0 and again.stderr.count(": cached in ") == 4
