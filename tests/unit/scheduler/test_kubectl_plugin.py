"""The kubectl plugin: kubectl's flags translated onto the subcommands (pure), and the plugin as
the pinned kubectl discovers and runs it (`kubectl gpu-scheduler` -> `kubectl-gpu_scheduler`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.localcluster.nodes import G1, G2_EXPANSION, node_manifest
from scheduler.cli import kubectl_main
from scheduler.tools.errors import CommandError
from scheduler.tools.kubectl_flags import (
    Environment,
    context_namespace,
    default_kubeconfig,
    split_flags,
    translate,
)
from tests.kubectl_plugin import EXECUTABLE, pinned_kubectl, plugin_dir, with_plugin_on_path

KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "a",
    "contexts": [
        {"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
        {"name": "b", "context": {"cluster": "c", "user": "u"}},
    ],
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "x"}}],
}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    return path


def where(tmp_path: Path, **env: str) -> Environment:
    return Environment(env, tmp_path / "home", lambda path: yaml.safe_load(path.read_text()))


def test_a_positional_pod_gets_the_namespace_flag(tmp_path: Path, kubeconfig: Path) -> None:
    argv = ["explain", "p", "-n", "team-b", "--kubeconfig", str(kubeconfig)]
    assert translate(argv, where(tmp_path)) == [
        "explain",
        "--pod",
        "team-b/p",
        "--kubeconfig",
        str(kubeconfig),
    ]


def test_without_n_the_namespace_is_the_contexts(tmp_path: Path, kubeconfig: Path) -> None:
    env = where(tmp_path, KUBECONFIG=str(kubeconfig))
    assert translate(["explain", "p"], env)[:3] == ["explain", "--pod", "team-a/p"]
    with_b = translate(["explain", "--context", "b", "--pod", "p"], env)
    assert with_b == [
        "explain",
        "--pod",
        "default/p",
        "--kubeconfig",
        str(kubeconfig),
        "--context",
        "b",
    ]


@pytest.mark.parametrize(
    ("argv", "pod"),
    [
        (["explain", "--pod", "p"], "team-a/p"),
        (["explain", "--pod=p"], "team-a/p"),
        (["explain", "--pod", "ns/p"], "ns/p"),
        (["explain", "ns/p"], "ns/p"),
        (["explain", "--pod-group", "g"], "team-a/g"),
    ],
)
def test_pod_references_are_qualified(
    tmp_path: Path, kubeconfig: Path, argv: list[str], pod: str
) -> None:
    out = translate(argv, where(tmp_path, KUBECONFIG=str(kubeconfig)))
    assert out[2] == pod


@pytest.mark.parametrize(
    "flags",
    [["-o", "yaml"], ["-oyaml"], ["-o=yaml"], ["--output", "yaml"], ["--output=yaml"]],
)
def test_output_in_every_spelling(tmp_path: Path, flags: list[str]) -> None:
    out = translate(["idle-report", *flags], where(tmp_path))
    assert out == ["idle-report", "--output", "yaml"]


def test_offline_explain_keeps_its_files(tmp_path: Path) -> None:
    argv = ["explain", "--pod-file", "pod.yaml", "--cluster", "dump.yaml", "-o", "wide"]
    assert translate(argv, where(tmp_path)) == [
        "explain",
        "--pod-file",
        "pod.yaml",
        "--cluster",
        "dump.yaml",
        "--output",
        "wide",
    ]


def test_idle_report_namespace_and_all_namespaces(tmp_path: Path) -> None:
    env = where(tmp_path)
    assert translate(["idle-report", "-n", "ml"], env) == ["idle-report", "--namespace", "ml"]
    assert translate(["idle-report", "-A"], env) == ["idle-report"]
    assert translate(["idle-report", "-n", "ml", "-A"], env) == ["idle-report"]


def test_topology_gets_the_kubeconfig_and_context(tmp_path: Path, kubeconfig: Path) -> None:
    argv = ["topology", "discover", "--node", "n", "--patch", "--context", "b"]
    out = translate(argv, where(tmp_path, KUBECONFIG=str(kubeconfig)))
    assert out == [*argv[:-2], "--kubeconfig", str(kubeconfig), "--context", "b"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "p", "-o", "xml"], "-o 'xml': not a known output format"),
        (["explain", "p", "-n"], "flag -n needs a value"),
        (["explain", "p", "--context="], "flag --context= needs a value"),
        (["topology", "discover", "-n", "x"], "topology takes no -n"),
        (["topology", "discover", "-o", "json"], "topology takes no -o"),
        (["version", "--context", "a"], "version takes no --kubeconfig/--context"),
        (["explain", "p", "-A"], "explain takes no -A"),
    ],
)
def test_flags_a_command_cannot_use_are_refused(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match="^" + message.replace("(", r"\(")):
        translate(argv, where(tmp_path))


def test_the_kubeconfig_is_found_where_kubectl_looks(tmp_path: Path, kubeconfig: Path) -> None:
    home = tmp_path / "home"
    assert default_kubeconfig(None, {}, home) is None
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    assert default_kubeconfig(None, {}, home) == home / ".kube" / "config"
    assert default_kubeconfig(None, {"KUBECONFIG": str(kubeconfig)}, home) == kubeconfig
    assert default_kubeconfig("x.yaml", {"KUBECONFIG": str(kubeconfig)}, home) == Path("x.yaml")


def test_context_namespace() -> None:
    assert context_namespace(KUBECONFIG, None) == "team-a"
    assert context_namespace(KUBECONFIG, "b") == "default"
    assert context_namespace(KUBECONFIG, "absent") == "default"
    assert context_namespace("not a mapping", None) == "default"


def test_split_flags_leaves_everything_after_a_double_dash() -> None:
    found = split_flags(["explain", "-n", "a", "--", "-n", "b"])
    assert (found.namespace, found.rest) == ("a", ["explain", "--", "-n", "b"])


def test_usage_without_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main([]) == 2
    assert capsys.readouterr().err.startswith("usage: kubectl gpu-scheduler COMMAND")
    assert kubectl_main(["--help"]) == 0
    assert "-n, --namespace NS" in capsys.readouterr().out


def test_a_bad_flag_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["explain", "p", "-o", "xml"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kubectl gpu-scheduler: -o 'xml': not a known output format")


# -- through the real kubectl ------------------------------------------------------------------

KUBECTL = pinned_kubectl()
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="the pinned kubectl is not built (make binaries)"
)


def kubectl(bin_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [str(KUBECTL), *argv],
        env=with_plugin_on_path(bin_dir),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def offline_files(folder: Path, gpus: int) -> tuple[Path, Path]:
    cluster = folder / "cluster.yaml"
    items = [node_manifest(G1, "g1-0"), node_manifest(G2_EXPANSION, "g2-expansion-0")]
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod = folder / "pod.yaml"
    limits = {"nvidia.com/gpu": str(gpus)}
    pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "big", "namespace": "ml"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
            }
        )
    )
    return pod, cluster


@needs_kubectl
def test_kubectl_lists_the_plugin(tmp_path: Path) -> None:
    bin_dir = plugin_dir(tmp_path)
    result = kubectl(bin_dir, "plugin", "list")
    assert str(bin_dir / EXECUTABLE) in result.stdout, result.stdout + result.stderr


@needs_kubectl
def test_kubectl_runs_explain_through_the_plugin(tmp_path: Path) -> None:
    bin_dir = plugin_dir(tmp_path)
    pod, cluster = offline_files(tmp_path, 16)
    result = kubectl(
        bin_dir, "gpu-scheduler", "explain", "--pod-file", str(pod), "--cluster", str(cluster)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith("and the largest node has 8."), result.stdout
    as_yaml = kubectl(
        bin_dir,
        "gpu-scheduler",
        "explain",
        "--pod-file",
        str(pod),
        "--cluster",
        str(cluster),
        "-oyaml",
    )
    assert [row["node"] for row in yaml.safe_load(as_yaml.stdout)] == ["g1-0", "g2-expansion-0"]


@needs_kubectl
def test_kubectl_explain_pod_reaches_for_the_api_server_of_the_context(
    tmp_path: Path, kubeconfig: Path
) -> None:
    """`kubectl gpu-scheduler explain --pod ns/name`: the plugin reads the kubeconfig kubectl
    would and asks its API server (here nothing listens, so the answer is the one-line error)."""
    bin_dir = plugin_dir(tmp_path)
    result = kubectl(
        bin_dir, "gpu-scheduler", "explain", "--pod", "ns/name", "--kubeconfig", str(kubeconfig)
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("kubectl gpu-scheduler explain: cannot reach the API server: "), line
    assert "127.0.0.1:1" in line
    missing = kubectl(
        bin_dir, "gpu-scheduler", "explain", "p", "--kubeconfig", str(kubeconfig), "--context", "z"
    )
    assert missing.returncode == 2
    assert "no context 'z' (it has: a, b)" in missing.stderr
