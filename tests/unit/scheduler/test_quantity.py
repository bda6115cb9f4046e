"""Resource quantities: the grammar, exact values, rounding up, and rejection of anything else."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.model.quantity import QuantityError, base_units, cpu_millis, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Decimal(0)),
        ("1", Decimal(1)),
        ("+2", Decimal(2)),
        ("-3", Decimal(-3)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("2.", Decimal(2)),
        ("500m", Decimal("0.5")),
        ("1500m", Decimal("1.5")),
        ("3n", Decimal("3e-9")),
        ("7u", Decimal("7e-6")),
        ("1k", Decimal(1000)),
        ("2M", Decimal(2_000_000)),
        ("3G", Decimal(3 * 10**9)),
        ("4T", Decimal(4 * 10**12)),
        ("5P", Decimal(5 * 10**15)),
        ("6E", Decimal(6 * 10**18)),
        ("1Ki", Decimal(1024)),
        ("64Mi", Decimal(64 * 2**20)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2Ti", Decimal(2 * 2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("-1Ki", Decimal(-1024)),
        ("2e3", Decimal(2000)),
        ("2E3", Decimal(2000)),
        ("2e+3", Decimal(2000)),
        ("25e-2", Decimal("0.25")),
        ("1.5e1", Decimal(15)),
        ("1e30", Decimal("1e30")),
        ("1e-30", Decimal("1e-30")),
        (" 4 ", Decimal(4)),
        (8, Decimal(8)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity_gives_the_exact_value(text: str | int | float, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "m",
        "Ki",
        "1 Ki",
        "1KI",
        "1ki",
        "1K",
        "1mi",
        "1.2.3",
        "1e",
        "1e1.5",
        "1e31",
        "1e-31",
        "--1",
        "+-1",
        "0x10",
        "1_000",
        "\uff11",
        "٣",
        "inf",
        "nan",
        "1" * 65,
        True,
        False,
        None,
        [1],
        {"cpu": 1},
        float("inf"),
        float("nan"),
    ],
)
def test_invalid_quantities_raise_quantity_error(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)  # type: ignore[arg-type]


def test_quantity_error_quotes_the_value() -> None:
    with pytest.raises(QuantityError, match="'12 apples'"):
        parse_quantity("12 apples")


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("1", 1000),
        ("100m", 100),
        ("0.1", 100),
        ("1.0001", 1001),
        ("0.5m", 1),
        ("1n", 1),
        ("1500u", 2),
        ("2.5", 2500),
        ("1k", 1_000_000),
        ("0", 0),
        ("-100m", -100),
        ("-1.5m", -1),
        (2, 2000),
    ],
)
def test_cpu_millis_rounds_up_to_a_millicore(text: str | int, millis: int) -> None:
    assert cpu_millis(text) == millis
    assert isinstance(cpu_millis(text), int)


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1", 1),
        ("1.5", 2),
        ("1n", 1),
        ("999m", 1),
        ("1000m", 1),
        ("1001m", 2),
        ("1Gi", 2**30),
        ("128974848", 128974848),
        ("129e6", 129_000_000),
        ("123Mi", 123 * 2**20),
        ("0.5Ki", 512),
        ("-1.5", -1),
        ("8", 8),
    ],
)
def test_base_units_round_up_to_a_whole_unit(text: str, units: int) -> None:
    assert base_units(text) == units


@given(st.text(max_size=80))
def test_any_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(value, Decimal)
    assert value.is_finite()


@given(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "e2", "e-2", "m"]),
)
def test_integer_with_suffix_scales_exactly(number: int, suffix: str) -> None:
    factors = {
        "": Decimal(1),
        "k": Decimal(10**3),
        "M": Decimal(10**6),
        "G": Decimal(10**9),
        "Ki": Decimal(2**10),
        "Mi": Decimal(2**20),
        "Gi": Decimal(2**30),
        "e2": Decimal(100),
        "e-2": Decimal("0.01"),
        "m": Decimal("0.001"),
    }
    assert parse_quantity(f"{number}{suffix}") == number * factors[suffix]


@given(st.decimals(min_value=-(10**6), max_value=10**6, places=6, allow_nan=False))
def test_cpu_millis_is_the_ceiling_of_a_thousand_times_the_value(value: Decimal) -> None:
    millis = cpu_millis(str(value))
    assert millis - 1 < value * 1000 <= millis
