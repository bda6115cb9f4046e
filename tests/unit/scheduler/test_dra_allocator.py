"""The structured allocator against kube-scheduler's semantics (k8s.io/dynamic-resource-
allocation@v0.37.2 structured/internal/incubating): counts, All, selectors, constraints,
firstAvailable, admin access, taints, in-use devices, earlier claims of the same attempt, the
32-result limit, unusable pools, the outcome's wording and the step budget."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.dra.allocator import (
    CANNOT_ALLOCATE,
    INVALID_POOLS,
    AllocationError,
    missing_device_class,
)
from scheduler.dra.allocator_constraints import lookup_attribute, same_value
from scheduler.dra.selectors import SelectorError
from scheduler.model.device_classes import DeviceClass
from scheduler.model.devices import Device
from scheduler.model.pools import PoolID
from scheduler.model.semver import parse_version
from tests.dra_objects import (
    DRIVER,
    exact,
    request,
    taint,
    toleration,
)
from tests.unit.scheduler.test_dra_alloc_support import (
    BROKEN,
    CLASSES,
    GOOD,
    HIGH,
    NODE,
    ODD,
    MatcherDouble,
    allocate,
    device_names,
    gpu_id,
    gpus,
    make_claim,
    node_slice,
    pools_of,
)

ROOT = "resource.kubernetes.io/pcieRoot"
"""gpu-0/1 share root 00, gpu-2/3 root 01, and so on."""

EIGHT = pools_of(node_slice())


def names(*indices: int) -> list[str]:
    return [f"gpu-{index}" for index in indices]


@pytest.mark.parametrize(
    ("requests", "spec", "in_use", "chosen"),
    [
        pytest.param([request("gpus", exact(count=2))], {}, (), names(0, 1), id="first-fit"),
        pytest.param([request("gpus", exact(count=2))], {}, (0,), names(1, 2), id="in-use"),
        pytest.param([request("gpus", exact(count=8))], {}, (), names(*range(8)), id="all-eight"),
        pytest.param(
            [request("gpus", exact(count=2, expressions=(ODD,)))],
            {},
            (1,),
            names(3, 5),
            id="request-selector",
        ),
        pytest.param(
            [request("gpus", exact(count=2))],
            {"constraints": [{"matchAttribute": ROOT}]},
            (1,),
            names(2, 3),
            id="match-attribute-skips-a-broken-pair",
        ),
        pytest.param(
            [request("gpus", exact(count=3))],
            {"constraints": [{"distinctAttribute": ROOT}]},
            (),
            names(0, 2, 4),
            id="distinct-attribute",
        ),
        pytest.param(
            [request("a", exact()), request("b", exact(expressions=(HIGH,)))],
            {"constraints": [{"matchAttribute": ROOT}]},
            (),
            names(6, 7),
            id="backtracks-into-an-earlier-request",
        ),
        pytest.param(
            [request("a", exact()), request("b", exact(expressions=(HIGH,)))],
            {"constraints": [{"requests": ["a"], "matchAttribute": ROOT}]},
            (),
            names(0, 6),
            id="constraint-only-on-named-requests",
        ),
        pytest.param(
            [request("gpus", exact(mode="All", count=None, expressions=(ODD,)))],
            {},
            (0,),
            names(1, 3, 5, 7),
            id="all-matching",
        ),
        pytest.param(
            [request("a", exact(adminAccess=True)), request("b", exact(adminAccess=True))],
            {},
            tuple(range(8)),
            names(0, 1),
            id="admin-access-ignores-in-use-but-not-its-own-claim",
        ),
    ],
)
def test_devices_chosen(
    requests: list[dict[str, Any]], spec: dict[str, Any], in_use: tuple[int, ...], chosen: list[str]
) -> None:
    claim = make_claim("c", *requests, **spec)
    result = allocate([claim], EIGHT, in_use=frozenset(gpu_id(i) for i in in_use))
    assert result.reason == "" and not result.exceeded
    assert device_names(result) == chosen


@pytest.mark.parametrize(
    ("requests", "spec", "in_use"),
    [
        pytest.param([request("gpus", exact(count=9))], {}, (), id="too-many"),
        pytest.param([request("gpus", exact(count=2))], {}, tuple(range(7)), id="in-use"),
        pytest.param(
            [request("gpus", exact(mode="All", count=None))], {}, (3,), id="all-needs-every-one"
        ),
        pytest.param(
            [request("gpus", exact(mode="All", count=None, expressions=(GOOD,)))],
            {},
            (),
            id="all-needs-at-least-one",
        ),
        pytest.param(
            [request("gpus", exact(count=2))],
            {"constraints": [{"matchAttribute": "example.com/missing"}]},
            (),
            id="constraint-attribute-missing",
        ),
        pytest.param(
            [request("gpus", exact(count=5))],
            {"constraints": [{"distinctAttribute": ROOT}]},
            (),
            id="only-four-roots",
        ),
    ],
)
def test_unschedulable_on_the_node(
    requests: list[dict[str, Any]], spec: dict[str, Any], in_use: tuple[int, ...]
) -> None:
    claim = make_claim("c", *requests, **spec)
    result = allocate([claim], EIGHT, in_use=frozenset(gpu_id(i) for i in in_use))
    assert result.allocations is None and result.reason == CANNOT_ALLOCATE
    assert not result.exceeded and result.steps > 0


def test_devices_chosen_for_earlier_claims_are_not_offered_again() -> None:
    claims = [make_claim(name, request("gpus", exact(count=3))) for name in ("a", "b")]
    result = allocate(claims, EIGHT)
    assert device_names(result, 0) == names(0, 1, 2)
    assert device_names(result, 1) == names(3, 4, 5)
    third = make_claim("c", request("gpus", exact(count=3)))
    assert allocate([*claims, third], EIGHT).reason == CANNOT_ALLOCATE


def test_a_normal_claim_after_an_admin_claim_does_not_share_its_device() -> None:
    admin = make_claim("admin", request("gpus", exact(adminAccess=True)))
    normal = make_claim("normal", request("gpus", exact()))
    result = allocate([admin, normal], EIGHT)
    assert device_names(result, 0) == names(0) and device_names(result, 1) == names(1)
    assert result.allocations is not None
    assert result.allocations[0].results[0].admin_access
    assert not result.allocations[1].results[0].admin_access


def test_first_available_tries_entries_in_order_and_names_the_chosen_one() -> None:
    claim = make_claim(
        "c",
        request(
            "gpus",
            None,
            exact(count=9, name="nine"),
            exact(count=33, name="too-many"),
            exact(count=2, name="two", expressions=(HIGH,)),
        ),
    )
    result = allocate([claim], EIGHT)
    assert result.allocations is not None
    assert [(r.request, r.device) for r in result.allocations[0].results] == [
        ("gpus/two", "gpu-6"),
        ("gpus/two", "gpu-7"),
    ]


def test_the_32_result_limit_per_claim() -> None:
    slices = [
        node_slice(f"s{index}", pool=f"p{index}", devices=gpus(*range(8))) for index in range(5)
    ]
    pools = pools_of(*slices)
    over = make_claim("c", request("a", exact(count=20)), request("b", exact(count=13)))
    with pytest.raises(AllocationError) as caught:
        allocate([over], pools)
    assert str(caught.value) == (
        "claim default/c, request b: adding 13 devices exceeds the claim limit of 32, "
        "with 20 already accounted for"
    )
    fits = make_claim("c", request("a", exact(count=20)), request("b", exact(count=12)))
    assert len(device_names(allocate([fits], pools))) == 32
    # An entry that needs fewer devices wins when the first would pass the limit.
    entries = make_claim(
        "c",
        request("a", exact(count=20)),
        request("b", None, exact(count=13, name="big"), exact(count=12, name="small")),
    )
    result = allocate([entries], pools)
    assert result.allocations is not None
    assert {r.request for r in result.allocations[0].results[20:]} == {"b/small"}


def test_a_missing_class_fails_the_attempt_with_upstreams_words() -> None:
    claim = make_claim("c", request("gpus", exact("missing.example.com")))
    with pytest.raises(AllocationError) as caught:
        allocate([claim], EIGHT)
    assert str(caught.value) == (
        "claim default/c, request gpus: could not retrieve device class missing.example.com: "
        'deviceclass.resource.k8s.io "missing.example.com" not found'
    )


def test_missing_device_class_words_it_as_prefilter_does() -> None:
    good = make_claim("good", request("gpus", exact()))
    entry = make_claim("c", request("gpus", None, exact(name="one"), exact("nope", name="two")))
    assert missing_device_class([good], CLASSES) == ""
    assert missing_device_class([good, entry], CLASSES) == (
        "request gpus/two: device class nope does not exist"
    )
    plain = make_claim("c", request("gpus", exact("nope")))
    assert (
        missing_device_class([plain], CLASSES) == "request gpus: device class nope does not exist"
    )


def test_class_selectors_come_first_and_the_memo_key_names_the_device() -> None:
    classes = {DRIVER: CLASSES[DRIVER], "odd": DeviceClass("odd", (ODD,))}
    claim = make_claim("c", request("gpus", exact("odd", expressions=(HIGH,))))
    result = allocate([claim], EIGHT, classes=classes)
    assert device_names(result) == names(7)
    broken = make_claim("c", request("gpus", exact(expressions=(BROKEN,))))
    with pytest.raises(SelectorError) as caught:
        allocate([broken], EIGHT)
    assert str(caught.value).startswith(
        f"claim default/c: selector #0 on device {DRIVER}/{NODE}/gpu-0: no such key"
    )
    broken_class = {DRIVER: DeviceClass(DRIVER, (BROKEN,))}
    plain = make_claim("c", request("gpus", exact()))
    with pytest.raises(SelectorError, match=f"^class {DRIVER}: selector #0 on device"):
        allocate([plain], EIGHT, classes=broken_class)
    matcher = MatcherDouble()
    allocate([make_claim("c", request("gpus", exact()))], EIGHT, matcher=matcher)
    assert matcher.keys[0] == (PoolID(DRIVER, NODE), 1, "s", "gpu-0")


@pytest.mark.parametrize(
    ("effect", "tolerations", "chosen"),
    [
        ("NoSchedule", [], names(1)),
        ("NoExecute", [], names(1)),
        ("None", [], names(0)),
        ("NoSchedule", [toleration("broken", "Exists")], names(0)),
        ("NoSchedule", [toleration("broken", value="other")], names(1)),
        ("NoExecute", [toleration(operator="Exists", effect="NoSchedule")], names(1)),
    ],
)
def test_taints(effect: str, tolerations: list[dict[str, Any]], chosen: list[str]) -> None:
    devices = [*gpus(0, taints=[taint("broken", effect)]), *gpus(1, 2)]
    pools = pools_of(node_slice(devices=devices))
    claim = make_claim("c", request("gpus", exact(tolerations=tolerations)))
    result = allocate([claim], pools)
    assert device_names(result) == chosen
    assert result.allocations is not None
    assert len(result.allocations[0].results[0].tolerations) == len(tolerations)


def test_unusable_pools() -> None:
    incomplete = node_slice("half", pool="p1", slice_count=2, devices=gpus(0, 1))
    good = node_slice("good", pool="p2", devices=gpus(0, 1))
    claim = make_claim("c", request("gpus", exact(count=2)))
    result = allocate([claim], pools_of(incomplete, good))
    assert result.allocations is not None
    assert {r.pool for r in result.allocations[0].results} == {"p2"}
    every = make_claim("c", request("gpus", exact(mode="All", count=None)))
    with pytest.raises(AllocationError) as caught:
        allocate([every], pools_of(incomplete, good))
    assert str(caught.value) == (
        f"claim default/c, request gpus: asks for all devices, but resource pool {DRIVER}/p1 "
        "is currently being updated"
    )


def test_an_invalid_pool_is_the_reason_only_when_nothing_fits() -> None:
    # Two slices of pool p1 both publish gpu-1: the pool is invalid.
    first = node_slice("a", pool="p1", slice_count=2, devices=gpus(0, 1))
    second = node_slice("b", pool="p1", slice_count=2, devices=gpus(1, 2))
    pools = pools_of(first, second, node_slice("good", pool="p2", devices=gpus(0)))
    assert any(pool.invalid for pool in pools)
    one = make_claim("c", request("gpus", exact()))
    assert device_names(allocate([one], pools)) == names(0)
    two = make_claim("c", request("gpus", exact(count=2)))
    assert allocate([two], pools).reason == INVALID_POOLS
    every = make_claim("c", request("gpus", exact(mode="All", count=None)))
    with pytest.raises(
        AllocationError, match=r"resource pool gpu\.nvidia\.com/p1 is currently invalid"
    ):
        allocate([every], pools)


def test_all_with_a_constraint_that_rules_a_device_out_is_an_error() -> None:
    claim = make_claim(
        "c",
        request("gpus", exact(mode="All", count=None)),
        constraints=[{"matchAttribute": ROOT}],
    )
    with pytest.raises(AllocationError) as caught:
        allocate([claim], EIGHT)
    assert str(caught.value) == (
        f"claim default/c, request gpus: cannot add device {DRIVER}/{NODE}/gpu-2 because a "
        "claim constraint would not be satisfied"
    )


def test_the_step_budget_reports_exceeded_distinctly() -> None:
    claim = make_claim(
        "c", request("gpus", exact(count=5)), constraints=[{"distinctAttribute": ROOT}]
    )
    result = allocate([claim], EIGHT, max_steps=50)
    assert result.allocations is None and result.exceeded
    assert result.reason == f"node {NODE}: timed out trying to allocate devices"
    assert result.steps == 51
    assert not allocate([claim], EIGHT).exceeded


def test_lookup_attribute_and_value_kinds() -> None:
    device = Device("d", attributes={"short": 1, "other.com/x": True})
    assert lookup_attribute(device, "drv.com", "drv.com/short") == 1
    assert lookup_attribute(device, "else.com", "drv.com/short") is None
    assert lookup_attribute(device, "drv.com", "other.com/x") is True
    assert not same_value(True, 1) and same_value(1, 1)
    version = parse_version("1.2.3")
    assert version is not None and not same_value(version, "1.2.3")
    assert same_value(version, parse_version("1.2.3"))  # type: ignore[arg-type]
