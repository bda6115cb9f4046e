"""The process's TLS read buffer (`scheduler.kube.client.limit_tls_read_buffer`): the API client
sets it, and TLS still carries bodies far larger than the buffer, and many requests at once,
intact."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from scheduler.admission.certs import self_signed
from scheduler.kube.client import TLS_READ_BUFFER, api_client_for, limit_tls_read_buffer

BODY = bytes(range(256)) * 4096  # 1 MiB, 32 times the buffer


@pytest.fixture
def default_buffer() -> Iterator[None]:
    saved = asyncio.sslproto.SSLProtocol.max_size
    try:
        yield
    finally:
        asyncio.sslproto.SSLProtocol.max_size = saved


async def test_the_api_client_limits_the_buffer(default_buffer: None, tmp_path: Path) -> None:
    asyncio.sslproto.SSLProtocol.max_size = 256 * 1024
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    api = await api_client_for(str(kubeconfig))
    await api.close()
    assert asyncio.sslproto.SSLProtocol.max_size == TLS_READ_BUFFER < 256 * 1024


async def test_large_and_concurrent_bodies_arrive_whole(
    default_buffer: None, tmp_path: Path
) -> None:
    limit_tls_read_buffer()
    files = self_signed(["127.0.0.1"], tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(files.cert, files.key)
    uploads: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        uploads.append(body)
        return web.Response(body=BODY + body)

    app = web.Application(client_max_size=4 * len(BODY))
    app.router.add_post("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = runner.addresses[0][1]
    client_context = ssl.create_default_context(cafile=str(files.cert))
    try:
        connector = aiohttp.TCPConnector(limit=16, ssl=client_context)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(index: int) -> bytes:
                async with session.post(f"https://127.0.0.1:{port}/", data=BODY[:index]) as r:
                    return await r.read()

            answers = await asyncio.gather(*(post(i * 20000) for i in range(40)))
    finally:
        await runner.cleanup()
    assert [answer == BODY + BODY[: i * 20000] for i, answer in enumerate(answers)] == [True] * 40
    assert sorted(map(len, uploads)) == [i * 20000 for i in range(40)]
