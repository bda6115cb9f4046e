"""MIG placement against first fit: the allocator over one M8-like node (H200 GPUs, each
published whole and as every MIG placement, `hack.localcluster.dra_mig`), fed a seeded stream
of MIG claims with departures, once with gpu-scheduler's fragmentation-aware order (a domain map
given, `scheduler.dra.partitions`) and once with upstream's first fit (no map). In this process,
no cluster.

    python -m hack.bench.mig [--gpus 2] [--requests 400] [--seeds 0,1,2,3,4,5,6,7]
        [--depart 0.3] [-o json]

Each step either releases one held device (probability `--depart`, when something is held) or
asks for one placement of a profile drawn with weights 1g.18gb 4, 1g.35gb 1, 2g.35gb 2,
3g.71gb 1, 4g.71gb 1. Both orders see the same seeded draws (per step: depart or not, the
profile, which held claim by its rank in arrival order), so they differ only where what they
hold differs. Figures per order, summed over the seeds:

- `placed`: asks that got a placement (a claim the order cannot place is dropped);
- `big placed`: the 3g and 4g asks among them;
- `largest`: the mean, over steps, of the largest profile still placeable on the node, in
  memory slices (8: a GPU is untouched; 4: a 3g/4g fits somewhere), its SM share as tiebreak
  left out;
- `4g placeable`: the share of steps at which a 4g.71gb could still be placed.

The ratio column is aware / first fit.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from hack.localcluster.dra import H200_GPU
from hack.localcluster.dra_mig import (
    H200_MIG_PROFILES,
    MIG_CLASS,
    mig_device_class,
    mig_resource_slices,
    placement_of,
)
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.dra.partitions import Placement, placeable_after
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.model.device_classes import parse_device_class
from scheduler.model.devices import parse_resource_slice
from scheduler.model.pools import Pool, gather_pools

NODE = "m8-0"
WEIGHTS = {"1g.18gb": 4, "1g.35gb": 1, "2g.35gb": 2, "3g.71gb": 1, "4g.71gb": 1}
BIG = {"3g.71gb", "4g.71gb"}
PROFILES = {p.name: p for p in H200_MIG_PROFILES}
GEOMETRY = [
    Placement(frozenset(range(s, s + p.memory_slices)), (p.memory_slices, Decimal(0)))
    for p in H200_MIG_PROFILES
    for s in p.starts
]


@dataclass
class Tally:
    placed: int = 0
    big_placed: int = 0
    asks: int = 0
    big_asks: int = 0
    largest_sum: int = 0
    four_g_steps: int = 0
    steps: int = 0


def claim_for(profile: str, index: int) -> ResourceClaim:
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
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


def node_pools(gpus: int) -> tuple[Pool, ...]:
    slices = [parse_resource_slice(s) for s in mig_resource_slices(NODE, "uid", H200_GPU, gpus)]
    return gather_pools(slices, NODE, {})


def occupancy(held: Sequence[str], gpus: int) -> list[frozenset[int]]:
    """Memory slices in use per GPU, from the names of held MIG devices."""
    used: list[set[int]] = [set() for _ in range(gpus)]
    for name in held:
        found = placement_of(name)
        assert found is not None, name
        gpu, profile, start = found
        used[gpu].update(range(start, start + PROFILES[profile].memory_slices))
    return [frozenset(u) for u in used]


def simulate(seed: int, gpus: int, requests: int, depart: float, aware: bool) -> Tally:
    rng = random.Random(seed)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    draws = [(rng.random(), rng.choices(names, weights)[0], rng.random()) for _ in range(requests)]
    pools = node_pools(gpus)
    classes = {MIG_CLASS: parse_device_class(mig_device_class())}
    matcher = CelSelectors()
    held: dict[int, str] = {}
    tally = Tally()
    for index, (leave, profile, which) in enumerate(draws):
        if held and leave < depart:
            held.pop(sorted(held)[int(which * len(held))])
        else:
            tally.asks += 1
            tally.big_asks += profile in BIG
            taken = frozenset(("gpu.nvidia.com", NODE, name) for name in held.values())
            outcome = Allocator(classes, taken, matcher).allocate(
                NODE, {}, pools, [claim_for(profile, index)], {} if aware else None
            )
            if outcome.allocations is not None:
                [result] = outcome.allocations[0].results
                held[index] = result.device_id[2]
                tally.placed += 1
                tally.big_placed += profile in BIG
        used = occupancy(list(held.values()), gpus)
        largest = max(placeable_after(u, GEOMETRY)[0] for u in used)
        tally.largest_sum += largest
        tally.four_g_steps += any(not u & frozenset(range(4)) for u in used)
        tally.steps += 1
    return tally


def summed(tallies: Sequence[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        for field in vars(total):
            setattr(total, field, getattr(total, field) + getattr(t, field))
    return total


def figures(t: Tally) -> dict[str, float]:
    return {
        "asks": t.asks,
        "placed": t.placed,
        "big asks": t.big_asks,
        "big placed": t.big_placed,
        "largest": t.largest_sum / max(t.steps, 1),
        "4g placeable": t.four_g_steps / max(t.steps, 1),
    }


def run(seeds: Sequence[int], gpus: int, requests: int, depart: float) -> dict[str, Any]:
    aware = summed([simulate(s, gpus, requests, depart, True) for s in seeds])
    first = summed([simulate(s, gpus, requests, depart, False) for s in seeds])
    return {"aware": figures(aware), "first fit": figures(first)}


def table(found: dict[str, Any]) -> str:
    lines = [f"{'figure':<14} {'aware':>9} {'first fit':>10} {'ratio':>7}"]
    for key in found["aware"]:
        a, f = found["aware"][key], found["first fit"][key]
        ratio = f"{a / f:.3f}" if f else "-"
        lines.append(f"{key:<14} {a:>9.3f} {f:>10.3f} {ratio:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.mig")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7")
    parser.add_argument("--depart", type=float, default=0.3)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    found = run(seeds, args.gpus, args.requests, args.depart)
    print(json.dumps(found, indent=2) if args.output == "json" else table(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
