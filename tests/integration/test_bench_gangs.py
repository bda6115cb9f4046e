"""The gang benchmark at a tiny size: all three runs produce numbers, gpu-scheduler never leaves a
gang partially started and keeps rack-bound gangs on one rack.

No timing is asserted; `python -m hack.bench.gangs` is the measurement.
"""

from __future__ import annotations

import json

from kubernetes_asyncio import client

from hack.bench.gang_metrics import RATIO_KEYS
from hack.bench.gang_workload import Mix, bench_nodes, generate, rack_specs
from hack.bench.gangs import RUNS, Options, document, side_by_side, table
from hack.localcluster import LocalCluster
from tests.scheduling import TEST_LABEL, make_nodes

MIX = Mix(jobs=10, min_duration_s=2.0, max_duration_s=4.0, load=1.5)
"""2 racks x 3 nodes (28 GPUs); seed 0 gives 7 gangs (4 rack-bound) and 3 single pods, submitted
over about 4 s."""


async def test_three_runs_report_numbers_and_gpu_scheduler_starts_gangs_whole(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    specs = rack_specs(2, 3, prefix=f"n{suffix}-", labels={TEST_LABEL: namespace})
    await make_nodes(core_api, specs)
    options = Options(
        racks=2,
        nodes_per_rack=3,
        mix=MIX,
        tail_s=15.0,
        node_selector={TEST_LABEL: namespace},
        gpu_scheduler_name=namespace,
        namespace_prefix=f"gangs-{suffix}",
    )
    jobs = generate(MIX, bench_nodes(specs), options.seed)
    gangs = [job for job in jobs if job.gang]
    assert len(gangs) == 7 and sum(job.rack_bound for job in gangs) == 4

    results = await side_by_side(cluster, api_client, specs, options)

    assert [r.metrics.run for r in results] == list(RUNS)
    for result in results:
        m = result.metrics
        assert (m.gangs, m.singles) == (7, 3), m
        assert m.gangs_started >= 1 and m.gangs_per_min > 0, m
        assert m.start_p50_s is not None and m.start_p99_s is not None
        assert 0 <= m.start_p50_s <= m.start_p99_s
        assert m.one_node_pct is not None and m.one_rack_pct is not None
        assert m.seconds > 0
    plain, kube_gangs, gpu = results
    assert plain.groups_scheduled is None
    for result in (kube_gangs, gpu):  # each scheduler's own gang cycle started them
        assert result.groups_scheduled is not None
        assert 1 <= result.groups_scheduled <= result.metrics.gangs_started
    ours = gpu.metrics
    assert (ours.partial_gangs, ours.partial_gpu_s) == (0, 0.0), ours
    assert ours.rack_bound_in_one_rack == ours.rack_bound_started
    assert ours.domain_members > 0 and ours.one_domain_pct is not None
    lines = table(results)
    assert len(lines) == 1 + len(RUNS) + 1
    body = document(results, options)
    assert set(body["ratios"]) == set(RATIO_KEYS)
    json.dumps(body)  # the -o json document serializes
