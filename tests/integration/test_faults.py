"""The fault suite, short version: one test per fault family (hack/faults/scenarios.py), each
running `gpu-scheduler run` processes against the real local cluster under a seeded churn
workload, and asserting the invariants of `hack.faults.invariants` over the whole cluster during
the fault and at rest after it (every pending pod of ours that fits is bound within a bounded
wait). About 370 pods in all; the long version is `python -m hack.faults.soak`
(docs/reliability.md). The DRA families (`hack.faults.dra_faults`) run 16 pods each on one
8-GPU DRA node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from hack.faults import dra_faults, dra_scenarios, scenarios
from hack.faults.scenarios import Outcome, Scene
from hack.localcluster import LocalCluster

PODS = 40
"""Pods per churn test."""


@pytest.fixture
async def scene(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Scene]:
    """The test's namespace, nodes (labelled for the namespace fixture to delete) and replicas;
    the seed is fixed per test by its name."""
    seed = sum(namespace.encode()) % 1000
    found = Scene(cluster, api_client, namespace, tmp_path, seed)
    yield found
    await found.cleanup()


def clean(outcome: Outcome) -> str:
    """Empty when nothing broke; otherwise the violations, one a line."""
    return "\n".join(str(v) for v in outcome.violations[:20])


async def test_connection_resets_between_scheduler_and_api_server(scene: Scene) -> None:
    outcome = await scenarios.api_resets(scene, PODS)
    assert outcome.injected >= 5, f"only {outcome.injected} resets injected"
    assert outcome.notes["alive"]
    assert not outcome.violations, clean(outcome)


async def test_scheduler_killed_at_random_points_and_restarted(scene: Scene) -> None:
    outcome = await scenarios.scheduler_kills(scene, PODS, kills=3)
    assert outcome.injected == 3
    assert not outcome.violations, clean(outcome)


async def test_leader_killed_and_the_follower_takes_over(scene: Scene) -> None:
    outcome = await scenarios.leader_kills(scene, PODS, kills=2)
    assert outcome.injected == 2
    assert not outcome.violations, clean(outcome)


async def test_leader_paused_past_its_lease_writes_nothing_after_it_resumes(
    scene: Scene,
) -> None:
    outcome = await scenarios.leader_pause(scene, PODS)
    assert outcome.injected == 1
    assert not outcome.violations, clean(outcome)


async def test_sole_leader_frozen_mid_bind_settles_its_pods_when_it_leads_again(
    scene: Scene,
) -> None:
    outcome = await scenarios.sole_leader_freeze(scene, PODS, rounds=3)
    assert outcome.injected >= 3, f"froze {outcome.injected} times, after {outcome.notes}"
    assert max(outcome.notes["delays_ms"]) < 50, outcome.notes  # caught in the act of binding
    assert outcome.notes["alive"]
    assert not outcome.violations, clean(outcome)


async def test_sole_leader_frozen_while_writing_a_claim_settles_its_dra_pods(
    scene: Scene,
) -> None:
    outcome = await dra_scenarios.sole_leader_freeze_dra(scene, PODS, rounds=3)
    print(outcome.notes)
    assert outcome.injected >= 3, f"froze {outcome.injected} times, after {outcome.notes}"
    assert outcome.notes["claim_writes"] > 0, outcome.notes
    assert outcome.notes["probes_bound"] == outcome.notes["probes"], outcome.notes
    assert outcome.notes["alive"]
    assert not outcome.violations, clean(outcome)


async def test_api_server_restarted_mid_stream(scene: Scene) -> None:
    outcome = await scenarios.apiserver_restarts(scene, PODS)
    assert outcome.notes["alive"]
    assert not outcome.violations, clean(outcome)


async def test_watches_resumed_after_compaction_get_410_and_relist(scene: Scene) -> None:
    outcome = await scenarios.watch_gone(scene, PODS)
    assert outcome.notes["relists"] >= 1, "no watch was answered 410 Gone"
    assert not outcome.violations, clean(outcome)


async def test_prometheus_down_slow_erroring_nan_or_empty_evicts_nothing(scene: Scene) -> None:
    outcome = await scenarios.prometheus_faults(scene)
    assert not outcome.violations, clean(outcome)


async def test_victim_deleted_while_its_eviction_is_in_flight(scene: Scene) -> None:
    outcome = await scenarios.victim_deleted(scene)
    assert not outcome.violations, clean(outcome)


async def test_reclaim_plan_made_stale_before_its_eviction_evicts_nothing(scene: Scene) -> None:
    outcome = await scenarios.stale_plan(scene)
    assert not outcome.violations, clean(outcome)


async def test_pdb_guarded_victims_are_not_evicted_nor_their_neighbours(scene: Scene) -> None:
    outcome = await scenarios.pdb_guarded(scene)
    assert not outcome.violations, clean(outcome)


async def test_node_deleted_while_it_holds_assumed_pods(scene: Scene) -> None:
    outcome = await scenarios.node_deleted(scene)
    assert not outcome.violations, clean(outcome)


DRA_PODS = 16
"""Pods per DRA fault test: one `D8` node, at most six alive at once."""


def settled_dra(outcome: Outcome) -> None:
    """The replica lived, every pod of ours ended bound, and no invariant broke."""
    assert outcome.notes["alive"], outcome.notes
    assert not outcome.notes["pending"], outcome.notes
    assert not outcome.violations, clean(outcome)


async def test_dra_claim_writes_lost_or_refused_by_connection_resets(scene: Scene) -> None:
    outcome = await dra_faults.claim_writes_reset_dra(scene, DRA_PODS)
    print(outcome.notes)
    assert outcome.injected >= 5, f"only {outcome.injected} resets injected"
    assert outcome.notes["claim_writes"] > 0, outcome.notes
    settled_dra(outcome)


async def test_dra_binding_refused_after_the_claims_were_written_is_undone(scene: Scene) -> None:
    outcome = await dra_faults.binding_refused_dra(scene, DRA_PODS)
    print(outcome.notes)
    assert outcome.injected > 0, outcome.notes
    assert outcome.notes["claim_releases"] > 0, outcome.notes  # the undo ran
    settled_dra(outcome)


async def test_dra_claim_deleted_while_in_flight_strands_nothing(scene: Scene) -> None:
    outcome = await dra_faults.claim_deleted_in_flight(scene, DRA_PODS)
    print(outcome.notes)
    assert outcome.injected > 0, outcome.notes
    settled_dra(outcome)


async def test_dra_resource_slice_republished_mid_cycle(scene: Scene) -> None:
    outcome = await dra_faults.slice_republished_dra(scene, DRA_PODS)
    print(outcome.notes)
    assert outcome.injected >= 3, outcome.notes
    settled_dra(outcome)
