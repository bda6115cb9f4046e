"""The informer against a real API server: sync, paging, resumed watches, relist on 410, backoff."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from hack.localcluster.cluster import free_port
from scheduler.kube.informer import Informer, InformerOptions, KubeObject, object_key
from tests.kube import eventually

LABEL = "informer-test=yes"


class Recorder:
    """An InformerHandler that records (operation, key, data["v"]) in call order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    @staticmethod
    def _value(obj: KubeObject) -> str | None:
        data = obj.get("data") or {}
        return data.get("v")

    def on_add(self, obj: KubeObject) -> None:
        self.calls.append(("add", object_key(obj), self._value(obj)))

    def on_update(self, old: KubeObject, new: KubeObject) -> None:
        assert object_key(old) == object_key(new)
        self.calls.append(("update", object_key(new), self._value(new)))

    def on_delete(self, obj: KubeObject) -> None:
        self.calls.append(("delete", object_key(obj), self._value(obj)))

    def keys(self, operation: str) -> set[str]:
        return {key for op, key, _ in self.calls if op == operation}


class CallCounter:
    """Wraps a list function and counts list and watch calls."""

    def __init__(self, list_fn: Callable[..., Awaitable[Any]]) -> None:
        self._list_fn = list_fn
        self.lists = 0
        self.watches = 0

    async def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            self.watches += 1
        else:
            self.lists += 1
        return await self._list_fn(**kwargs)


@contextlib.asynccontextmanager
async def running(informer: Informer, sync: bool = True) -> AsyncIterator[asyncio.Task[None]]:
    """Run the informer in a task (waiting for its first sync) and cancel it afterwards."""
    task = asyncio.create_task(informer.run())
    try:
        if sync:
            await asyncio.wait_for(informer.synced.wait(), 30)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=timeout, what=what)


def config_map(name: str, value: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"informer-test": "yes"}},
        "data": {"v": value},
    }


async def test_initial_sync_then_changes_in_order(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    for name in ("a", "b", "c"):
        await core_api.create_namespaced_config_map(namespace, config_map(name, "1"))
    recorder = Recorder()
    informer = Informer(
        "configmaps",
        functools.partial(core_api.list_namespaced_config_map, namespace),
        recorder,
        InformerOptions(label_selector=LABEL),
    )
    async with running(informer):
        assert recorder.calls == [("add", f"{namespace}/{n}", "1") for n in ("a", "b", "c")]
        assert len(informer) == 3
        listed = informer.get(f"{namespace}/a")
        assert listed is not None
        assert (listed["kind"], listed["apiVersion"]) == ("ConfigMap", "v1")

        await core_api.create_namespaced_config_map(namespace, config_map("d", "1"))
        await core_api.patch_namespaced_config_map("a", namespace, {"data": {"v": "2"}})
        await core_api.delete_namespaced_config_map("b", namespace)
        await until(lambda: len(recorder.calls) >= 6, "three watch events")
        assert recorder.calls[3:] == [
            ("add", f"{namespace}/d", "1"),
            ("update", f"{namespace}/a", "2"),
            ("delete", f"{namespace}/b", "1"),
        ]
        assert sorted(obj["metadata"]["name"] for obj in informer.list()) == ["a", "c", "d"]
        updated = informer.get(f"{namespace}/a")
        assert updated is not None and updated["data"] == {"v": "2"}
        assert informer.get(f"{namespace}/b") is None
        assert int(informer.resource_version or 0) > int(updated["metadata"]["resourceVersion"])
        assert (informer.relists, informer.reconnects) == (0, 0)


async def test_initial_list_is_paged(core_api: client.CoreV1Api, namespace: str) -> None:
    for index in range(10):
        await core_api.create_namespaced_config_map(namespace, config_map(f"cm-{index}", "1"))
    recorder = Recorder()
    counter = CallCounter(functools.partial(core_api.list_namespaced_config_map, namespace))
    informer = Informer(
        "configmaps", counter, recorder, InformerOptions(label_selector=LABEL, page_size=3)
    )
    async with running(informer):
        assert counter.lists == 4  # 3 + 3 + 3 + 1
        assert recorder.keys("add") == {f"{namespace}/cm-{i}" for i in range(10)}
        assert len(recorder.calls) == 10


async def test_watch_resumes_after_timeout_without_relisting(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    recorder = Recorder()
    counter = CallCounter(functools.partial(core_api.list_namespaced_config_map, namespace))
    informer = Informer(
        "configmaps",
        counter,
        recorder,
        InformerOptions(label_selector=LABEL, watch_timeout_seconds=1),
    )
    async with running(informer):
        for index in range(4):
            await core_api.create_namespaced_config_map(namespace, config_map(f"cm-{index}", "1"))
            watches = counter.watches
            await until(lambda w=watches: counter.watches > w, "the watch ended and restarted")
        await core_api.delete_namespaced_config_map("cm-0", namespace)
        await until(lambda: f"{namespace}/cm-0" in recorder.keys("delete"), "the deletion")
        assert counter.watches >= 5
        assert counter.lists == 1
        assert informer.relists == 0
        assert [call[:2] for call in recorder.calls] == [
            *[("add", f"{namespace}/cm-{i}") for i in range(4)],
            ("delete", f"{namespace}/cm-0"),
        ]


def event(name: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "any", "namespace": namespace},
        "reason": "Test",
        "message": "informer test",
    }


async def compact_etcd(etcd_url: str) -> None:
    """Compact etcd's history up to its current revision (as the API server does periodically)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{etcd_url}/v3/kv/range", json={"key": "AA=="}) as response:
            revision = int((await response.json())["header"]["revision"])
        async with session.post(
            f"{etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
        ) as response:
            assert response.status == 200, await response.text()


async def test_relist_after_410_reports_what_changed_in_the_gap(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    # Events have no watch cache in kube-apiserver, so a watch from a version etcd has compacted
    # away is answered with 410 Gone.
    for name in ("kept", "doomed"):
        await core_api.create_namespaced_event(namespace, event(name, namespace))
    recorder = Recorder()
    counter = CallCounter(functools.partial(core_api.list_namespaced_event, namespace))
    informer = Informer("events", counter, recorder)
    async with running(informer):
        assert recorder.keys("add") == {f"{namespace}/kept", f"{namespace}/doomed"}
    stale_version = informer.resource_version

    await core_api.delete_namespaced_event("doomed", namespace)
    for name in ("new", "newer"):
        await core_api.create_namespaced_event(namespace, event(name, namespace))
    await compact_etcd(cluster.etcd_url)

    async with running(informer, sync=False):
        await until(lambda: informer.relists == 1, "a relist")
        assert counter.lists == 2
        assert recorder.calls[2:] == [
            ("delete", f"{namespace}/doomed", None),
            ("add", f"{namespace}/new", None),
            ("add", f"{namespace}/newer", None),
        ]
        assert informer.resource_version != stale_version
        assert sorted(obj["metadata"]["name"] for obj in informer.list()) == [
            "kept",
            "new",
            "newer",
        ]
        # Watching goes on from the relisted version.
        await core_api.delete_namespaced_event("kept", namespace)
        await until(lambda: f"{namespace}/kept" in recorder.keys("delete"), "deletion of kept")
        assert informer.relists == 1


async def test_unreachable_api_server_is_retried_with_backoff() -> None:
    configuration = client.Configuration(host=f"https://127.0.0.1:{free_port()}")
    configuration.verify_ssl = False
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(seconds)

    async with client.ApiClient(configuration) as api:
        informer = Informer(
            "nodes",
            client.CoreV1Api(api).list_node,
            Recorder(),
            InformerOptions(backoff_initial=0.05, backoff_max=0.2),
            sleep=sleep,
        )
        async with running(informer, sync=False) as task:
            await until(lambda: informer.reconnects >= 5, "five reconnects", timeout=10)
            assert not task.done()
            assert not informer.synced.is_set()
    assert delays[:5] == [0.05, 0.1, 0.2, 0.2, 0.2]


async def test_failed_watch_is_retried_from_the_last_version_without_relisting(
    core_api: client.CoreV1Api, namespace: str
) -> None:
    list_fn = functools.partial(core_api.list_namespaced_config_map, namespace)
    failures = 0

    async def flaky(**kwargs: Any) -> Any:
        nonlocal failures
        if kwargs.get("watch") and failures < 2:
            failures += 1
            raise aiohttp.ClientConnectionError("connection reset (injected)")
        return await list_fn(**kwargs)

    recorder = Recorder()
    informer = Informer(
        "configmaps", flaky, recorder, InformerOptions(label_selector=LABEL, backoff_initial=0.05)
    )
    async with running(informer):
        await core_api.create_namespaced_config_map(namespace, config_map("late", "1"))
        await until(lambda: f"{namespace}/late" in recorder.keys("add"), "the add after retries")
        assert (informer.reconnects, informer.relists) == (2, 0)
