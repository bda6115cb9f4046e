"""The command line ends every error a user can fix with one line on stderr and exit 2 (usage) or
1 (run time), never a traceback; each command prints its own usage."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scheduler.cli import describe_error, main
from scheduler.kube.apierrors import APIError, APINotFoundError, APITransportError
from scheduler.tools.errors import CommandError, kubeconfig_from_env
from tests.datasets import H200_DIR, REPO_ROOT

TOPO = H200_DIR / "nvidia-smi-topo.txt"


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`gpu-scheduler ARGV` in a child process, without KUBECONFIG or an in-cluster environment
    unless `env` adds them."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
        and not k.startswith("GPU_SCHEDULER_")
    }
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *argv],
        env={**base, **(env or {})},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(result: subprocess.CompletedProcess[str], code: int, prefix: str) -> str:
    """The single stderr line of a failed command, after checking its exit code and prefix."""
    lines = result.stderr.splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(prefix + ": "), lines[0]
    return lines[0]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def kubeconfig_to(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_run_with_a_missing_kubeconfig(tmp_path: Path) -> None:
    missing = tmp_path / "absent.kubeconfig"
    line = one_line(cli("run", f"--kubeconfig={missing}"), 2, "gpu-scheduler run")
    assert f"kubeconfig {missing}: no such file" in line and "--kubeconfig FILE" in line


def test_run_outside_a_cluster_without_a_kubeconfig() -> None:
    line = one_line(cli("run", "--no-leader-elect"), 2, "gpu-scheduler run")
    assert "no kubeconfig given and not running inside a cluster" in line


def test_run_does_not_read_kubeconfig_from_the_environment(tmp_path: Path) -> None:
    server = kubeconfig_to(tmp_path, f"https://127.0.0.1:{closed_port()}")
    result = cli("run", "--no-leader-elect", env={"KUBECONFIG": str(server)})
    assert "not running inside a cluster" in one_line(result, 2, "gpu-scheduler run")


def test_run_with_a_kubeconfig_that_is_not_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("clusters: [\n")
    line = one_line(cli("run", f"--kubeconfig={bad}"), 2, "gpu-scheduler run")
    assert f"kubeconfig {bad}:2:1: not valid YAML" in line


def test_explain_with_an_empty_kubeconfig(tmp_path: Path) -> None:
    empty = tmp_path / "empty.kubeconfig"
    empty.write_text("")
    result = cli("explain", "--pod", "ns/p", f"--kubeconfig={empty}")
    line = one_line(result, 2, "gpu-scheduler explain")
    assert f"kubeconfig {empty}: not a kubeconfig with a current-context" in line


def test_explain_outside_a_cluster() -> None:
    line = one_line(cli("explain", "--pod", "ns/p"), 2, "gpu-scheduler explain")
    assert "not running inside a cluster" in line and "KUBECONFIG" in line


def test_explain_reads_kubeconfig_from_the_environment(tmp_path: Path) -> None:
    """KUBECONFIG is honoured by the tools: here it names a server nobody listens on."""
    server = kubeconfig_to(tmp_path, f"https://127.0.0.1:{closed_port()}")
    result = cli("explain", "--pod", "ns/p", env={"KUBECONFIG": str(server)})
    assert "cannot reach the API server" in one_line(result, 1, "gpu-scheduler explain")


def test_topology_patch_without_a_kubeconfig(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    result = cli("topology", "discover", f"--file={TOPO}", "--node=n", "--patch", env={
        "KUBECONFIG": str(missing)
    })  # fmt: skip
    line = one_line(result, 2, "gpu-scheduler topology discover")
    assert f"kubeconfig {missing}: no such file" in line


def test_unknown_flag_prints_the_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--bogus"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("usage: gpu-scheduler run ")
    assert "gpu-scheduler run: error: unrecognized arguments: --bogus" in err


def test_explain_help_lists_only_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    out = capsys.readouterr().out
    assert "--kubeconfig" in out and "--config" in out and "KUBECONFIG" in out
    for daemon_only in ("--metrics-address", "--leader-elect", "--lease-namespace", "--log-level"):
        assert daemon_only not in out


def test_topology_discover_says_what_it_found(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "discover", f"--file={TOPO}"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "gpu-scheduler.io/nvlink-domains=0\n"
    assert captured.err.splitlines()[0] == "1 GPU in 1 NVLink domain: 0"


def test_topology_discover_bad_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\n")
    assert main(["topology", "discover", f"--file={bad}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu-scheduler topology discover: {bad}: ")


def test_describe_error_maps_known_errors_and_leaves_bugs_alone() -> None:
    assert describe_error(CommandError("x", 1)) == ("x", 1)
    message, code = describe_error(APINotFoundError(404, 'pods "p" not found', "NotFound")) or (
        "",
        0,
    )
    assert code == 1 and 'pods "p" not found' in message
    transport = describe_error(APITransportError("connection refused"))
    assert transport is not None and transport[1] == 1 and "cannot reach" in transport[0]
    long = describe_error(APIError(500, "x" * 5000, "Internal"))
    assert long is not None and len(long[0]) <= 400
    assert describe_error(KeyError("bug")) is None


def test_kubeconfig_from_env_takes_the_first_existing_file(tmp_path: Path) -> None:
    present = tmp_path / "b"
    present.write_text("")
    listed = os.pathsep.join([str(tmp_path / "a"), str(present)])
    assert kubeconfig_from_env({"KUBECONFIG": listed}) == present
    assert kubeconfig_from_env({"KUBECONFIG": str(tmp_path / "a")}) == tmp_path / "a"
    assert kubeconfig_from_env({}) is None


def test_topology_patch_to_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    """The API client's own log of the failed write stays out of the output."""
    server = kubeconfig_to(tmp_path, f"https://127.0.0.1:{closed_port()}")
    result = cli("topology", "discover", f"--file={TOPO}", "--node=n", "--patch", env={
        "KUBECONFIG": str(server)
    })  # fmt: skip
    assert result.stdout == "gpu-scheduler.io/nvlink-domains=0\n"
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr
    assert lines[0] == "1 GPU in 1 NVLink domain: 0"
    assert len(lines) == 2 and lines[1].startswith(
        "gpu-scheduler topology discover: cannot reach the API server: "
    ), result.stderr


def test_help_says_which_commands_read_kubeconfig(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "never from KUBECONFIG" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["topology", "discover", "--help"])
    assert "$KUBECONFIG" in capsys.readouterr().out


def test_explain_checks_the_pod_reference_first(capsys: pytest.CaptureFixture[str]) -> None:
    for ref in ("bad", "ns/", "/name"):
        assert main(["explain", "--pod", ref, "--kubeconfig", "/absent"]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line == f"gpu-scheduler explain: --pod must be NAMESPACE/NAME, got {ref!r}"
