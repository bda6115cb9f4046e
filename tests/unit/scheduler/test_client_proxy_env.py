"""The API client's session reads the proxy environment once: it trusts the environment (which
costs aiohttp two worker-thread hops per request) only when a proxy applies to the API server."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from scheduler.kube.client import FencedApiClient, env_proxy_applies

PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")
HOST = "https://127.0.0.1:6443"


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def trusts_env() -> bool:
    api = FencedApiClient(client.Configuration(host=HOST))
    try:
        return bool(api.rest_client.pool_manager.trust_env)
    finally:
        await api.close()


async def test_without_a_proxy_the_session_does_not_read_the_environment_per_request() -> None:
    assert not env_proxy_applies(HOST)
    assert await trusts_env() is False


async def test_a_proxy_for_the_api_server_keeps_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert env_proxy_applies(HOST)
    assert await trusts_env() is True


async def test_no_proxy_for_the_api_server_host_drops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert not env_proxy_applies(HOST)
    assert await trusts_env() is False
    assert env_proxy_applies("https://api.cluster.example:6443")
