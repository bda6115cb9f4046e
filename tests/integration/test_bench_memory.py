"""The memory benchmark at a trivial size on the session's cluster: an untraced and a traced
daemon go through their three phases, bind the pods, and the traced one's snapshots are grouped.

No figure is asserted beyond what must hold; `python -m hack.bench.memory runtime` is the
measurement.
"""

from __future__ import annotations

from kubernetes_asyncio import client

from hack.bench.control_plane_model import node_specs
from hack.bench.memory import REPO_ROOT
from hack.bench.memory_child import PHASES
from hack.bench.memory_runtime import measure_daemons
from hack.bench.memory_sites import GROUPINGS
from hack.localcluster import LocalCluster
from tests.bench_runs import isolated_run
from tests.scheduling import TEST_LABEL, make_nodes

PODS = 8
MIX = (0.5, 0.5, 0.0, 0.0)
"""1- and 2-GPU pods: 8 of them fit on 6 nodes whatever the placement."""


async def test_phases_are_recorded_and_the_traced_run_is_grouped(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    suffix = namespace[-6:]
    specs = node_specs(6, prefix=f"m{suffix}-", labels={TEST_LABEL: namespace})
    await make_nodes(core_api, specs)
    options = isolated_run(namespace, "mem", pods=PODS, mix=MIX, settle_s=5.0)
    runs = [("plain", REPO_ROOT, 0), ("traced", REPO_ROOT, 4)]

    plain, traced = await measure_daemons(cluster, api_client, specs, options, runs)

    for run in (plain, traced):
        assert [p["phase"] for p in run.phases] == list(PHASES)
        assert (run.result.bound, run.result.pending) == (PODS, 0)
        for phase in run.phases:
            assert 0 < phase["rss_mib"] <= phase["hwm_mib"]
            assert phase["sockets"] >= 0 and phase["threads"] >= 1
    assert plain.phases[0]["pymalloc"]["arenas"] > 0 and not plain.growth
    assert all(p["traced_mib"] > 0 for p in traced.phases)
    assert set(traced.growth) == set(PHASES[1:])
    for groupings in traced.growth.values():
        assert set(groupings) == set(GROUPINGS)
        assert sum(site.size for site in groupings["line"]) > 0
