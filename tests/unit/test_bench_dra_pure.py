"""The DRA benchmarks' pure parts: the NVLink quality replay (with releases under churn), the
manifests (parsed as the scheduler parses them), the claim reader, and the kernel bench's cluster
against its baseline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hack.bench.churn import Step, bind_steps, timeline
from hack.bench.dra_kernel import (
    POD_SIZES,
    Unmemoized,
    build_dra_cache,
    dra_bench_pod,
    dra_framework,
    sample_size,
    used_gpus,
)
from hack.bench.dra_workload import (
    AllocatedClaims,
    claim_template_manifest,
    device_index,
    dra_node_specs,
    dra_pod_manifest,
    dra_quality,
    extended_indices,
    extended_pod_manifest,
    template_name,
)
from hack.bench.kernel import bench_pod, build_cache
from hack.localcluster.nodes import G2_EXPANSION
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.dra.cel import CelSelectors
from scheduler.framework.snapshot import Snapshot
from scheduler.model.claims import parse_resource_claim_template
from scheduler.model.objects import parse_pod
from topology.domains import parse_domains

D8_DOMAINS = parse_domains("0-3,4-7", 8)


def devices(node: str, *indices: int) -> tuple[tuple[str, str], ...]:
    return tuple((node, f"gpu-{i}") for i in indices)


def quality(
    order: list[str], sizes: dict[str, int], held: Mapping[str, Sequence[tuple[str, str]]]
) -> tuple[int, int]:
    nodes = dict.fromkeys(order, "n")
    return dra_quality(bind_steps(order), sizes, nodes, held, {"n": D8_DOMAINS})


def churned(
    steps: list[Step], sizes: dict[str, int], held: Mapping[str, Sequence[tuple[str, str]]]
) -> tuple[int, int]:
    nodes = dict.fromkeys((step.pod for step in steps), "n")
    return dra_quality(steps, sizes, nodes, held, {"n": D8_DOMAINS})


def test_a_pair_inside_one_domain_counts_and_a_split_pair_does_not() -> None:
    sizes = {"a": 2, "b": 2}
    assert quality(["a", "b"], sizes, {"a": devices("n", 0, 1), "b": devices("n", 3, 4)}) == (
        2,
        1,
    )


def test_a_pod_counts_only_when_a_domain_had_room_before_it_in_bind_order() -> None:
    """gpu-0..2 and gpu-5..7 are taken (each inside a domain that had room) before the pair:
    each domain has one free GPU then, so the split pair (3, 4) is not counted. In the other
    order the pair came first, had room and split; the triples still fit one domain each."""
    sizes = {"first": 3, "second": 3, "pair": 2}
    held = {
        "first": devices("n", 0, 1, 2),
        "second": devices("n", 5, 6, 7),
        "pair": devices("n", 3, 4),
    }
    assert quality(["first", "second", "pair"], sizes, held) == (2, 2)
    assert quality(["pair", "first", "second"], sizes, held) == (3, 2)


def test_single_gpus_eight_gpus_and_unknown_allocations_are_not_counted_but_take_devices() -> None:
    sizes = {"one": 1, "eight": 8, "lost": 2, "four": 4}
    held = {"one": devices("n", 0), "eight": devices("n", *range(8))}
    assert quality(["one", "lost", "four"], sizes, {**held, "four": devices("n", 4, 5, 6, 7)}) == (
        1,
        1,
    )
    # after the 8-GPU pod no domain has room for anything
    assert quality(["eight", "four"], sizes, {**held, "four": devices("n", 4, 5, 6, 7)}) == (0, 0)


def test_devices_of_another_pool_or_name_lie_in_no_domain() -> None:
    sizes = {"a": 2, "b": 2}
    held = {"a": (("n", "gpu-0"), ("other", "gpu-1")), "b": (("n", "gpu-0"), ("n", "mig-1"))}
    assert quality(["a", "b"], sizes, held) == (2, 0)
    assert device_index("gpu-12") == 12
    assert device_index("gpu-x") is None and device_index("xgpu-1") is None


def test_pods_on_unknown_nodes_are_skipped() -> None:
    nodes = {"a": "elsewhere"}
    held = {"a": devices("n", 0, 1)}
    assert dra_quality(bind_steps(["a"]), {"a": 2}, nodes, held, {"n": D8_DOMAINS}) == (0, 0)


# Churn: "first" holds gpu-0..2 and "second" gpu-5..7; a pair then finds one free GPU per domain
# unless one of them was released before it was bound.
CHURN_SIZES = {"first": 3, "second": 3, "pair": 2}
CHURN_HELD = {
    "first": devices("n", 0, 1, 2),
    "second": devices("n", 5, 6, 7),
    "pair": devices("n", 3, 4),
}


def test_devices_freed_before_a_later_bind_count_as_free() -> None:
    """ "first" is released before the split pair is bound: domain 0-3 had room (4 free), so the
    pair counts, and split, it is not inside."""
    bound = {"first": 1.0, "second": 2.0, "pair": 4.0}
    steps = timeline(bound, {"first": 3.0})
    assert steps == [Step("first"), Step("second"), Step("first", True), Step("pair")]
    assert churned(steps, CHURN_SIZES, CHURN_HELD) == (3, 2)


def test_devices_freed_after_a_later_bind_do_not_count_as_free() -> None:
    bound = {"first": 1.0, "second": 2.0, "pair": 4.0}
    for released in (5.0, 4.0):  # after the bind, or at the same time (a bind goes first)
        steps = timeline(bound, {"first": released})
        assert steps[-1] == Step("first", True)
        assert churned(steps, CHURN_SIZES, CHURN_HELD) == (2, 2), released


def test_a_pair_inside_freed_devices_counts_as_inside() -> None:
    """A pair on gpu-0,1 (freed by "first") is inside domain 0-3."""
    held = {**CHURN_HELD, "pair": devices("n", 0, 1)}
    steps = timeline({"first": 1.0, "second": 2.0, "pair": 4.0}, {"first": 3.0})
    assert churned(steps, CHURN_SIZES, held) == (3, 3)


def test_a_release_gives_back_only_its_own_devices_and_only_once() -> None:
    """ "a" and "b" share gpu-0 as the watches reported them (b bound before a's release was
    seen); releasing "a" (twice) leaves gpu-0 held by "b": a 3-GPU pod finds only gpu-1 and
    gpu-3 free in domain 0-3 (gpu-4..7 are held by "c"), so it had no room."""
    sizes = {"a": 2, "b": 2, "c": 4, "d": 3}
    held = {
        "a": devices("n", 0, 1),
        "b": devices("n", 0, 2),
        "c": devices("n", 4, 5, 6, 7),
        "d": devices("n", 0, 1, 3),
    }
    steps = [Step("a"), Step("b"), Step("a", True), Step("a", True), Step("c"), Step("d")]
    assert churned(steps, sizes, held) == (3, 3)
    # with "b" released too, domain 0-3 is free again: "d" had room, and lies inside it
    release_b = [*steps[:4], Step("b", True), *steps[4:]]
    assert churned(release_b, sizes, held) == (4, 4)


def test_a_pod_released_before_its_bind_takes_nothing_and_is_not_counted() -> None:
    sizes = {"a": 4, "b": 4}
    held = {"a": devices("n", 0, 1, 2, 3), "b": devices("n", 0, 1, 2, 3)}
    steps = [Step("a", True), Step("a"), Step("b")]
    assert churned(steps, sizes, held) == (1, 1)


def test_the_pod_and_its_template_parse_as_a_claim_of_that_many_gpus() -> None:
    template = parse_resource_claim_template(
        {**claim_template_manifest(4), "metadata": {"name": template_name(4), "namespace": "ns"}}
    )
    assert not template.errors
    [request] = template.spec.requests
    [(_, spec)] = request.alternatives
    assert (spec.device_class_name, spec.count) == ("gpu.nvidia.com", 4)
    manifest = dra_pod_manifest("p", 4, "gpu-scheduler", {"type": "kwok"})
    manifest["metadata"]["namespace"] = "ns"
    pod = parse_pod(manifest)
    assert pod.gpus == 0 and not pod.errors
    assert pod.resource_claims is not None
    assert pod.resource_claims.waiting  # the controller has not made the claim yet
    [spec_node] = dra_node_specs(3, prefix="x-", labels={"k": "v"})
    assert (spec_node.count, spec_node.gpus, spec_node.is_dra) == (3, 8, True)
    assert spec_node.labels["k"] == "v" and spec_node.nvlink_domains == "0-3,4-7"


def claim(pod: str, results: list[dict[str, str]] | None, controller: bool = True) -> Any:
    owner = {"kind": "Pod", "name": pod, "uid": "u", "controller": controller}
    status = {"allocation": {"devices": {"results": results}}} if results else {}
    return {"metadata": {"name": f"{pod}-gpus", "ownerReferences": [owner]}, "status": status}


def test_allocated_claims_record_when_an_allocation_is_seen_gone() -> None:
    now = [10.0]
    seen = AllocatedClaims(clock=lambda: now[0])
    allocated = claim("a", [{"pool": "n", "device": "gpu-1"}])
    seen.on_update(claim("a", None), claim("a", None))  # never allocated: nothing to release
    assert seen.released == {}
    seen.on_add(allocated)
    now[0] = 12.0
    seen.on_update(allocated, claim("a", None))  # the controller cleared the allocation
    now[0] = 13.0
    seen.on_delete(claim("a", None))  # then deleted the claim: the first time counts
    assert seen.released == {"a": 12.0}
    seen.on_add(claim("b", [{"pool": "n", "device": "gpu-2"}]))
    now[0] = 14.0
    seen.on_delete(claim("b", [{"pool": "n", "device": "gpu-2"}]))  # deleted while allocated
    seen.on_delete(claim("c", None))
    assert seen.released == {"a": 12.0, "b": 14.0}
    assert seen.devices["a"] == (("n", "gpu-1"),)  # what the pod held stays known


def test_allocated_claims_keep_the_first_allocation_seen_per_owning_pod() -> None:
    seen = AllocatedClaims()
    seen.on_add(claim("a", None))
    assert seen.devices == {} and not seen.changed.is_set()
    first = [{"pool": "n", "device": "gpu-1"}, {"pool": "n", "device": "gpu-2"}]
    seen.on_update(claim("a", None), claim("a", first))
    seen.on_update(claim("a", first), claim("a", [{"pool": "n", "device": "gpu-7"}]))
    seen.on_add(claim("b", first, controller=False))
    assert seen.devices == {"a": (("n", "gpu-1"), ("n", "gpu-2"))}
    assert seen.changed.is_set()


def test_sample_size_keeps_one_of_each_size_and_the_node_budget() -> None:
    assert sample_size(40, 5000, 400_000) == 40
    assert sample_size(8, 5000, 200_000) == 8
    assert sample_size(40, 50000, 400_000) == 8
    assert sample_size(40, 500_000, 400_000) == len(POD_SIZES)


def test_the_dra_cluster_has_the_baseline_free_gpus_so_both_paths_find_the_same_nodes() -> None:
    """Same draws: per GPU count, the DRA filter lets through the nodes with that many free
    GPUs, as the device-plugin path does (8-GPU nodes, domains 0-3 and 4-7) before its NVLink
    narrowing; with the memo the second pod of a size evaluates no CEL."""
    nodes, seed = 40, 3
    used = used_gpus(nodes, seed)
    baseline = build_cache(nodes, seed, types=(G2_EXPANSION,))
    free = 8 - np.asarray([len(u) for u in used])  # free: (nodes,)
    assert (baseline.gpu_used[:nodes, :8].sum(axis=1) == 8 - free).all()
    dra = build_dra_cache(nodes, seed)
    assert len(dra.dra.slices) == nodes and len(dra.dra.in_use()) == int((8 - free).sum())
    selectors = CelSelectors()
    framework = dra_framework(selectors)
    plain = default_framework(SchedulerConfig())
    for gpus in POD_SIZES:
        ours = framework.evaluate(parse_pod(dra_bench_pod(gpus, 0)), Snapshot(dra))
        theirs = plain.evaluate(parse_pod(bench_pod(gpus, 0)), Snapshot(baseline))
        assert (ours.diagnosis.feasible[:nodes] == (free >= gpus)).all(), gpus
        theirs_feasible = theirs.diagnosis.feasible[:nodes]  # theirs_feasible: (nodes,)
        if gpus in (1, 8):  # no NVLink choice to make
            assert (theirs_feasible == ours.diagnosis.feasible[:nodes]).all(), gpus
        else:  # the NVLink narrower drops nodes that would split when others need not
            assert (theirs_feasible <= ours.diagnosis.feasible[:nodes]).all(), gpus
    before = selectors.counters.evaluations
    framework.evaluate(parse_pod(dra_bench_pod(2, 1)), Snapshot(dra))
    assert selectors.counters.evaluations == before
    unmemoized = Unmemoized()
    dra_framework(unmemoized).evaluate(parse_pod(dra_bench_pod(2, 1)), Snapshot(dra))
    assert unmemoized.counters.evaluations == unmemoized.counters.calls > 0
    assert unmemoized.counters.memo_hits == 0


def test_extended_pods_ask_for_gpus_and_name_no_claim() -> None:
    chosen = extended_indices(200, 0.25, seed=3)
    assert chosen == extended_indices(200, 0.25, seed=3)  # seeded
    assert 30 < len(chosen) < 70 and extended_indices(200, 0.0, seed=3) == frozenset()
    manifest = extended_pod_manifest("p", 4, "gpu-scheduler", {"type": "kwok"})
    assert "resourceClaims" not in manifest["spec"]
    resources = manifest["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "4"
