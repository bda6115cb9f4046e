"""DRA feasibility against kube-scheduler v1.37, pod by pod (a short seeded
`python -m hack.differential --dra` run).

12 generated DRA nodes (H200 and H100 boards, an older driver, a Blackwell-class model, shared
H200s with memory as a consumable capacity, a node without GPUs; device taints in slices and
DeviceTaintRules; devices held by existing pods' claims) join the session's cluster; 40 seeded
pods with ResourceClaims (fresh claims, templates, claims shared with an existing pod;
ExactCount, All, firstAvailable, CEL selectors, matchAttribute / distinctAttribute,
tolerations, admin access, capacity requests for memory) are judged by a dedicated
reference kube-scheduler and by gpu-scheduler's profile. Every pod's feasible node SET must be
equal, and when no node fits, both FailedScheduling messages must count the same nodes per
reason. The failure message lists each disagreement.
"""

from __future__ import annotations

from kubernetes_asyncio import client

from hack.differential.compare import render, summarize
from hack.differential.dra_generate import DRA_FEATURES, generate_dra
from hack.differential.dra_run import compare_dra_pods, install_dra, uninstall_dra
from hack.differential.reference import start_reference
from hack.localcluster import LocalCluster

SEED = 3
NODES = 12
PODS = 40


async def test_dra_feasible_sets_and_messages_match_kube_scheduler(
    cluster: LocalCluster, core_api: client.CoreV1Api
) -> None:
    scenario = generate_dra(SEED, NODES, PODS, prefix="dra-ci")
    try:
        await install_dra(core_api, scenario)
        reference = start_reference(cluster, name="kube-scheduler-differential-dra")
        try:
            outcomes = await compare_dra_pods(core_api, reference, scenario)
        finally:
            reference.stop()
    finally:
        await uninstall_dra(core_api, scenario)
    table = render(summarize(outcomes, DRA_FEATURES))
    disagreements = [o.describe() for o in outcomes if o.verdict == "disagree"]
    assert not disagreements, (
        f"{len(disagreements)} of {len(outcomes)} pods disagree:\n"
        + "\n".join(disagreements)
        + f"\n{table}"
    )
    # Not vacuous: pods fit nowhere (their messages compared), on one node, and on several.
    sizes = [len(o.kube) for o in outcomes]
    assert sizes.count(0) >= 4, table
    assert sum(1 for o in outcomes if o.kube_message and o.ours_message) >= 4, table
    assert sum(size >= 2 for size in sizes) >= PODS // 4, table
