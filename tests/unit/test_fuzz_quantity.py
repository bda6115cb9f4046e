"""Fuzz Kubernetes quantities: `QuantityError` or a number, with bounded messages."""

from __future__ import annotations

from decimal import localcontext
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler.model.quantity import QuantityError, base_units, cpu_millis, parse_quantity
from tests.fuzzing import FUZZ, bounded, huge, huge_integers, json_values

quantity_like = st.from_regex(
    r"[+-]?([0-9]{0,40}(\.[0-9]{0,30})?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,6})?",
    fullmatch=True,
)
values: st.SearchStrategy[Any] = st.one_of(
    quantity_like,
    st.text(max_size=80),
    huge(st.text(alphabet="0123456789.eEKMGi+-", min_size=1, max_size=8)),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    huge_integers(),
    st.floats(),
    json_values(),
)


@FUZZ
@given(values)
def test_fuzz_quantity(value: Any) -> None:
    for parse in (parse_quantity, cpu_millis, base_units):
        try:
            parse(value)
        except QuantityError as error:
            assert bounded(error), len(str(error))


@FUZZ
@given(quantity_like)
def test_fuzz_quantity_rounding_is_monotone(value: str) -> None:
    try:
        exact = parse_quantity(value)
    except QuantityError:
        return
    with localcontext(prec=200):  # exact products, whatever the digits
        assert base_units(value) >= exact
        assert cpu_millis(value) >= exact * 1000
        assert cpu_millis(value) - exact * 1000 < 1
