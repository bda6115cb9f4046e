"""The control-plane benchmark's DRA mode at a trivial size: D8 nodes published through
ResourceSlices, pods with claims from templates and pods asking for `nvidia.com/gpu` (claims the
schedulers make); every run binds every pod, both schedulers allocate every claim, and the NVLink
quality is reported. Under churn, pods are bound into devices freed by others. With `shared`, S8
nodes and pods asking for a share of one GPU: both schedulers allocate shares (a `shareID` and
`consumedCapacity` on each), and the GPUs left partly used are counted.

No timing is asserted; `python -m hack.bench.control_plane --dra` is the measurement.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from kubernetes_asyncio import client

from hack.bench.control_plane import side_by_side
from hack.bench.control_plane_model import Options, pod_sizes
from hack.bench.dra_workload import dra_node_specs, extended_indices
from hack.localcluster import LocalCluster, NodeSpec, temporary_nodes
from tests.scheduling import TEST_LABEL

PODS = 12
MIX = (0.5, 0.5, 0.0, 0.0)
"""1- and 2-GPU pods only: 12 of them ask for at most 24 of the 32 GPUs of 4 nodes, so a 2-GPU
pod always finds a node whatever the placement before it (4 nodes with 1 free GPU are 4 < 8)."""


def small_bench(
    namespace: str, tag: str, nodes: int, **settings: Any
) -> tuple[list[NodeSpec], Options]:
    """`nodes` DRA nodes (S8 with a `shared` setting) and the options of a small run with
    `settings`, named after the test's `namespace` and `tag`: only this test's nodes, and its
    own gpu-scheduler."""
    suffix = namespace[-6:]
    labels = {TEST_LABEL: namespace}
    shared = settings.get("shared", 0.0) > 0
    specs = dra_node_specs(nodes, prefix=f"{tag}{suffix}-", labels=labels, shared=shared)
    options = Options(
        mix=MIX,
        node_selector=labels,
        gpu_scheduler_name=namespace,
        namespace_prefix=f"{tag}-{suffix}",
        dra=True,
        **settings,
    )
    return specs, options


async def test_dra_mode_binds_and_allocates_every_pod_and_reports_the_domains(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    specs, options = small_bench(namespace, "d", 4, pods=PODS, settle_s=5.0, dra_extended=0.5)
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
    specs, options = small_bench(
        namespace,
        "c",
        CHURN_NODES,
        pods=CHURN_PODS,
        settle_s=20.0,
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


SHARED_PODS = 16
SHARED_NODES = 3
"""11 of the 16 pods (seeded) ask for a share of one GPU, 938Gi in all (at least 7 GPUs); the
other 5 for 7 whole GPUs: 18 GPUs even with every share on a GPU of its own, of the 24."""


async def test_shared_mode_binds_every_pod_and_both_schedulers_allocate_shares(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    specs, options = small_bench(
        namespace, "s", SHARED_NODES, pods=SHARED_PODS, settle_s=5.0, shared=0.5
    )
    shares = options.dra_pods().shares
    sizes = options.sizes()
    assert (len(shares), sum(shares.values()), sum(sizes)) == (11, 938, 7)

    async with temporary_nodes(core_api, specs):
        results = await side_by_side(cluster, api_client, specs, options)

    assert [r.run for r in results] == ["ceiling", "gpu-scheduler", "kube-scheduler"]
    ceiling, ours, theirs = results
    assert ceiling.shares is None
    for result in results:
        assert (result.bound, result.pending) == (SHARED_PODS, 0), result
        assert result.gpus_bound == sum(sizes)
    for result in (ours, theirs):
        use = result.shares
        assert use is not None
        # every share pod's claim was allocated a share: a shareID and consumedCapacity of the
        # memory asked, kube-scheduler's too (DRAConsumableCapacity is on in 1.37)
        assert (use.share_pods, use.recorded) == (len(shares), len(shares)), result
        assert use.fewest_gpus == 7
        assert use.fewest_gpus <= use.packed_gpus <= use.shared_gpus <= len(shares), result
        assert 0 < use.shared_nodes <= SHARED_NODES
    json.dumps([asdict(r) for r in results])
