"""Shared pytest set-up: the integration marker and the local control plane fixtures.

Every test under tests/integration/ is marked `integration` and gets the session's real local
cluster (etcd, kube-apiserver with RBAC, kube-controller-manager, kwok, kube-scheduler, Prometheus
and the fake dcgm-exporter). With CI=true a cluster that cannot start fails the run; elsewhere the
integration tests are skipped with the reason, and unit tests still run.

The session's cluster folder (certificates, etcd data, component logs) is announced on the terminal
when the cluster is up, outside pytest's output capture; a temporary folder is removed at the end
when every test passed and kept (and named again in the summary) when one failed.
`GPU_SCHEDULER_CLUSTER_DIR` chooses the folder instead, and then it is always kept.

Every test also runs under `no_leaked_tasks`: a test that leaves an asyncio task running that it
created fails (session fixtures' long-lived tasks, created before the test, do not count).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import NoReturn, Protocol

import pytest
from kubernetes_asyncio import client, config

from hack.localcluster import (
    DRA_NODE_TYPES,
    SEED_NODE_TYPES,
    ClusterConfig,
    LocalCluster,
    create_nodes,
    temporary_nodes,
    wait_nodes_ready,
)
from hack.localcluster.kueue import Kueue
from tests.kube import make_namespace
from tests.scheduling import TEST_LABEL

INTEGRATION_DIR = Path(__file__).parent / "integration"
IN_CI = os.environ.get("CI", "").lower() == "true"
CLUSTER_DIR_ENV = "GPU_SCHEDULER_CLUSTER_DIR"


class _Lines(Protocol):
    def write_line(self, line: str) -> None: ...


def announce(config: pytest.Config, line: str) -> None:
    """Write `line` to the terminal now, past pytest's output capture (which holds fixture output
    until a test fails): capture is suspended while the terminal reporter writes it; without a
    reporter (`-p no:terminal`) it is printed."""
    reporter: _Lines | None = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        print(line)
        return
    with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
        reporter.write_line("")
        reporter.write_line(line)


def finish_cluster_dir(work_dir: Path, chosen: bool, failed: int) -> str:
    """Remove a temporary cluster folder after a session where no test failed; keep it otherwise
    (and always keep a folder the user chose). Returns the line to print about it."""
    if chosen:
        return f"local cluster folder kept (chosen by {CLUSTER_DIR_ENV}): {work_dir}"
    if failed:
        return f"{failed} test(s) failed; local cluster folder and component logs kept: {work_dir}"
    shutil.rmtree(work_dir, ignore_errors=True)
    return f"every test passed; local cluster folder removed: {work_dir}"


def fail_or_skip(message: str) -> NoReturn:
    """A part the tests need is missing: an error with CI=true, a skip with the reason elsewhere."""
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


_SUMMARY: list[str] = []
"""Lines for the end of the run (what happened to the cluster folder)."""


def pytest_terminal_summary(terminalreporter: _Lines) -> None:
    for line in _SUMMARY:
        terminalreporter.write_line(line)


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
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The session's local control plane; its folder is announced when it is up, and removed at
    the end when every test passed (`finish_cluster_dir`)."""
    work_dir = os.environ.get(CLUSTER_DIR_ENV)
    local = LocalCluster(ClusterConfig(work_dir=Path(work_dir) if work_dir else None))
    try:
        local.start()
    except Exception as error:  # start() already stopped what it had started
        message = f"local cluster did not start: {error}; its logs: {local.log_dir}"
        fail_or_skip(message)
    announce(
        request.config,
        f"local cluster up in {local.started_in_s:.1f} s; component logs in {local.log_dir}",
    )
    try:
        yield local
    finally:
        local.stop()
        _SUMMARY.append(
            finish_cluster_dir(local.work_dir, bool(work_dir), request.session.testsfailed)
        )


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
async def dra_nodes(core_api: client.CoreV1Api) -> AsyncIterator[list[str]]:
    """One Ready node of each DRA type (D8: 8 H200 GPUs, D4: 4 H100 GPUs; `DRA_NODE_TYPES`) with
    its ResourceSlice, and the `gpu.nvidia.com` DeviceClass, for one test; deleted afterwards,
    slices and class included (`hack.localcluster.temporary_nodes`). Yields the node names."""
    async with temporary_nodes(core_api, DRA_NODE_TYPES) as names:
        yield names


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "real_node: needs the local cluster's real node (root, containerd, kubelet, kube-proxy); "
        "use the `real_node_cluster` fixture",
    )


@pytest.fixture(scope="module")
def real_node_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A local cluster of its own with a real node beside the kwok nodes (`ClusterConfig(
    real_node=True)`), for the module that asks for it; the session's kwok-only `cluster` is not
    touched. Builds kubelet and kube-proxy first when they are not cached. With CI=true a real
    node that cannot start fails the test; elsewhere it is skipped with the reason."""
    work_dir = os.environ.get(CLUSTER_DIR_ENV)
    folder = Path(work_dir) / "real-node-cluster" if work_dir else None
    local = LocalCluster(ClusterConfig(work_dir=folder, real_node=True))
    try:
        local.start()
    except Exception as error:  # start() already stopped what it had started
        message = f"local cluster with a real node did not start: {error}; logs: {local.log_dir}"
        fail_or_skip(message)
    assert local.real_node is not None
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in local.real_node.timings.items())
    announce(request.config, f"real node up in {local.started_in_s:.1f} s ({steps})")
    try:
        yield local
    finally:
        local.stop()
        _SUMMARY.append(
            finish_cluster_dir(local.work_dir, bool(work_dir), request.session.testsfailed)
        )


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[Kueue]:
    """Kueue (`hack/localcluster/kueue.py`) running against the session's cluster for the module
    that asks for it, built first when it is not cached (`hack/build-binaries.sh --kueue`, a few
    minutes on a new machine). Stopped after the module, its webhook configurations deleted first
    so later tests' Jobs are not refused. With CI=true a Kueue that cannot start fails the test;
    elsewhere it is skipped with the reason."""
    local = Kueue(cluster)
    try:
        local.start()
    except Exception as error:  # start() already undid what it had done
        message = f"Kueue did not start: {error}; its log: {cluster.log_dir / 'kueue.log'}"
        fail_or_skip(message)
    announce(request.config, f"Kueue up; its log: {cluster.log_dir / 'kueue.log'}")
    try:
        yield local
    finally:
        local.stop()
