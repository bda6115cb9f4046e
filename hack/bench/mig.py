"""MIG placement against first fit: the allocator over one or more M8-like nodes (H200 GPUs,
each published whole and as every MIG placement, `hack.localcluster.dra_mig`), fed a seeded
stream of MIG claims with departures, once per policy. In this process, no cluster.

    python -m hack.bench.mig [--gpus 2] [--nodes 1] [--requests 400]
        [--seeds 0,1,2,3,4,5,6,7] [--depart 0.3] [--policies P1,P2,...] [-o json]

Each step either releases one held device (probability `--depart`, when something is held) or
asks for one placement of a profile drawn with weights 1g.18gb 4, 1g.35gb 1, 2g.35gb 2,
3g.71gb 1, 4g.71gb 1. Every policy sees the same seeded draws (per step: depart or not, the
profile, which held claim by its rank in arrival order), so they differ only where what they
hold differs. A policy is a device order on each node and a choice among the nodes where the
claim fits:

- `first-fit`: upstream's order (no domain map), the first node in name order that fits;
- `random-node`: upstream's order, a node drawn among those that fit (kube-scheduler 1.37:
  every node scores the same for such a claim and it picks among the best at random);
- `gpu-scheduler`: gpu-scheduler's order (`scheduler.dra.partitions`, the node's domain map
  given: the least loss of the largest placement possible on the GPU, then the most
  fragmented GPU), and the node its DynamicResources score ranks first
  (`scheduler.dra.node_score`, as the plugin scores), ties drawn at random;
- `largest-after`: the order gpu-scheduler had before (a GPU already partitioned first, then
  the placement leaving the largest placement possible on its GPU, then the longest free run),
  and the node its DynamicResources score ranked first then (each MIG device taken counted as
  one whole GPU of its NVLink domain, the NVLink kernel over that), ties drawn at random. The
  order is applied here: the first placement it ranks that the allocator grants;
- `fragmentation-loss`: gpu-scheduler's key (`partitions.loss_key`) over every GPU of every
  node as if they were one node, ties by node order: what the node score approximates.

Figures per policy, summed over the seeds:

- `placed`: asks that got a placement (a claim no node can place is dropped);
- `big placed`: the 3g and 4g asks among them;
- `largest`: the mean, over steps, of the largest profile still placeable on any GPU, in
  memory slices (8: some GPU is untouched; 4: a 3g/4g fits somewhere), its SM share as
  tiebreak left out;
- `4g placeable`: the share of steps at which a 4g.71gb could still be placed somewhere;
- `4g GPUs`: the mean, over steps, of the GPUs on which a 4g.71gb could still be placed.

The ratio columns are each policy's figure over first fit's.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np

from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster.dra import H200_GPU
from hack.localcluster.dra_mig import (
    H200_MIG_PROFILES,
    H200_MULTIPROCESSORS,
    MIG_CLASS,
    mig_device_class,
    mig_resource_slices,
    placement_of,
)
from scheduler.dra.allocator import Allocator, NodeAllocation
from scheduler.dra.cel import CelSelectors
from scheduler.dra.consumable import device_use
from scheduler.dra.domains import DeviceDomains, device_domains
from scheduler.dra.node_score import domain_occupancy, occupancy_points
from scheduler.dra.partitions import (
    Partitions,
    Placement,
    longest_free_run,
    loss_key,
    placeable_after,
)
from scheduler.model.allocations import Allocation
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.pools import Pool, gather_pools
from topology.scoring import normalize, score_nodes

NODE = "m8-0"
DRIVER = "gpu.nvidia.com"
SLICES = 8
"""Memory slices of an H200."""
WEIGHTS = {"1g.18gb": 4, "1g.35gb": 1, "2g.35gb": 2, "3g.71gb": 1, "4g.71gb": 1}
BIG = {"3g.71gb", "4g.71gb"}
PROFILES = {p.name: p for p in H200_MIG_PROFILES}
GEOMETRY = [
    Placement(frozenset(range(s, s + p.memory_slices)), (p.memory_slices, Decimal(0)))
    for p in H200_MIG_PROFILES
    for s in p.starts
]
FOUR_G = frozenset(range(4))
"""The memory slices of the only 4g.71gb placement."""
FIRST_FIT = "first-fit"
RANDOM_NODE = "random-node"
GPU_SCHEDULER = "gpu-scheduler"
LARGEST_AFTER = "largest-after"
FRAGMENTATION_LOSS = "fragmentation-loss"
POLICIES = (FIRST_FIT, RANDOM_NODE, GPU_SCHEDULER, LARGEST_AFTER, FRAGMENTATION_LOSS)
Allocate = Callable[["MigNode", ResourceClaim], NodeAllocation]
"""Runs the allocator for one claim on one node."""


@dataclass
class Tally:
    placed: int = 0
    big_placed: int = 0
    asks: int = 0
    big_asks: int = 0
    largest_sum: int = 0
    four_g_steps: int = 0
    four_g_gpus: int = 0
    steps: int = 0


@dataclass
class MigNode:
    """One node: its pools, its device -> NVLink domain map, its MIG placements, and the claims
    it holds."""

    name: str
    pools: tuple[Pool, ...]
    domains: DeviceDomains
    partitions: Partitions
    held: dict[int, Allocation] = field(default_factory=dict)

    def taken(self) -> frozenset[tuple[str, str, str]]:
        return frozenset(r.device_id for a in self.held.values() for r in a.results)

    def used(self, gpus: int) -> list[frozenset[int]]:
        """Memory slices in use per GPU."""
        return occupancy([_device(a) for a in self.held.values()], gpus)


def mig_node(name: str, gpus: int) -> MigNode:
    pools = node_pools(gpus, name)
    return MigNode(name, pools, device_domains({}, pools), Partitions.of_pools(pools))


def claim_for(profile: str, index: int, where: tuple[str, int] | None = None) -> ResourceClaim:
    """A claim for one placement of `profile`; with `where` (parent GPU UUID, first memory
    slice) for that placement only."""
    selector = f"device.attributes['{DRIVER}'].profile == '{profile}'"
    if where is not None:
        selector += (
            f" && device.attributes['{DRIVER}'].parentUUID == '{where[0]}'"
            f" && device.attributes['{DRIVER}'].memorySliceStart == {where[1]}"
        )
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c-{index}", "namespace": "bench", "uid": f"uid-{index}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": MIG_CLASS,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
    }
    return parse_resource_claim(body)


def node_pools(gpus: int, node: str = NODE) -> tuple[Pool, ...]:
    slices = [parse_resource_slice(s) for s in mig_resource_slices(node, "uid", H200_GPU, gpus)]
    return gather_pools(slices, node, {})


def occupancy(held: Sequence[str], gpus: int) -> list[frozenset[int]]:
    """Memory slices in use per GPU, from the names of held MIG devices."""
    used: list[set[int]] = [set() for _ in range(gpus)]
    for name in held:
        found = placement_of(name)
        assert found is not None, name
        gpu, profile, start = found
        used[gpu].update(range(start, start + PROFILES[profile].memory_slices))
    return [frozenset(u) for u in used]


def _device(allocation: Allocation) -> str:
    [result] = allocation.results
    return result.device


def claims_score(node: MigNode, allocation: Allocation) -> float:
    """The score gpu-scheduler's DynamicResources gives the node for `allocation` (0..100,
    `scheduler.dra.node_score` as the plugin uses it); 0 when the plugin would abstain (no
    mapped device)."""
    use = device_use(node.held.values())
    found = domain_occupancy(node.domains, use, (allocation,), node.partitions)
    return 0.0 if found is None else float(occupancy_points([found])[0])


def earlier_claims_score(node: MigNode, allocation: Allocation) -> float:
    """The score DynamicResources gave before: every mapped device taken (a MIG device too)
    counted as one whole GPU of its domain, the device allocated as one more, the NVLink kernel
    over that."""
    taken = node.taken()
    domains = node.domains
    if not any(r.device_id in domains.domain_of for r in allocation.results):
        return 0.0
    free = list(domains.domain_size)
    for device, domain in domains.domain_of.items():
        if device in taken:
            free[domain] -= 1
    wanted = len({r.device_id for r in allocation.results if r.device_id in domains.domain_of})
    free_row = np.array([[max(f, 0) for f in free]], dtype=np.int64)  # free_row: (1, domains)
    size = np.array([domains.domain_size], dtype=np.int64)  # size: (1, domains)
    total = size.sum(axis=1)  # total: (1,)
    raw = score_nodes(wanted, free_row, size, total, total - free_row.sum(axis=1)).raw
    return float(np.nan_to_num(normalize(raw))[0])


def sized(profile: str, start: int) -> Placement:
    """The placement of `profile` at memory slice `start`, sized as `scheduler.dra.partitions`
    sizes it: memory slices, then its shares of the GPU's multiprocessors and memory (so a 4g
    ranks above a 3g of the same slices)."""
    found = PROFILES[profile]
    share = (
        Decimal(found.multiprocessors) / H200_MULTIPROCESSORS
        + Decimal(found.memory_mib) / H200_GPU.memory_mib
    )
    slices = frozenset(range(start, start + found.memory_slices))
    return Placement(slices, (found.memory_slices, share))


SIZED = [
    *(sized(p.name, s) for p in H200_MIG_PROFILES for s in p.starts),
    Placement(frozenset(range(SLICES)), (SLICES, Decimal(2))),
]
"""Every placement of a GPU, the whole GPU last, sized as `sized` sizes them: what the allocator
ranks a GPU's placements among."""


def largest_after_key(used: frozenset[int], choice: Placement) -> tuple[Any, ...]:
    """The earlier order's key of a placement on a GPU with `used` slices (smaller is better):
    a GPU already partitioned first, then the largest placement still possible after it, then
    the longest free run after it."""
    after = used | choice.slots
    slots, share = placeable_after(after, SIZED)
    return (not used, -slots, -share, -longest_free_run(after, SLICES))


def loss_candidates(
    cluster: Sequence[MigNode], profile: str, gpus: int
) -> list[tuple[MigNode, int, int]]:
    """Every (node, GPU, start) where `profile` fits the free memory slices, best first by
    `partitions.loss_key` (the least loss of the largest placement possible on the GPU, then
    the GPU whose largest placement is smallest already, then the longest free run after),
    then node, GPU and start order."""
    ranked = []
    for position, node in enumerate(cluster):
        for gpu, taken in enumerate(node.used(gpus)):
            for start in PROFILES[profile].starts:
                choice = sized(profile, start)
                if not choice.slots & taken:
                    key = (loss_key(taken, SIZED, choice, SLICES), position, gpu, start)
                    ranked.append((key, node, gpu, start))
    ranked.sort(key=lambda item: item[0])
    return [(node, gpu, start) for _, node, gpu, start in ranked]


def largest_after_candidates(node: MigNode, profile: str, gpus: int) -> list[tuple[int, int]]:
    """Every (GPU, start) of `node` where `profile` fits the free memory slices, best first by
    `largest_after_key`, then GPU and start order (the candidates' order on the node)."""
    ranked = []
    for gpu, taken in enumerate(node.used(gpus)):
        for start in PROFILES[profile].starts:
            choice = sized(profile, start)
            if not choice.slots & taken:
                ranked.append(((largest_after_key(taken, choice), gpu, start), gpu, start))
    ranked.sort(key=lambda item: item[0])
    return [(gpu, start) for _, gpu, start in ranked]


def granted(
    node: MigNode, profile: str, index: int, where: tuple[int, int], allocate: Allocate
) -> Allocation | None:
    """The allocation of `profile` at (GPU, start) of `node`, if the allocator grants it (it
    also checks the counters beyond the memory slices)."""
    claim = claim_for(profile, index, (gpu_uuid(node.name, where[0]), where[1]))
    outcome = allocate(node, claim)
    return None if outcome.allocations is None else outcome.allocations[0]


def place_by_loss(
    cluster: Sequence[MigNode], profile: str, index: int, gpus: int, allocate: Allocate
) -> tuple[MigNode, Allocation] | None:
    """The first of `loss_candidates` that the allocator grants; None if none."""
    for node, gpu, start in loss_candidates(cluster, profile, gpus):
        found = granted(node, profile, index, (gpu, start), allocate)
        if found is not None:
            return node, found
    return None


def place_largest_after(
    node: MigNode, profile: str, index: int, gpus: int, allocate: Allocate
) -> Allocation | None:
    """The first of `largest_after_candidates` on `node` that the allocator grants."""
    for where in largest_after_candidates(node, profile, gpus):
        found = granted(node, profile, index, where, allocate)
        if found is not None:
            return found
    return None


def choose(
    policy: str, fits: list[tuple[MigNode, Allocation]], rng: random.Random
) -> tuple[MigNode, Allocation]:
    """The node (and its allocation) `policy` picks among those where the claim fits."""
    if policy in (FIRST_FIT, FRAGMENTATION_LOSS):
        return fits[0]
    if policy == RANDOM_NODE:
        return fits[rng.randrange(len(fits))]
    score = claims_score if policy == GPU_SCHEDULER else earlier_claims_score
    scored = [score(node, allocation) for node, allocation in fits]
    best = max(scored)
    ties = [position for position, points in enumerate(scored) if points == best]
    return fits[ties[rng.randrange(len(ties))]]


def fitting(
    policy: str,
    cluster: Sequence[MigNode],
    ask: tuple[str, int],
    gpus: int,
    allocate: Allocate,
) -> list[tuple[MigNode, Allocation]]:
    """The nodes where `policy` places the ask (profile, index), each with its allocation
    there (first fit stops at the first; the loss order names one node)."""
    profile, index = ask
    if policy == FRAGMENTATION_LOSS:
        found = place_by_loss(cluster, profile, index, gpus, allocate)
        return [found] if found is not None else []
    fits = []
    for node in cluster:
        if policy == LARGEST_AFTER:
            allocation = place_largest_after(node, profile, index, gpus, allocate)
        else:
            outcome = allocate(node, claim_for(profile, index))
            allocation = None if outcome.allocations is None else outcome.allocations[0]
        if allocation is not None:
            fits.append((node, allocation))
            if policy == FIRST_FIT:
                break
    return fits


def simulate(
    seed: int, gpus: int, requests: int, depart: float, policy: str, nodes: int = 1
) -> Tally:
    rng = random.Random(seed)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    draws = [(rng.random(), rng.choices(names, weights)[0], rng.random()) for _ in range(requests)]
    ties = random.Random(seed)
    classes = {MIG_CLASS: parse_device_class(mig_device_class())}
    matcher = CelSelectors()
    cluster = [mig_node(NODE if nodes == 1 else f"m8-{i}", gpus) for i in range(nodes)]
    aware = policy == GPU_SCHEDULER

    def allocate(node: MigNode, claim: ResourceClaim) -> NodeAllocation:
        domains = node.domains.domain_of if aware else None
        return Allocator(classes, node.taken(), matcher).allocate(
            node.name, {}, node.pools, [claim], domains
        )

    held: dict[int, MigNode] = {}
    tally = Tally()
    for index, (leave, profile, which) in enumerate(draws):
        if held and leave < depart:
            gone = sorted(held)[int(which * len(held))]
            held.pop(gone).held.pop(gone)
        else:
            tally.asks += 1
            tally.big_asks += profile in BIG
            fits = fitting(policy, cluster, (profile, index), gpus, allocate)
            if fits:
                node, allocation = choose(policy, fits, ties)
                node.held[index] = allocation
                held[index] = node
                tally.placed += 1
                tally.big_placed += profile in BIG
        used = [u for node in cluster for u in node.used(gpus)]
        tally.largest_sum += max(placeable_after(u, GEOMETRY)[0] for u in used)
        four_g = sum(not u & FOUR_G for u in used)
        tally.four_g_steps += four_g > 0
        tally.four_g_gpus += four_g
        tally.steps += 1
    return tally


def summed(tallies: Sequence[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(t, name))
    return total


def figures(t: Tally) -> dict[str, float]:
    steps = max(t.steps, 1)
    return {
        "asks": t.asks,
        "placed": t.placed,
        "big asks": t.big_asks,
        "big placed": t.big_placed,
        "largest": t.largest_sum / steps,
        "4g placeable": t.four_g_steps / steps,
        "4g GPUs": t.four_g_gpus / steps,
    }


def run(
    seeds: Sequence[int],
    gpus: int,
    requests: int,
    depart: float,
    policies: Sequence[str] = POLICIES,
    nodes: int = 1,
) -> dict[str, Any]:
    """Figures per policy (see the module docstring); `ValueError` for an unknown policy."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    return {
        policy: figures(summed([simulate(s, gpus, requests, depart, policy, nodes) for s in seeds]))
        for policy in policies
    }


def table(found: dict[str, Any]) -> str:
    """One row per figure, one column per policy, then each policy's ratio to first fit."""
    policies = list(found)
    base = found.get(FIRST_FIT)
    others = [p for p in policies if p != FIRST_FIT] if base is not None else []
    rows = [["figure", *policies, *(f"{p} / first-fit" for p in others)]]
    for key in found[policies[0]]:
        cells = [key, *(f"{found[p][key]:.3f}" for p in policies)]
        if base is not None:
            cells += [f"{found[p][key] / base[key]:.3f}" if base[key] else "-" for p in others]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.mig")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per node (1-8)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7")
    parser.add_argument("--depart", type=float, default=0.3)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        found = run(seeds, args.gpus, args.requests, args.depart, policies, args.nodes)
    except ValueError as error:
        parser.exit(2, f"python -m hack.bench.mig: {error}\n")
    print(json.dumps(found, indent=2) if args.output == "json" else table(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
