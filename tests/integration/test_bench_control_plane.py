"""The control-plane benchmark at a trivial size: every run binds every pod and reports every key.

No timing is asserted; `python -m hack.bench.control_plane` is the measurement.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from kubernetes_asyncio import client

from hack.bench.control_plane import side_by_side
from hack.bench.control_plane_model import node_specs, pod_sizes
from hack.bench.control_plane_report import ratios
from hack.localcluster import LocalCluster
from tests.bench_runs import isolated_run
from tests.scheduling import TEST_LABEL, make_nodes

PODS = 20
MIX = (0.5, 0.5, 0.0, 0.0)
"""1- and 2-GPU pods only: 20 of them ask for at most 40 of the 56 GPUs of 12 nodes, so a 2-GPU
pod always finds a node whatever the placement before it (12 nodes with 1 free GPU are 12 < 16)."""


async def test_side_by_side_binds_every_pod_and_reports_every_key(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    specs = node_specs(12, prefix=f"n{suffix}-", labels={TEST_LABEL: namespace})
    await make_nodes(core_api, specs)
    options = isolated_run(
        namespace,
        "bench",
        pods=PODS,
        mix=MIX,
        settle_s=5.0,
    )

    results = await side_by_side(cluster, api_client, specs, options)

    assert [r.run for r in results] == ["ceiling", "gpu-scheduler", "kube-scheduler"]
    assert {r.mode for r in results} == {"burst"}
    sizes = pod_sizes(PODS, options.seed, MIX)
    for result in results:
        assert (result.bound, result.pending) == (PODS, 0), result
        assert result.gpus_bound == sum(sizes)
        assert result.nodes == 12
        assert result.pods_per_s > 0 and 0 < result.p50_ms <= result.p99_ms
        assert result.apiserver_cpu_s_per_1000_pods is not None, result.run
        assert result.apiserver_cpu_s_per_1000_pods > 0, result.run
    ceiling, ours, theirs = results
    assert ceiling.cpu_s is None and ceiling.one_domain_pct is None
    for result in (ours, theirs):
        assert result.cpu_s_per_1000_pods is not None and result.cpu_s_per_1000_pods >= 0
        assert result.peak_rss_mib is not None and result.peak_rss_mib > 0
        assert result.multi_gpu_pods == sizes.count(2)
        assert result.one_domain_pct is not None
    [row] = ratios(results)
    assert set(row) == {
        "nodes",
        "mode",
        "run",
        "baseline",
        "gpu_vs_kube_pods_per_s",
        "gpu_vs_kube_p50",
        "gpu_vs_kube_p99",
        "gpu_vs_kube_cpu_per_pod",
        "gpu_vs_kube_peak_rss",
        "gpu_vs_ceiling_pods_per_s",
        "kube_vs_ceiling_pods_per_s",
    }
    json.dumps([asdict(r) for r in results])  # the -o json document serializes


async def test_steady_rate_and_a_variant_run_side_by_side(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    """A steady arrival mode only, with one gpu-scheduler variant (no rate limit, 16 binds in
    flight) and a second kube-scheduler at its client defaults: five runs, each binds every pod;
    the ratios have one row per gpu-scheduler run against kube-scheduler, and one of
    gpu-scheduler against the kube-scheduler at its defaults."""
    suffix = namespace[-6:]
    specs = node_specs(12, prefix=f"r{suffix}-", labels={TEST_LABEL: namespace})
    await make_nodes(core_api, specs)
    options = isolated_run(
        namespace,
        "rate",
        pods=PODS,
        mix=MIX,
        settle_s=5.0,
        rates=(40.0,),
        burst=False,
        variants=(("cap16", {"binding": {"qps": 0, "concurrency": 16}}),),
        kube_defaults=True,
    )

    results = await side_by_side(cluster, api_client, specs, options)

    assert [(r.run, r.mode) for r in results] == [
        ("ceiling", "40/s"),
        ("gpu-scheduler", "40/s"),
        ("cap16", "40/s"),
        ("kube-scheduler", "40/s"),
        ("kube-defaults", "40/s"),
    ]
    for result in results:
        assert (result.bound, result.pending) == (PODS, 0), result
    assert results[-1].cpu_s_per_1000_pods is not None and results[-1].peak_rss_mib
    assert [(row["mode"], row["run"], row["baseline"]) for row in ratios(results)] == [
        ("40/s", "gpu-scheduler", "kube-scheduler"),
        ("40/s", "cap16", "kube-scheduler"),
        ("40/s", "gpu-scheduler", "kube-defaults"),
    ]


CHURN_PODS = 24


async def test_churn_in_the_plain_mode_binds_every_pod_into_gpus_freed_by_deleted_pods(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    """3 nodes (2, 4 and 8 GPUs) for 24 pods of 1 or 2 GPUs (38 in all): most pods can only be
    bound once pods deleted before them gave their GPUs back."""
    suffix = namespace[-6:]
    specs = node_specs(3, prefix=f"c{suffix}-", labels={TEST_LABEL: namespace})
    await make_nodes(core_api, specs)
    options = isolated_run(
        namespace,
        "churn",
        pods=CHURN_PODS,
        mix=MIX,
        settle_s=20.0,
        rates=(8.0,),
        burst=False,
        lifetime=1.0,
    )

    results = await side_by_side(cluster, api_client, specs, options)

    assert [r.run for r in results] == ["gpu-scheduler", "kube-scheduler"]
    sizes = pod_sizes(CHURN_PODS, options.seed, MIX)
    assert sum(sizes) > 14
    for result in results:
        assert (result.bound, result.pending) == (CHURN_PODS, 0), result
        assert result.gpus_bound == sum(sizes)
        assert 0 < result.deleted < CHURN_PODS, result
        assert 0 < result.peak_gpus < sum(sizes), result
        assert result.multi_gpu_pods == sizes.count(2), result
    [row] = ratios(results)
    assert row["gpu_vs_ceiling_pods_per_s"] is None
