"""The CEL evaluator loaded by the first selector (`scheduler.dra.cel_on_demand`): nothing is
built before a `matches` call, and then the verdicts, errors and memo are `CelSelectors`'. That the
daemon starts without importing cel-expr-python at all is checked in a fresh interpreter by
tests/unit/scheduler/test_lazy_client.py."""

from __future__ import annotations

import pytest

from scheduler.dra.cel import CelSelectors
from scheduler.dra.cel_on_demand import CelOnDemand
from scheduler.dra.selectors import SelectorError
from scheduler.model.devices import Device

DRIVER = "gpu.nvidia.com"
H200 = Device("gpu-0", attributes={f"{DRIVER}/productName": "NVIDIA H200", f"{DRIVER}/index": 0})
EXPRESSIONS = (
    f"device.attributes['{DRIVER}'].productName == 'NVIDIA H200'",
    f"device.attributes['{DRIVER}'].index > 3",
    "device.driver == 'gpu.nvidia.com'",
)


def test_nothing_is_built_before_the_first_selector() -> None:
    matcher = CelOnDemand()
    assert not matcher.loaded
    matcher.matches(EXPRESSIONS[0], DRIVER, H200, ("pool", 1, "gpu-0"))
    assert matcher.loaded
    assert matcher.selectors.counters.compilations == 1


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_verdicts_are_those_of_cel_selectors(expression: str) -> None:
    key = ("pool", 1, "gpu-0")
    assert CelOnDemand().matches(expression, DRIVER, H200, key) == CelSelectors().matches(
        expression, DRIVER, H200, key
    )


def test_a_bad_selector_raises_the_same_error() -> None:
    expression = "device.driver == 1"
    with pytest.raises(SelectorError) as direct:
        CelSelectors().matches(expression, DRIVER, H200, "k")
    with pytest.raises(SelectorError) as deferred:
        CelOnDemand().matches(expression, DRIVER, H200, "k")
    assert str(deferred.value) == str(direct.value)


def test_the_cache_sizes_reach_the_evaluator() -> None:
    matcher = CelOnDemand(program_cache_size=1, memo_size=1)
    for index, expression in enumerate(EXPRESSIONS):
        matcher.matches(expression, DRIVER, H200, index)
    assert matcher.selectors.cached_programs == 1
    assert matcher.selectors.memo_entries == 1
