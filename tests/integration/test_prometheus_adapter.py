"""The Prometheus adapter against the session's real Prometheus scraping the fake dcgm-exporter.

One module-wide set-up binds scripted pods to this module's own nodes and waits once for a
full window of samples (about 20 s); every test then reads the same live data.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from hack.localcluster.cluster import free_port
from hack.localcluster.nodes import G2_EXPANSION
from reclaim.prometheus import (
    PodKey,
    PrometheusClient,
    PrometheusUnavailable,
    occupancy_corrections,
)
from reclaim.signals import GpuWindow
from tests.kube import bind, eventually, make_namespace, pod_phase
from tests.scheduling import TEST_LABEL, isolated, make_nodes, our_pod

WINDOW_S = 15
USAGE = "fake-dcgm.gpu-scheduler.io/usage"
GPUS = "gpu-scheduler.io/gpus"
H200_IDLE_W, H200_MAX_W = 118.0, 690.0  # hack/fake_dcgm/power.py, from the H200 trace
MIG_PROFILE = "1g.18gb"
# Pod name -> (GPU annotation, usage annotation). periodic: 100 % for 2 s of every 5 s, so a
# 15 s window holds exactly three periods: 40 %.
WHOLE = {
    "steady": ("1", "constant:util=70"),
    "duty": ("2", "periodic:period=5,duty=0.4,level=100"),
    "share-a": ("3", "constant:util=20"),
    "share-b": ("3", None),
}
MIG_POD = "mig"
TRICKY_NAMES = ['a"b\\c', ".*", "steady|duty", 'x"}) or vector(1) #', "new\nline", "\ufffd"]


@dataclass(frozen=True)
class Scene:
    namespace: str
    node: str
    mig_node: str
    prometheus_url: str


def _whole_pod(namespace: str, name: str, gpus: str, usage: str | None) -> dict[str, Any]:
    annotations = {USAGE: usage} if usage else {}
    return our_pod(namespace, name, 1, annotations={GPUS: gpus, **annotations})


def _mig_pod(namespace: str, name: str) -> dict[str, Any]:
    manifest = our_pod(namespace, name, 0, annotations={USAGE: "constant:util=50"})
    limits = {f"nvidia.com/mig-{MIG_PROFILE}": "1"}
    manifest["spec"]["containers"][0]["resources"]["limits"] = limits
    return manifest


@pytest.fixture(scope="module")
async def scene(cluster: LocalCluster, core_api: client.CoreV1Api) -> AsyncIterator[Scene]:
    assert cluster.prometheus_url is not None
    namespace = await make_namespace(core_api, "test_prometheus_adapter")
    mig_spec = replace(
        G2_EXPANSION,
        type_name="Mig",
        gpus=1,
        nvlink_domains=None,
        mig={MIG_PROFILE: 2},
        annotations={"fake-dcgm.gpu-scheduler.io/profiling": "true"},
    )
    node, mig_node = await make_nodes(
        core_api, [isolated(G2_EXPANSION, namespace), isolated(mig_spec, namespace)]
    )
    try:
        for name, (gpus, usage) in WHOLE.items():
            await core_api.create_namespaced_pod(
                namespace, _whole_pod(namespace, name, gpus, usage)
            )
            await bind(core_api, namespace, name, node)
        await core_api.create_namespaced_pod(namespace, _mig_pod(namespace, MIG_POD))
        await bind(core_api, namespace, MIG_POD, mig_node)

        async def all_running() -> bool:
            phases = [await pod_phase(core_api, namespace, n) for n in [*WHOLE, MIG_POD]]
            return all(phase == "Running" for phase in phases)

        await eventually(all_running, timeout=30, what="scripted pods Running")
        yield Scene(namespace, node, mig_node, cluster.prometheus_url)
    finally:
        await core_api.delete_namespace(namespace)
        await core_api.delete_collection_node(label_selector=f"{TEST_LABEL}={namespace}")


@pytest.fixture(scope="module")
async def full_windows(scene: Scene) -> dict[PodKey, list[GpuWindow]]:
    """The windows once every pod's GPU has a full window of samples in Prometheus."""
    pods = [(scene.namespace, name) for name in [*WHOLE, MIG_POD]]

    async def full() -> dict[PodKey, list[GpuWindow]] | None:
        async with PrometheusClient(scene.prometheus_url) as prometheus:
            windows = await prometheus.usage_windows(pods, WINDOW_S)
        counts = [max(w.util_samples, w.engine_samples) for ws in windows.values() for w in ws]
        complete = all(windows.values()) and min(counts) >= WINDOW_S - 1
        return windows if complete else None

    return await eventually(full, timeout=60, what=f"{WINDOW_S} s of samples for every pod")


def _only(windows: dict[PodKey, list[GpuWindow]], scene: Scene, name: str) -> GpuWindow:
    found = windows[(scene.namespace, name)]
    assert len(found) == 1, found
    return found[0]


def _energy_w(window: GpuWindow) -> float:
    assert window.energy_increase_mj is not None
    return window.energy_increase_mj / 1000 / window.window_s


async def test_usage_windows_measure_the_scripted_usage(
    scene: Scene, full_windows: dict[PodKey, list[GpuWindow]]
) -> None:
    steady = _only(full_windows, scene, "steady")
    assert (steady.gpu, steady.model, steady.mig_instance) == ("1", "NVIDIA H200", None)
    for count in (steady.util_samples, steady.power_samples, steady.energy_samples):
        assert WINDOW_S - 1 <= count <= WINDOW_S + 2
    assert steady.util_mean_pct == pytest.approx(70)
    expected_w = H200_IDLE_W + 0.7 * (H200_MAX_W - H200_IDLE_W)
    assert steady.power_mean_w == pytest.approx(expected_w, rel=0.01)
    # increase() extrapolates to the window's edges by at most half a scrape interval, so a
    # scrape delayed on a loaded machine shortens what it covers: within 15 % on a 15 s window.
    assert _energy_w(steady) == pytest.approx(expected_w, rel=0.15)
    assert steady.sharing_pods == 1

    duty = _only(full_windows, scene, "duty")
    assert duty.gpu == "2"
    assert duty.util_mean_pct is not None and abs(duty.util_mean_pct - 40) <= 15
    assert duty.power_mean_w is not None
    # The counter integrates the real shape; the gauge samples it: both near 40 % of the range.
    assert _energy_w(duty) == pytest.approx(duty.power_mean_w, rel=0.25)
    assert _energy_w(duty) == pytest.approx(
        H200_IDLE_W + 0.4 * (H200_MAX_W - H200_IDLE_W), rel=0.25
    )


async def test_sharing_and_mig_instances(
    scene: Scene, full_windows: dict[PodKey, list[GpuWindow]]
) -> None:
    for name in ("share-a", "share-b"):
        shared = _only(full_windows, scene, name)
        assert (shared.gpu, shared.sharing_pods) == ("3", 2)
        assert shared.util_mean_pct == pytest.approx(20)  # the GPU's usage, for each holder

    mig = _only(full_windows, scene, MIG_POD)
    assert mig.mig_instance is not None
    assert mig.util_samples == 0 and mig.power_samples == 0  # those belong to the whole GPU
    assert mig.engine_samples >= WINDOW_S - 1
    assert mig.engine_mean == pytest.approx(0.5, abs=0.05)

    # Only share-a is a candidate here: share-b still counts, from the holder part of the query.
    async with PrometheusClient(scene.prometheus_url) as prometheus:
        alone = await prometheus.usage_windows([(scene.namespace, "share-a")], WINDOW_S)
    assert [w.sharing_pods for w in alone[(scene.namespace, "share-a")]] == [2]


async def test_gpu_holders_report_the_annotated_indices(
    scene: Scene, full_windows: dict[PodKey, list[GpuWindow]]
) -> None:
    async with PrometheusClient(scene.prometheus_url) as prometheus:
        holders = await prometheus.gpu_holders()
    ours = {key: pods for key, pods in holders.items() if key[0] == scene.node}
    ns = scene.namespace
    assert ours == {
        (scene.node, 1): {(ns, "steady")},
        (scene.node, 2): {(ns, "duty")},
        (scene.node, 3): {(ns, "share-a"), (ns, "share-b")},
    }
    assert not any(node == scene.mig_node for node, _ in holders)  # MIG: not whole GPUs

    recorded = {
        (ns, "steady"): (scene.node, (1,)),
        (ns, "duty"): (scene.node, (0,)),
        (ns, "share-a"): (scene.node, (3,)),
    }
    corrections = occupancy_corrections(ours, recorded)
    assert [(c.pod, c.kind, c.gpus) for c in corrections] == [
        ("duty", "other-gpus", (2,)),
        ("share-b", "unrecorded", (3,)),
    ]


async def test_hostile_names_select_nothing_and_parse(
    scene: Scene, full_windows: dict[PodKey, list[GpuWindow]]
) -> None:
    """Quotes, backslashes, newlines and regex characters in names stay literal: Prometheus
    parses the query and `.*` or `steady|duty` select nothing although such pods exist."""
    pods = [(scene.namespace, name) for name in TRICKY_NAMES]
    pods += [(".*", ".*"), ('"', "steady")]
    async with PrometheusClient(scene.prometheus_url) as prometheus:
        windows = await prometheus.usage_windows(pods, WINDOW_S)
    assert windows == {pod: [] for pod in pods}


async def test_closed_port_is_unavailable() -> None:
    async with PrometheusClient(f"http://127.0.0.1:{free_port()}") as prometheus:
        with pytest.raises(PrometheusUnavailable):
            await prometheus.usage_windows([("ns", "pod")], WINDOW_S)
