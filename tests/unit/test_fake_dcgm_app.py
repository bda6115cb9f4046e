"""The fake dcgm-exporter served over HTTP: in-process with a static view, and as a process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from hack.fake_dcgm.__main__ import parse_args
from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.holders import Json
from hack.fake_dcgm.server import Options, running
from hack.fake_dcgm.source import ApiSource, SourceError, StaticSource, View, refresh_once
from tests.datasets import H200_TRACE_CSV
from tests.unit.test_fake_dcgm_builders import USAGE, node, pod

REPO = Path(__file__).resolve().parents[2]

TRACE_CSV = H200_TRACE_CSV


async def _get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers["Content-Type"], await response.text()


async def test_metrics_served_in_process_from_a_static_view() -> None:
    source = StaticSource(
        [node("g-0", gpus=2), node("cpu", gpus=2, fake=False)],
        [pod("train", annotations={USAGE: "trace:phase=steady_training"})],
    )
    options = Options(kubeconfig=None, port=0, trace=TRACE_CSV, refresh_s=0.05, tick_s=0.02)
    async with running(options, source) as endpoint:
        for _ in range(100):
            status, _, _ = await _get(f"{endpoint.url}/healthz")
            if status == 200:
                break
            await asyncio.sleep(0.02)
        assert status == 200
        await asyncio.sleep(0.1)
        status, content_type, body = await _get(f"{endpoint.url}/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    lines = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(lines) == 2  # only the kwok fake node's two GPUs
    assert 'gpu="0"' in lines[0] and 'pod="train"' in lines[0] and 'Hostname="g-0"' in lines[0]
    assert lines[0].endswith((" 100", " 99"))  # steady_training rows read 99 or 100 %
    energy = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY")]
    assert all(float(line.rsplit(" ", 1)[1]) > 0 for line in energy)


class FlakySource:
    """Serves one good view, then fails."""

    def __init__(self, nodes: Sequence[Json], pods: Sequence[Json]) -> None:
        self.calls = 0
        self.view = View(nodes, pods)

    async def fetch(self) -> View:
        self.calls += 1
        if self.calls > 1:
            raise SourceError("listing nodes: HTTP 503")
        return self.view


async def test_source_errors_keep_the_last_good_view() -> None:
    exporter = Exporter()
    source = FlakySource([node(gpus=1)], [pod("p", annotations={USAGE: "constant:util=x"})])
    with capture_logs() as logs:
        assert await refresh_once(source, exporter, lambda: 1e9)
        assert not await refresh_once(source, exporter, lambda: 1e9 + 1)
    assert [g.key for g in exporter.fleet.gpus] == [("g-0", 0)]
    assert [entry["event"] for entry in logs] == ["view_problem", "refresh_failed"]
    assert "util='x' is not a number" in logs[0]["problem"]
    assert logs[1]["error"] == "listing nodes: HTTP 503"


def test_command_line() -> None:
    options = parse_args(
        ["--kubeconfig", "/k", "--listen", "127.0.0.1:0", "--profiling", "--tick-seconds", "0.05"]
    )
    assert (options.kubeconfig, options.host, options.port) == (Path("/k"), "127.0.0.1", 0)
    assert options.profiling and options.tick_s == 0.05 and options.refresh_s == 1.0
    assert options.trace is None
    assert parse_args(["--kubeconfig=/k", "--listen=[::1]:9400"]).host == "::1"
    for bad in (["--listen", "nowhere"], ["--kubeconfig", "/k", "--refresh-seconds", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


async def _exporter_process(*args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hack.fake_dcgm",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_process_logs_json_survives_an_unreachable_api_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    process = await _exporter_process(f"--kubeconfig={kubeconfig}", "--listen=127.0.0.1:0")
    assert process.stderr is not None
    try:
        listening = await asyncio.wait_for(process.stderr.readline(), timeout=20)
        assert b'"event": "listening"' in listening, listening
        url = listening.split(b'"url": "')[1].split(b'"')[0].decode()
        failed = await asyncio.wait_for(process.stderr.readline(), timeout=20)
        assert b'"event": "refresh_failed"' in failed, failed
        status, _, body = await _get(f"{url}/healthz")
        assert (status, body) == (503, "waiting for the first refresh\n")
        status, _, body = await _get(f"{url}/metrics")
        assert status == 200 and "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in body
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=20)
    assert code == 0


async def test_process_exits_1_on_a_missing_trace(tmp_path: Path) -> None:
    process = await _exporter_process(
        f"--kubeconfig={tmp_path / 'k'}", f"--trace={tmp_path / 'absent.csv'}"
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode == 1
    assert b'"event": "bad_trace"' in stderr


async def test_api_source_lists_raw_json_and_turns_failures_into_source_errors() -> None:
    state = {"status": 200}

    async def nodes(request: web.Request) -> web.Response:
        return web.json_response({"items": [node("g-0")]}, status=state["status"])

    async def pods(request: web.Request) -> web.Response:
        return web.json_response({"items": [pod("p")]})

    api = web.Application()
    api.router.add_get("/api/v1/nodes", nodes)
    api.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(api)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
        async with client.ApiClient(configuration) as api_client:
            source = ApiSource(api_client)
            view = await source.fetch()
            assert view.nodes == [node("g-0")]
            assert [p["metadata"]["name"] for p in view.pods] == ["p"]
            assert view.claims == [] and view.slices == []  # resource.k8s.io not served: 404
            state["status"] = 500
            with pytest.raises(SourceError, match="listing nodes: HTTP 500"):
                await source.fetch()
    finally:
        await runner.cleanup()
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    async with client.ApiClient(configuration) as api_client:
        with pytest.raises(SourceError, match="listing nodes: "):
            await ApiSource(api_client).fetch()
