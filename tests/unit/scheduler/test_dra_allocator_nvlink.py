"""The NVLink-aware device order: with a device -> domain map the first solution keeps a request
in one domain when one has room (the tightest), else spans as few as it can; without the map the
order is upstream's. Seeded property tests check that the map never changes feasibility, that
every allocation returned satisfies its claim, and that a one-domain solution is returned
whenever a brute-force search finds one (single-request claims)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.dra.allocator import AllocationError, NodeAllocation
from scheduler.dra.allocator_constraints import lookup_attribute, same_value
from scheduler.dra.allocator_select import taint_prevents
from scheduler.model.claims import ResourceClaim
from scheduler.model.devices import Device
from scheduler.model.pools import Pool
from tests.dra_objects import DRIVER, GPU_CLASS_SELECTOR, exact, gpu_device, request, taint
from tests.dra_objects import toleration as toleration_json
from tests.unit.scheduler.test_dra_alloc_support import (
    GOOD,
    HIGH,
    PREDICATES,
    allocate,
    device_names,
    gpu_id,
    make_claim,
    node_slice,
    pools_of,
)

EIGHT = pools_of(node_slice())
TWO_DOMAINS = {gpu_id(i): i // 4 for i in range(8)}


def domains_of(result: NodeAllocation, domains: Mapping[tuple[str, str, str], int]) -> list[int]:
    assert result.allocations is not None, result.reason
    return [domains.get(r.device_id, -1) for a in result.allocations for r in a.results]


def gpu_names(*indices: int) -> list[str]:
    return [f"gpu-{index}" for index in indices]


@pytest.mark.parametrize(
    ("in_use", "count", "domains", "with_map", "without_map"),
    [
        pytest.param((0,), 2, TWO_DOMAINS, gpu_names(1, 2), gpu_names(1, 2), id="brief-case"),
        pytest.param((4,), 2, TWO_DOMAINS, gpu_names(5, 6), gpu_names(0, 1), id="tightest"),
        pytest.param((0, 1, 2), 2, TWO_DOMAINS, gpu_names(4, 5), gpu_names(3, 4), id="one-domain"),
        pytest.param(
            (),
            6,
            {**{gpu_id(i): 0 for i in (0, 1)}, **{gpu_id(i): 1 for i in (2, 3)}}
            | {gpu_id(i): 2 for i in range(4, 8)},
            gpu_names(4, 5, 6, 7, 0, 1),
            gpu_names(*range(6)),
            id="fewest-domains-largest-first",
        ),
        pytest.param(
            (),
            2,
            {
                gpu_id(0): -1,
                **{gpu_id(i): 0 for i in (2, 3)},
                **{gpu_id(i): 1 for i in range(4, 8)},
            },
            gpu_names(2, 3),
            gpu_names(0, 1),
            id="tightest-known-domain",
        ),
        pytest.param(
            (),
            7,
            {
                gpu_id(0): -1,
                **{gpu_id(i): 0 for i in (2, 3)},
                **{gpu_id(i): 1 for i in range(4, 8)},
            },
            gpu_names(4, 5, 6, 7, 2, 3, 0),
            gpu_names(*range(7)),
            id="unknown-domains-last",
        ),
    ],
)
def test_order(
    in_use: tuple[int, ...],
    count: int,
    domains: dict[tuple[str, str, str], int],
    with_map: list[str],
    without_map: list[str],
) -> None:
    claim = make_claim("c", request("gpus", exact(count=count)))
    used = frozenset(gpu_id(i) for i in in_use)
    assert device_names(allocate([claim], EIGHT, in_use=used, domains=domains)) == with_map
    assert device_names(allocate([claim], EIGHT, in_use=used)) == without_map


def test_the_brief_case_lands_in_the_tightest_domain() -> None:
    claim = make_claim("c", request("gpus", exact(count=2)))
    result = allocate([claim], EIGHT, in_use=frozenset({gpu_id(0)}), domains=TWO_DOMAINS)
    assert domains_of(result, TWO_DOMAINS) == [0, 0]


def test_later_requests_prefer_the_claims_domain() -> None:
    claim = make_claim("c", request("a", exact(expressions=(HIGH,))), request("b", exact()))
    used = frozenset(gpu_id(i) for i in (0, 1, 2))
    result = allocate([claim], EIGHT, in_use=used, domains=TWO_DOMAINS)
    assert device_names(result) == gpu_names(6, 4)
    assert device_names(allocate([claim], EIGHT, in_use=used)) == gpu_names(6, 3)


def test_a_constraint_that_breaks_the_tightest_domain_still_finds_one_domain() -> None:
    # Domain 0 (gpu-0..3, gpu-1 in use) has 3 free but no two on one PCIe root but gpu-2/3;
    # with gpu-3 in use too, only domain 1 has a pair.
    claim = make_claim(
        "c",
        request("gpus", exact(count=2)),
        constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
    )
    used = frozenset(gpu_id(i) for i in (1, 3, 4))
    result = allocate([claim], EIGHT, in_use=used, domains=TWO_DOMAINS)
    assert device_names(result) == gpu_names(6, 7)


# Seeded properties ---------------------------------------------------------------------------

ROOT = f"{DRIVER}/root"


@dataclass
class Case:
    pools: tuple[Pool, ...]
    in_use: frozenset[tuple[str, str, str]]
    domains: dict[tuple[str, str, str], int]
    claims: list[ResourceClaim]


def random_request(rng: random.Random, name: str, allow_all: bool) -> dict[str, Any]:
    def spec(**extra: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if rng.random() < 0.3:
            fields["tolerations"] = [toleration_json("bad", "Exists")]
        expressions = (GOOD,) if rng.random() < 0.3 else ()
        if allow_all and rng.random() < 0.1:
            return exact(mode="All", count=None, expressions=expressions, **fields, **extra)
        if not extra and rng.random() < 0.05:
            fields["adminAccess"] = True
        return exact(count=rng.randint(1, 3), expressions=expressions, **fields, **extra)

    if rng.random() < 0.2:
        return request(name, None, spec(name="x"), spec(name="y"))
    return request(name, spec())


def random_case(seed: int, single: bool = False) -> Case:
    rng = random.Random(seed)
    devices: list[dict[str, Any]] = []
    for index in range(rng.randint(4, 8)):
        attributes: dict[str, dict[str, Any]] = {
            "root": {"int": rng.randint(0, 2)},
            "good": {"bool": rng.random() < 0.6},
        }
        taints = [taint("bad")] if rng.random() < 0.15 else []
        devices.append(gpu_device(index, attributes=attributes, taints=taints))
    pools = pools_of(node_slice(devices=devices))
    ids = [gpu_id(index) for index in range(len(devices))]
    in_use = frozenset(device for device in ids if rng.random() < 0.2)
    blocks = rng.random() < 0.5
    domains = {
        device: (index * 3 // len(ids) if blocks else rng.choice((0, 1, 2, -1)))
        for index, device in enumerate(ids)
    }
    claims = []
    for claim_index in range(1 if single else rng.randint(1, 2)):
        constraints = []
        if rng.random() < 0.4:
            constraints = [{rng.choice(("matchAttribute", "distinctAttribute")): ROOT}]
        count = 1 if single else rng.randint(1, 2)
        requests = [
            request("r0", exact(count=rng.randint(1, 3), expressions=(GOOD,) * rng.randint(0, 1)))
            if single
            else random_request(rng, f"r{index}", allow_all=not constraints)
            for index in range(count)
        ]
        claims.append(make_claim(f"c{claim_index}", *requests, constraints=constraints))
    return Case(pools, in_use, domains, claims)


def outcome(case: Case, domains: Mapping[tuple[str, str, str], int] | None) -> NodeAllocation | str:
    try:
        result = allocate(case.claims, case.pools, in_use=case.in_use, domains=domains)
    except AllocationError as error:
        return str(error)
    assert not result.exceeded
    return result


def matches(device: Device, expressions: Sequence[str]) -> bool:
    return all(PREDICATES[e](device) for e in (GPU_CLASS_SELECTOR, *expressions))


def check_allocation(case: Case, result: NodeAllocation) -> None:
    """Every claim's results satisfy its requests, constraints, taints and the in-use set."""
    assert result.allocations is not None
    devices = {(DRIVER, p.id.pool, e.device.name): e.device for p in case.pools for e in p.devices}
    taken_by: dict[tuple[str, str, str], int] = {}
    for claim_index, (claim, allocation) in enumerate(
        zip(case.claims, result.allocations, strict=True)
    ):
        for req in claim.spec.requests:
            used = [r for r in allocation.results if r.request.split("/")[0] == req.name]
            refs = {r.request for r in used}
            [spec] = [spec for ref, spec in req.alternatives if ref in refs]
            chosen = [devices[r.device_id] for r in used]
            assert all(matches(d, spec.selectors) for d in chosen)
            assert not any(taint_prevents(d, spec) for d in chosen)
            if spec.allocation_mode == "All":
                every = [d for d in devices.values() if matches(d, spec.selectors)]
                assert sorted(d.name for d in chosen) == sorted(d.name for d in every)
            else:
                assert len(chosen) == spec.count
            for r in used:
                assert r.admin_access == spec.admin_access
                if not spec.admin_access:
                    assert r.device_id not in case.in_use
                    assert r.device_id not in taken_by
        ids = [r.device_id for r in allocation.results]
        assert len(ids) == len(set(ids))
        for r in allocation.results:
            if not r.admin_access:
                taken_by[r.device_id] = claim_index
        for constraint in claim.spec.constraints:
            name = constraint.match_attribute or constraint.distinct_attribute
            values = [lookup_attribute(devices[i], DRIVER, name) for i in ids]
            assert all(v is not None for v in values)
            pairs = list(itertools.combinations(values, 2))
            if constraint.match_attribute:
                assert all(same_value(a, b) for a, b in pairs)  # type: ignore[arg-type]
            else:
                assert not any(same_value(a, b) for a, b in pairs)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(300))
def test_the_map_changes_no_outcome_and_every_allocation_holds(seed: int) -> None:
    case = random_case(seed)
    plain = outcome(case, None)
    aware = outcome(case, case.domains)
    if isinstance(plain, str) or isinstance(aware, str):
        assert plain == aware
        return
    assert (plain.allocations is None) == (aware.allocations is None), (plain, aware)
    assert plain.reason == aware.reason
    for result in (plain, aware):
        if result.allocations is not None:
            check_allocation(case, result)


def one_domain_exists(case: Case) -> bool:
    [claim] = case.claims
    [req] = claim.spec.requests
    spec = req.exactly
    assert spec is not None
    usable = [
        (gpu_id(int(entry.device.name.split("-")[1])), entry.device)
        for pool in case.pools
        for entry in pool.devices
        if matches(entry.device, spec.selectors)
        and not taint_prevents(entry.device, spec)
        and gpu_id(int(entry.device.name.split("-")[1])) not in case.in_use
    ]
    for domain in {d for d in case.domains.values() if d >= 0}:
        inside = [device for device_id, device in usable if case.domains[device_id] == domain]
        for combo in itertools.combinations(inside, spec.count):
            values = [
                lookup_attribute(d, DRIVER, c.match_attribute or c.distinct_attribute)
                for c in claim.spec.constraints
                for d in combo
            ]
            if not claim.spec.constraints:
                return True
            [constraint] = claim.spec.constraints
            if any(v is None for v in values):
                continue
            pairs = list(itertools.combinations(values, 2))
            if constraint.match_attribute and all(same_value(a, b) for a, b in pairs):  # type: ignore[arg-type]
                return True
            if constraint.distinct_attribute and not any(same_value(a, b) for a, b in pairs):  # type: ignore[arg-type]
                return True
    return False


@pytest.mark.parametrize("seed", range(300))
def test_a_one_domain_solution_is_found_whenever_one_exists(seed: int) -> None:
    case = random_case(10_000 + seed, single=True)
    result = outcome(case, case.domains)
    assert not isinstance(result, str)
    if one_domain_exists(case):
        spread = domains_of(result, case.domains)
        assert len(set(spread)) == 1 and spread[0] >= 0, spread
    elif result.allocations is not None:
        check_allocation(case, result)
