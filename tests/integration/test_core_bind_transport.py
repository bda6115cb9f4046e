"""A Binding whose connection is cut: the scheduler forgets the pod, retries it, and binds it,
with no GPU index given out twice (real API server, through a proxy that cuts one request).

The scheduler talks to the API server through `CuttingProxy`, a small HTTP proxy on 127.0.0.1
that forwards every request with the admin's credentials and closes the client's connection
without an answer on the first POST of a pod's binding. aiohttp reports that as
`ServerDisconnectedError`, which is not an OSError.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client, config

from hack.localcluster import G2_EXPANSION, LocalCluster
from scheduler.state.cache import ClusterCache
from tests.kube import eventually
from tests.scheduling import (
    gpus_of,
    isolated,
    make_nodes,
    our_pod,
    pod_events,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

FORWARDED_REQUEST_HEADERS = ("Accept", "Content-Type", "User-Agent")
FORWARDED_RESPONSE_HEADERS = ("Content-Type",)


class CuttingProxy:
    """Forwards requests to the API server; cuts the first binding POST (`forward_first`:
    after the API server has bound the pod, else before it sees the request)."""

    def __init__(self, upstream: str, tls: ssl.SSLContext, forward_first: bool) -> None:
        self.upstream = upstream.rstrip("/")
        self.tls = tls
        self.forward_first = forward_first
        self.cut: list[str] = []
        self.session: aiohttp.ClientSession | None = None
        self.handlers: set[asyncio.Task[object]] = set()

    async def close(self) -> None:
        """End every request still streaming (watches), then the upstream connections."""
        for task in self.handlers:
            task.cancel()
        if self.handlers:
            await asyncio.wait(self.handlers)
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            return await self._forward(request)
        finally:
            self.handlers.discard(task)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        cutting = request.method == "POST" and request.path.endswith("/binding") and not self.cut
        if cutting:
            # Recorded before forwarding: once the API server has bound the pod, the test may
            # see it bound before this request's connection is closed.
            self.cut.append(request.path)
        if cutting and not self.forward_first:
            return self._cut(request)
        headers = {k: request.headers[k] for k in FORWARDED_REQUEST_HEADERS if k in request.headers}
        async with self.session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            ssl=self.tls,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        ) as upstream:
            if cutting:
                await upstream.read()  # the API server bound the pod; the answer is lost
                return self._cut(request)
            response = web.StreamResponse(status=upstream.status)
            for key in FORWARDED_RESPONSE_HEADERS:
                if key in upstream.headers:
                    response.headers[key] = upstream.headers[key]
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientConnectionError):
                pass  # the scheduler closed a watch
            return response

    def _cut(self, request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=500)  # never reaches the client: the connection is closed


@asynccontextmanager
async def cutting_proxy(
    cluster: LocalCluster, work_dir: Path, forward_first: bool
) -> AsyncIterator[tuple[CuttingProxy, Path]]:
    """The proxy, and a kubeconfig that points at it."""
    admin = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=admin)
    tls = ssl.create_default_context(cafile=admin.ssl_ca_cert)
    tls.load_cert_chain(admin.cert_file, admin.key_file)
    proxy = CuttingProxy(admin.host, tls, forward_first)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    kubeconfig = work_dir / "proxied.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "proxy", "cluster": {"server": f"http://{host}:{port}"}}],
                "users": [{"name": "proxy", "user": {}}],
                "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
                "current-context": "proxy",
            }
        )
    )
    proxy.session = aiohttp.ClientSession()
    try:
        yield proxy, kubeconfig
    finally:
        await proxy.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    "forward_first",
    [
        pytest.param(False, id="cut-before-the-api-server"),
        pytest.param(True, id="cut-after-the-api-server-bound"),
    ],
)
async def test_binding_cut_by_a_lost_connection_is_retried_and_bound(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    forward_first: bool,
) -> None:
    [node] = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])  # 8 GPUs
    async with (
        cutting_proxy(cluster, tmp_path, forward_first) as (proxy, kubeconfig),
        running_daemon(cluster, settings_for(namespace), kubeconfig) as daemon,
    ):
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, "first", gpus=4))
        first = await wait_bound(core_api, namespace, "first", timeout=60)
        assert proxy.cut == [f"/api/v1/namespaces/{namespace}/pods/first/binding"]
        await core_api.create_namespaced_pod(namespace, our_pod(namespace, "second", gpus=4))
        second = await wait_bound(core_api, namespace, "second", timeout=60)

        assert first["spec"]["nodeName"] == second["spec"]["nodeName"] == node
        assert len(gpus_of(first)) == len(gpus_of(second)) == 4
        assert not set(gpus_of(first)) & set(gpus_of(second)), "a GPU index was given twice"

        async def running() -> bool:
            phases = [
                (await pod_json(core_api, namespace, name))["status"].get("phase")
                for name in ("first", "second")
            ]
            return phases == ["Running", "Running"]

        await eventually(running, timeout=60, what="both pods Running")
        await eventually(
            lambda: _confirmed(daemon.cache, f"{namespace}/first", f"{namespace}/second"),
            timeout=30,
            what="both pods confirmed in the cache",
        )
        assert daemon.cache.overcommitted_gpus() == {}
        assert sorted(daemon.cache.gpus_of(f"{namespace}/first")) == sorted(gpus_of(first))

    if not forward_first:  # the scheduler saw the failure and said so on the pod

        async def bind_failure_reported() -> bool:
            events = await pod_events(api_client, namespace, "first")
            return any(
                e["reason"] == "FailedScheduling" and "Binding rejected" in e.get("note", "")
                for e in events
            )

        await eventually(bind_failure_reported, timeout=30, what="FailedScheduling event")


async def _confirmed(cache: ClusterCache, *keys: str) -> bool:
    return all(key in cache.pods and not cache.is_assumed(key) for key in keys)
