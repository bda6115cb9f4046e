"""Shared GPUs in the control-plane benchmark (`python -m hack.bench.control_plane --dra
--shared SHARE`): the pods that ask for part of one GPU, and what each scheduler left partly
used.

- Nodes: `S8` instead of `D8` (`hack.bench.dra_workload.dra_node_specs(shared=True)`): the same
  eight H200 GPUs in two NVLink domains, each published with `allowMultipleAllocations` and its
  `memory` (143771Mi) as a consumable capacity, default 140Gi, shares from 1Gi in steps of 1Gi
  (DRAConsumableCapacity; `hack.localcluster.dra.shared_gpu_capacity`). A whole-GPU claim (the
  templates `gpus-<n>`, no capacity request) consumes the default, so it takes each GPU
  practically whole: what is left, less than 1Gi, serves no share.
- Which pods share (`share_requests`, seeded): about SHARE of the pods. Each names the template
  `share-<n>gi` (`share_template_manifest`): one request `gpus` of exactly one device of the
  class `gpu.nvidia.com` with `capacity.requests.memory: <n>Gi`. The other pods are the DRA
  mode's (whole GPUs through `gpus-<n>`, or `nvidia.com/gpu`). In the GPU sizes of the pod set
  (`shared_sizes`) a share pod counts 0 whole GPUs, so the table's "GPUs" are whole GPUs.
- Share sizes: the gpu_milli distribution of the openb GPU-sharing trace (`OPENB_SHARE_MILLI`),
  as that fraction of an H200's 140Gi, rounded up to whole Gi (`share_gib`): 7Gi to 114Gi, a
  third of them 114Gi (gpu_milli 810) and a quarter 66Gi (470). The trace's fraction is of a
  GPU as one resource; here it is read as memory. `--share-sizes 10,20,40,70` draws from the
  sizes given instead, with equal weights (`parse_share_sizes`).
- Read back (`Share.of`, `share_use`), from the results of the claims still allocated when a run
  ends: the share pods holding a share; how many of those results carry the `shareID` and the
  `consumedCapacity` (the memory asked) that an allocator with DRAConsumableCapacity writes, so
  that the table shows whether a scheduler allocated shares at all; the GPUs holding at least
  one share (partly used) and the nodes they are on; and, for scale, the GPUs the same shares
  take packed offline by first-fit decreasing (`first_fit_decreasing`), and the fewest any
  packing could use (their memory over 140Gi, rounded up).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from hack.bench.dra_workload import (
    Json,
    claim_template_manifest,
    dra_pod_manifest,
    extended_pod_manifest,
)
from hack.localcluster.dra import H200_GPU, whole_share_gib
from scheduler.model.quantity import QuantityError, parse_quantity

OPENB_SHARE_MILLI: tuple[tuple[int, int], ...] = (
    (50, 14),
    (110, 58),
    (140, 1),
    (160, 154),
    (220, 141),
    (230, 337),
    (270, 9),
    (290, 3),
    (320, 800),
    (330, 16),
    (350, 19),
    (370, 111),
    (440, 3),
    (460, 304),
    (470, 1723),
    (480, 40),
    (550, 143),
    (590, 180),
    (650, 572),
    (810, 2436),
)
"""(gpu_milli, pods) over the 7,064 GPU pods of `openb_pod_list_gpushare100.csv`, every one of
which shares one GPU (Alibaba cluster-trace-gpu-v2023, github.com/alibaba/clusterdata; Weng et
al., "Beware of Fragmentation", USENIX ATC '23). The 3,078 sharing pods of the default trace,
`openb_pod_list_default.csv`, are spread over the same values in the same shares within a
percentage point."""
WHOLE_MILLI = 1000
WHOLE_GIB = whole_share_gib(H200_GPU)
"""What a whole-GPU claim consumes of an S8 GPU, and the most its shares can add up to: 140Gi."""
GIB = 1 << 30
SHARE_STREAM = 0x5A
"""Mixed into the seed, so that the share draws do not repeat the GPU-size draws."""


def share_gib(milli: int, whole_gib: int = WHOLE_GIB) -> int:
    """`milli` thousandths of a GPU of `whole_gib` as whole Gi, rounded up."""
    return -(-milli * whole_gib // WHOLE_MILLI)


def share_requests(
    count: int, share: float, seed: int, sizes: Sequence[int] = ()
) -> dict[int, int]:
    """Pod index -> the Gi of one GPU's memory it asks for, for about `share` of `count` pods,
    sizes drawn from `OPENB_SHARE_MILLI`, or from `sizes` (Gi) with equal weights when given
    (the same for the same arguments)."""
    rng = np.random.default_rng([seed, SHARE_STREAM])
    chosen = rng.random(count) < share  # chosen: (count,)
    if sizes:
        gib = np.asarray(sizes)  # gib: (values,)
        weights = np.ones(len(sizes))  # weights: (values,)
    else:
        gib = np.asarray([share_gib(m) for m, _ in OPENB_SHARE_MILLI])  # gib: (values,)
        weights = np.asarray([n for _, n in OPENB_SHARE_MILLI], dtype=float)  # weights: (values,)
    drawn = rng.choice(gib, size=count, p=weights / weights.sum())  # drawn: (count,)
    return {int(i): int(drawn[i]) for i in np.flatnonzero(chosen)}


def parse_share_sizes(text: str) -> tuple[int, ...]:
    """`10,20,40` -> (10, 20, 40): share sizes in Gi, each from 1 to `WHOLE_GIB`; raises
    ValueError naming the first bad item."""
    sizes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if not item.isdecimal() or not 1 <= int(item) <= WHOLE_GIB:
            raise ValueError(
                f"share size {item[:20]!r} is not a whole number of Gi, 1..{WHOLE_GIB}"
            )
        sizes.append(int(item))
    if not sizes:
        raise ValueError("no share size given")
    return tuple(sizes)


def shared_sizes(sizes: Sequence[int], shares: Mapping[int, int]) -> list[int]:
    """Whole GPUs asked by each pod: `sizes`, with 0 for the pods of `shares`."""
    return [0 if index in shares else gpus for index, gpus in enumerate(sizes)]


def share_template_name(gib: int) -> str:
    return f"share-{gib}gi"


def share_template_manifest(gib: int) -> Json:
    """The ResourceClaimTemplate `share-<gib>gi`: one GPU, `capacity.requests.memory` of it."""
    template = claim_template_manifest(1)
    template["metadata"]["name"] = share_template_name(gib)
    [request] = template["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["capacity"] = {"requests": {"memory": f"{gib}Gi"}}
    return template


def share_pod_manifest(
    name: str, gib: int, scheduler_name: str, node_selector: Mapping[str, str]
) -> Json:
    """A pod asking for `gib` Gi of one GPU through the template of that size."""
    manifest = dra_pod_manifest(name, 1, scheduler_name, node_selector)
    [claim] = manifest["spec"]["resourceClaims"]
    claim["resourceClaimTemplateName"] = share_template_name(gib)
    return manifest


@dataclass(frozen=True)
class DraPods:
    """What each pod of a DRA run asks for: a share of one GPU (`shares`, index -> Gi), else
    `nvidia.com/gpu` (`extended`), else whole GPUs through the template of its size."""

    shares: Mapping[int, int]
    extended: frozenset[int] = frozenset()

    def manifest(
        self,
        index: int,
        name: str,
        gpus: int,
        scheduler_name: str,
        node_selector: Mapping[str, str],
    ) -> Json:
        if index in self.shares:
            return share_pod_manifest(name, self.shares[index], scheduler_name, node_selector)
        make = extended_pod_manifest if index in self.extended else dra_pod_manifest
        return make(name, gpus, scheduler_name, node_selector)

    def templates(self) -> list[Json]:
        """The share templates the pods name, one per size."""
        return [share_template_manifest(gib) for gib in sorted(set(self.shares.values()))]


@dataclass(frozen=True)
class Share:
    """One result of a claim's allocation, as far as sharing goes."""

    pool: str
    device: str
    share_id: str | None
    """The result's `shareID`; None when it has none (the device was allocated whole)."""
    consumed_memory: Decimal | None
    """`consumedCapacity.memory` in bytes; None when absent or not a quantity."""

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> Share:
        consumed = (result.get("consumedCapacity") or {}).get("memory")
        try:
            memory = parse_quantity(consumed) if consumed is not None else None
        except QuantityError:
            memory = None
        share_id = result.get("shareID")
        return cls(
            pool=str(result.get("pool")),
            device=str(result.get("device")),
            share_id=str(share_id) if share_id else None,
            consumed_memory=memory,
        )

    def records(self, gib: int) -> bool:
        """Whether this result is a share of `gib` Gi as DRAConsumableCapacity writes one."""
        return self.share_id is not None and self.consumed_memory == gib * GIB


@dataclass(frozen=True)
class ShareUse:
    """What one run's share pods held when it ended (`share_use`)."""

    share_pods: int
    """Share pods whose claim held an allocation."""
    recorded: int
    """Of those, the ones whose every result has a `shareID` and `consumedCapacity` of the
    memory asked."""
    shared_gpus: int
    """GPUs holding at least one share: partly used."""
    shared_nodes: int
    """Nodes (pools) holding at least one share."""
    fewest_gpus: int
    """No packing of the shares fits on fewer GPUs: their memory over `WHOLE_GIB`, rounded up."""
    packed_gpus: int
    """The GPUs the shares take when packed offline, largest first, each into the first GPU
    with room (`first_fit_decreasing`): a packing any scheduler could reach."""


def first_fit_decreasing(shares: Iterable[int], whole: int = WHOLE_GIB) -> int:
    """Bins of size `whole` that first-fit decreasing packs `shares` into."""
    free: list[int] = []
    for share in sorted(shares, reverse=True):
        room = next((index for index, left in enumerate(free) if left >= share), None)
        if room is None:
            free.append(whole - share)
        else:
            free[room] -= share
    return len(free)


def share_use(
    results: Mapping[str, Iterable[Mapping[str, Any]]],
    asked: Mapping[str, int],
    released: Collection[str] = (),
    whole_gib: int = WHOLE_GIB,
) -> ShareUse:
    """`ShareUse` of the pods of `asked` (pod name -> Gi asked) whose claim's allocation
    `results` holds (pod name -> its results, `AllocatedClaims.results`), leaving out those
    `released` (their allocation seen gone: a pod deleted under churn)."""
    held = {
        pod: [Share.of(result) for result in results[pod]]
        for pod in asked
        if pod in results and pod not in released
    }
    recorded = sum(1 for pod, shares in held.items() if all(s.records(asked[pod]) for s in shares))
    gpus = {(s.pool, s.device) for shares in held.values() for s in shares}
    memory = [asked[pod] for pod in held]
    return ShareUse(
        share_pods=len(held),
        recorded=recorded,
        shared_gpus=len(gpus),
        shared_nodes=len({pool for pool, _ in gpus}),
        fewest_gpus=math.ceil(sum(memory) / whole_gib),
        packed_gpus=first_fit_decreasing(memory, whole_gib),
    )


SHARE_HEADER = f" {'shared GPUs (FFD)':>17} {'on nodes':>8} {'shareIDs':>11}"


def share_cells(use: ShareUse | None) -> str:
    """The table's cells for `SHARE_HEADER`: partly used GPUs (and how many the shares take
    packed offline), the nodes they are on, and the share pods whose results carry a shareID
    and consumedCapacity, of those holding an allocation."""
    if use is None:
        return f" {'-':>17} {'-':>8} {'-':>11}"
    gpus = f"{use.shared_gpus:,} ({use.packed_gpus:,})"
    ids = f"{use.recorded:,}/{use.share_pods:,}"
    return f" {gpus:>17} {use.shared_nodes:>8,} {ids:>11}"
