"""/metrics served like kube-scheduler's secure port, on the real API server with RBAC on: the
daemon runs with the manifests' RBAC (its ServiceAccount's token) and `metricsServing.secure`,
as a follower (another holder keeps the Lease, so its write fence is closed: the reviews must
pass it). Over HTTPS with a certificate given in `certFile`/`keyFile`: no token and a token the
API server does not know get 401, a ServiceAccount token without the metrics-reader role 403, a
token bound to the role from manifests/metrics-reader.yaml 200; the probes' paths need no token;
plain HTTP is refused. Tokens come from the TokenRequest API."""

from __future__ import annotations

import ssl
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from scheduler.admission.certs import self_signed
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.kube import eventually
from tests.scheduling import running_daemon, settings_for

LEASE = "gpu-scheduler"


def reader_role(namespace: str) -> Any:
    """manifests/metrics-reader.yaml's ClusterRole, named after the test."""
    [role] = yaml.safe_load_all((REPO_ROOT / "manifests" / "metrics-reader.yaml").read_text())
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    role["metadata"]["name"] = f"{namespace}-metrics-reader"
    return role


async def token_of(core: client.CoreV1Api, namespace: str, account: str) -> str:
    body: Any = {"metadata": {"name": account}}
    await core.create_namespaced_service_account(namespace, body)
    request: Any = {"spec": {"expirationSeconds": 3600}}
    answer = await core.create_namespaced_service_account_token(account, namespace, request)
    return str(answer.status.token)


async def held_by_another(api: client.ApiClient, namespace: str) -> None:
    """The Lease, held by someone else for an hour: the daemon stays a follower."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body: Any = {
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {
            "holderIdentity": "another-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    }
    await client.CoordinationV1Api(api).create_namespaced_lease(namespace, body)


async def test_metrics_refuses_anonymous_and_unauthorized_readers(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = reader_role(namespace)
    binding: Any = {
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
    }
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    await rbac.create_cluster_role(role)
    await rbac.create_cluster_role_binding(binding)
    try:
        scraper = await token_of(core_api, namespace, "scraper")
        stranger = await token_of(core_api, namespace, "stranger")
        await held_by_another(api_client, namespace)
        files = self_signed(["127.0.0.1"], tmp_path)
        settings = settings_for(
            namespace,
            metricsServing={
                "secure": True,
                "certFile": str(files.cert),
                "keyFile": str(files.key),
            },
            leaderElection={"enabled": True, "leaseName": LEASE, "leaseNamespace": namespace},
        )
        trust = ssl.create_default_context(cafile=str(files.cert))
        async with (
            running_daemon(cluster, settings, kubeconfig) as daemon,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as http,
        ):
            assert not daemon.elector.is_leader
            base = f"https://127.0.0.1:{daemon.http_port}"

            async def get(path: str, token: str | None = None) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with http.get(f"{base}{path}", headers=headers) as response:
                    return response.status, await response.text()

            async def scraped() -> str | None:  # RBAC's informers see the binding soon
                code, body = await get("/metrics", scraper)
                return body if code == 200 else None

            started = time.perf_counter()
            body = await eventually(scraped, timeout=30, what="the scraper's token reads /metrics")
            first = time.perf_counter() - started
            assert 'gpu_scheduler_leader{identity="' in body and '"} 0.0' in body
            started = time.perf_counter()
            assert (await get("/metrics", scraper))[0] == 200  # cached answers
            cached = time.perf_counter() - started
            print(f"\nfirst authorized scrape {first * 1000:.1f} ms, cached {cached * 1000:.1f} ms")

            assert (await get("/metrics"))[0] == 401
            assert (await get("/metrics", "not-a-token"))[0] == 401
            code, text = await get("/metrics", stranger)
            assert code == 403
            assert f"system:serviceaccount:{namespace}:stranger" in text
            assert (await get("/metrics", scraper))[0] == 200
            for probe in ("/healthz", "/readyz", "/livez"):
                assert (await get(probe))[0] == 200, probe
            assert not daemon.elector.is_leader  # reviews went out through the closed fence
            async with aiohttp.ClientSession() as plain:
                try:
                    async with plain.get(f"http://127.0.0.1:{daemon.http_port}/healthz") as r:
                        refused = r.status >= 400
                except aiohttp.ClientError:
                    refused = True
                assert refused
    finally:
        await rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        await rbac.delete_cluster_role(role["metadata"]["name"])
