"""The API client: from a kubeconfig file, or in a pod from its mounted ServiceAccount."""

from __future__ import annotations

from kubernetes_asyncio import client, config

CONNECTION_POOL_SIZE = 64
"""Connections kept open to the API server (binds, evictions and watches run side by side)."""


async def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    """An API client from a kubeconfig file, or from the pod's service account when None."""
    configuration = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return client.ApiClient(configuration)
