"""The fault injectors on loopback, without a cluster: the reset proxy, the NaN rewrite, the
workload's seeded sizes and the soak's table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.faults.fake_prom import nan_values
from hack.faults.invariants import Violation
from hack.faults.proxy import ResetProxy, proxied_kubeconfig
from hack.faults.scenarios import Outcome
from hack.faults.soak import table
from hack.faults.workload import ChurnWorkload, WorkloadSpec, churn_pod


async def echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), 5)
    finally:
        writer.close()


async def test_proxy_forwards_bytes_until_resets_are_enabled() -> None:
    server, port = await echo_server()
    async with server, ResetProxy(("127.0.0.1", port), seed=1) as proxy:
        assert await roundtrip(proxy.port, b"hello") == b"hello"
        proxy.resets_enabled = True
        proxy.chunk_reset_probability = 1.0
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(proxy.port, b"again")
        assert proxy.resets == 1
        assert proxy.connections == 2


async def test_proxy_resets_are_bounded() -> None:
    server, port = await echo_server()
    async with server, ResetProxy(("127.0.0.1", port), seed=1, max_resets=1) as proxy:
        proxy.resets_enabled = True
        proxy.chunk_reset_probability = 1.0
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(proxy.port, b"one")
        assert await roundtrip(proxy.port, b"two") == b"two"  # the budget is spent
        assert proxy.resets == 1


async def test_proxy_holds_requests_until_released() -> None:
    server, port = await echo_server()
    async with server, ResetProxy(("127.0.0.1", port), seed=1) as proxy:
        proxy.hold()
        pending = asyncio.create_task(roundtrip(proxy.port, b"held"))
        await asyncio.sleep(0.3)
        assert not pending.done()
        proxy.release()
        assert await asyncio.wait_for(pending, 5) == b"held"


def test_proxied_kubeconfig_points_every_cluster_at_the_proxy(tmp_path: Path) -> None:
    original = tmp_path / "admin.kubeconfig"
    original.write_text(
        yaml.safe_dump({"clusters": [{"name": "local", "cluster": {"server": "https://x:1"}}]})
    )
    copy = proxied_kubeconfig(original, "https://127.0.0.1:2", tmp_path)
    assert yaml.safe_load(copy.read_text())["clusters"][0]["cluster"]["server"] == (
        "https://127.0.0.1:2"
    )
    assert copy.stat().st_mode & 0o777 == 0o600


def test_nan_mode_replaces_instant_and_range_values() -> None:
    body: dict[str, Any] = {
        "status": "success",
        "data": {
            "result": [
                {"metric": {}, "value": [1.0, "3"]},
                {"metric": {}, "values": [[1.0, "3"], [2.0, "4"]]},
            ]
        },
    }
    result = nan_values(body)["data"]["result"]
    assert result[0]["value"] == [1.0, "NaN"]
    assert result[1]["values"] == [[1.0, "NaN"], [2.0, "NaN"]]


def test_workload_sizes_follow_the_seed_and_pods_carry_the_selector() -> None:
    spec = WorkloadSpec("sched", "ns", {"pool": "a"}, seed=7)
    first = ChurnWorkload(None, spec)  # type: ignore[arg-type]  # no API call is made
    second = ChurnWorkload(None, spec)  # type: ignore[arg-type]
    sizes = [first.next_size() for _ in range(50)]
    assert sizes == [second.next_size() for _ in range(50)]
    assert set(sizes) <= {1, 2, 4, 8} and len(set(sizes)) > 2
    pod = churn_pod(spec, "w-00001", 4)
    assert pod["spec"]["schedulerName"] == "sched"
    assert pod["spec"]["nodeSelector"] == {"pool": "a"}
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}


def test_soak_table_counts_violations_by_invariant() -> None:
    broken = Outcome(
        "api connection resets",
        12,
        80,
        [Violation("gpu_shared", "n1", "x"), Violation("gpu_shared", "n2", "y")],
    )
    text = table([("resets", broken, ""), ("gone", None, "TimeoutError: late")])
    lines = text.splitlines()
    assert lines[0].split() == ["fault", "injected", "pods", "violations", "detail"]
    assert lines[2].split()[-5:] == ["12", "80", "2", "gpu_shared", "x2"]
    assert "TimeoutError: late" in lines[3]
