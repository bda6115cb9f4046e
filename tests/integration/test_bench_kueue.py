"""The Kueue stranding benchmark at a tiny size, on the session's cluster with Kueue: both runs
admit and place workloads, report every metric, and leave no queue, flavor or pod behind.

No timing is asserted; `python -m hack.bench.kueue_stranding` is the measurement.
"""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client

from hack.bench.kueue_metrics import RATIO_KEYS, Mix, generate, ratios
from hack.bench.kueue_stranding import (
    GROUP,
    KUBE,
    OURS,
    TEAMS,
    VERSION,
    Options,
    node_spec,
    side_by_side,
    table,
)
from hack.localcluster import LocalCluster
from tests.scheduling import TEST_LABEL, make_nodes

pytestmark = pytest.mark.usefixtures("kueue")

MIX = Mix(jobs=12, min_duration_s=2.0, max_duration_s=4.0, load=1.5)


async def test_both_runs_admit_place_and_report_then_clean_up(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    options = Options(
        nodes=2,
        mix=MIX,
        tail_s=10.0,
        gpu_scheduler_name=namespace,
        flavor=namespace,
        node_labels={TEST_LABEL: namespace},
        node_prefix=f"n{suffix}-",
        namespace_prefix=f"kstr-{suffix}",
    )
    spec = node_spec(options)
    await make_nodes(core_api, [spec])
    jobs = generate(MIX, spec.gpus * spec.count, TEAMS, options.seed)
    assert {(j.pods, j.gpus) for j in jobs} & {(1, 8), (2, 8)}  # a large workload among them

    runs = await side_by_side(cluster, api_client, spec, options)

    assert [run.metrics.run for run in runs] == [KUBE, OURS]
    for run in runs:
        m = run.metrics
        assert m.jobs == len(jobs) and 1 <= m.completed <= m.admitted <= len(jobs), m
        assert m.stranded_gpus_per_admitted is not None and m.stranded_gpus_per_admitted >= 0
        assert m.pending_mean is not None and m.pending_max >= 0
        assert m.admit_to_bound_p50_s is not None and m.admit_to_bound_p99_s is not None
        assert 0 <= m.admit_to_bound_p50_s <= m.admit_to_bound_p99_s
    ours = runs[1].metrics
    if ours.multi_gpu_pods:
        assert ours.one_domain_pct is not None and ours.one_domain_pct > 0
    lines = table([run.metrics for run in runs])
    assert len(lines) == 1 + 2 + 1 and lines[-1].startswith("gpu-scheduler / kube-scheduler: ")
    assert set(ratios(runs[1].metrics, runs[0].metrics)) == set(RATIO_KEYS)
    json.dumps([run.meter.episodes for run in runs])

    custom = client.CustomObjectsApi(api_client)
    queues = await custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")
    left = [
        q["metadata"]["name"]
        for q in queues["items"]
        if q["metadata"]["name"].startswith(options.namespace_prefix)
        and not q["metadata"].get("deletionTimestamp")
    ]
    assert left == []
    for label in (KUBE, OURS):
        pods = await core_api.list_namespaced_pod(f"{options.namespace_prefix}-{label}")
        assert pods.items == []
