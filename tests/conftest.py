"""Shared pytest set-up: the integration marker and the local control plane fixtures.

Every test under tests/integration/ is marked `integration` and gets the session's real local
cluster (etcd, kube-apiserver with RBAC, kube-controller-manager, kwok, kube-scheduler, Prometheus
and the fake dcgm-exporter). With CI=true a cluster that cannot start fails the run; elsewhere the
integration tests are skipped with the reason, and unit tests still run.

Every test also runs under `no_leaked_tasks`: a test that leaves an asyncio task running that it
created fails (session fixtures' long-lived tasks, created before the test, do not count).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from hack.localcluster import (
    SEED_NODE_TYPES,
    ClusterConfig,
    LocalCluster,
    create_nodes,
    wait_nodes_ready,
)
from tests.kube import make_namespace
from tests.scheduling import TEST_LABEL

INTEGRATION_DIR = Path(__file__).parent / "integration"
IN_CI = os.environ.get("CI", "").lower() == "true"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail the test if a task it created is still pending when it (and every function-scoped
    fixture, torn down before this one) has ended. Runs on the session's event loop: tasks that
    existed before the test, e.g. session fixtures' background tasks, are not counted; a task
    cancelled during teardown gets a few loop iterations to unwind before it counts."""
    before = asyncio.all_tasks()
    yield
    for _ in range(3):
        leaked = _pending_since(before)
        if not leaked:
            return
        await asyncio.sleep(0)
    leaked = _pending_since(before)
    for task in leaked:  # do not let one test's leak fail the tests after it
        task.cancel()
    if leaked:
        await asyncio.wait(leaked, timeout=5)
        names = sorted(f"{t.get_name()}: {t.get_coro()!r}" for t in leaked)
        pytest.fail(f"{len(names)} asyncio task(s) leaked by the test: {names}", pytrace=False)


def _pending_since(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done()}


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """The session's local control plane; its logs stay in `cluster.log_dir` after the run."""
    work_dir = os.environ.get("GPU_SCHEDULER_CLUSTER_DIR")
    local = LocalCluster(ClusterConfig(work_dir=Path(work_dir) if work_dir else None))
    try:
        local.start()
    except Exception as error:  # start() already stopped what it had started
        message = f"local cluster did not start: {error}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    print(f"\nlocal cluster up in {local.started_in_s:.1f} s; logs in {local.log_dir}")
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
async def api_client(cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    """An admin (system:masters) API client for the session's cluster."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(scope="session")
async def core_api(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
async def seed_nodes(core_api: client.CoreV1Api) -> list[str]:
    """One Ready node of each seed type (G1, G2, G2-Expansion)."""
    names = await create_nodes(core_api, SEED_NODE_TYPES)
    await wait_nodes_ready(core_api, names)
    return names


@pytest.fixture
async def namespace(
    core_api: client.CoreV1Api, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A fresh namespace for one test (with its default ServiceAccount), deleted afterwards with
    the nodes the test labelled as its own (`gpu-scheduler.io/test=<namespace>`)."""
    name = await make_namespace(core_api, request.node.name)
    yield name
    await core_api.delete_namespace(name)
    await core_api.delete_collection_node(label_selector=f"{TEST_LABEL}={name}")
