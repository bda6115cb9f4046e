"""Kubernetes resource quantities ("500m", "64Gi", "1.5", "2e3") as numbers.

`parse_quantity` follows the API's quantity grammar: a signed decimal number, then either a binary
suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix (n u m "" k M G T P E) or a decimal exponent (e3,
E-2). The scheduler compares CPU in millicores and everything else in base units, so
`cpu_millis` and `base_units` round up the way kube-scheduler does (a request of "1.0001" CPU asks
for 1001 millicores).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext

from topology.text import quote

BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
MAX_LENGTH = 64
MAX_INTEGER_BITS = 128
"""Largest integer (in bits) accepted as a quantity; the scheduler's arrays hold int64."""
PRECISION = 100
"""Decimal digits kept: more than any quantity of MAX_LENGTH characters has."""
_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message quotes it, cut to
    `topology.text.MAX_ECHO` characters."""


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity (a string of the grammar, an int of at most
    `MAX_INTEGER_BITS` bits or a finite float). Raises QuantityError for anything else."""
    with localcontext(prec=PRECISION):
        return _parse(value)


def _parse(value: str | int | float) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {quote(value)}")
    if isinstance(value, int):
        if value.bit_length() > MAX_INTEGER_BITS:
            raise QuantityError(f"invalid quantity {quote(value)}: out of range")
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {quote(value)}")
        return Decimal(str(value))
    if not isinstance(value, str) or len(value) > MAX_LENGTH:
        raise QuantityError(f"invalid quantity {quote(value)}")
    match = _QUANTITY_RE.match(value.strip())
    if match is None:
        raise QuantityError(f"invalid quantity {quote(value)}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"invalid quantity {quote(value)}") from error
    suffix = match["suffix"] or ""
    if suffix in BINARY_SUFFIXES:
        return number * BINARY_SUFFIXES[suffix]
    if suffix in DECIMAL_SUFFIXES:
        return number * DECIMAL_SUFFIXES[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError(f"invalid quantity {quote(value)}: exponent out of range")
    return number.scaleb(exponent)


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up."""
    with localcontext(prec=PRECISION):
        return math.ceil(parse_quantity(value) * 1000)


def base_units(value: str | int | float) -> int:
    """Bytes, pods, GPUs ...: the quantity rounded up to a whole unit."""
    return math.ceil(parse_quantity(value))
