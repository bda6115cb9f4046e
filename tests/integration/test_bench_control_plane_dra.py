"""The control-plane benchmark's DRA mode at a trivial size: D8 nodes published through
ResourceSlices, pods with claims from templates and pods asking for `nvidia.com/gpu` (claims the
schedulers make); every run binds every pod, both schedulers allocate every claim, and the NVLink
quality is reported.

No timing is asserted; `python -m hack.bench.control_plane --dra` is the measurement.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from kubernetes_asyncio import client

from hack.bench.control_plane import Options, pod_sizes, side_by_side
from hack.bench.dra_workload import dra_node_specs, extended_indices
from hack.localcluster import LocalCluster, temporary_nodes
from tests.scheduling import TEST_LABEL

PODS = 12
MIX = (0.5, 0.5, 0.0, 0.0)
"""1- and 2-GPU pods only: 12 of them ask for at most 24 of the 32 GPUs of 4 nodes, so a 2-GPU
pod always finds a node whatever the placement before it (4 nodes with 1 free GPU are 4 < 8)."""


async def test_dra_mode_binds_and_allocates_every_pod_and_reports_the_domains(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    specs = dra_node_specs(4, prefix=f"d{suffix}-", labels={TEST_LABEL: namespace})
    options = Options(
        pods=PODS,
        mix=MIX,
        settle_s=5.0,
        node_selector={TEST_LABEL: namespace},
        gpu_scheduler_name=namespace,
        namespace_prefix=f"dra-{suffix}",
        dra=True,
        dra_extended=0.5,
    )
    # Half the pods ask for nvidia.com/gpu instead of a template: each scheduler makes a claim.
    assert 0 < len(extended_indices(PODS, options.dra_extended, options.seed)) < PODS

    async with temporary_nodes(core_api, specs):
        results = await side_by_side(cluster, api_client, specs, options)

    assert [r.run for r in results] == ["ceiling", "gpu-scheduler", "kube-scheduler"]
    sizes = pod_sizes(PODS, options.seed, MIX)
    for result in results:
        assert (result.bound, result.pending) == (PODS, 0), result
        assert result.gpus_bound == sum(sizes)
        assert result.nodes == 4
        assert result.pods_per_s > 0 and 0 < result.p50_ms <= result.p99_ms
    ceiling, ours, theirs = results
    assert ceiling.cpu_s is None and ceiling.multi_gpu_pods == 0
    assert ceiling.one_domain_pct is None
    for result in (ours, theirs):
        assert result.cpu_s_per_1000_pods is not None and result.peak_rss_mib is not None
        # every 2-GPU pod had a domain with room: its claim was seen allocated, and counted
        assert 0 < result.multi_gpu_pods <= sizes.count(2), result
        assert result.one_domain_pct is not None
    # gpu-scheduler takes a pair inside one domain whenever one has room
    assert ours.one_domain_pct == 100.0, ours
    json.dumps([asdict(r) for r in results])


CHURN_PODS = 24
CHURN_NODES = 2
"""16 GPUs for 24 pods of 1 or 2 GPUs (about 36): most pods can only be bound into devices that
pods deleted before them gave back."""


async def test_dra_churn_deletes_pods_during_the_run_and_binds_every_pod_into_freed_devices(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    specs = dra_node_specs(CHURN_NODES, prefix=f"c{suffix}-", labels={TEST_LABEL: namespace})
    options = Options(
        pods=CHURN_PODS,
        mix=MIX,
        settle_s=20.0,
        node_selector={TEST_LABEL: namespace},
        gpu_scheduler_name=namespace,
        namespace_prefix=f"churn-{suffix}",
        dra=True,
        rates=(8.0,),
        burst=False,
        lifetime=1.0,
    )

    async with temporary_nodes(core_api, specs):
        results = await side_by_side(cluster, api_client, specs, options)

    # no ceiling under churn
    assert [r.run for r in results] == ["gpu-scheduler", "kube-scheduler"]
    sizes = pod_sizes(CHURN_PODS, options.seed, MIX)
    capacity = 8 * CHURN_NODES
    assert sum(sizes) > capacity
    for result in results:
        assert (result.bound, result.pending) == (CHURN_PODS, 0), result
        assert result.gpus_bound == sum(sizes)
        assert result.mode == "8/s"
        # pods were deleted while the others arrived, and freed devices were reused
        assert 0 < result.deleted < CHURN_PODS, result
        assert 0 < result.peak_gpus < sum(sizes), result
        # every 2-GPU pod's claim was seen allocated and counted when its node had room
        assert 0 < result.multi_gpu_pods <= sizes.count(2), result
        assert result.one_domain_pct is not None
    assert results[0].one_domain_pct == 100.0, results[0]
